"""A real ``redis-server`` the test owns: started on a free loopback port, killed and started again at will.

For what the shared Redis on 6379 cannot do in a test: go away in the middle of
a run and come back (on the same port, empty, as a restarted Redis without
persistence does).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import redis.asyncio as aioredis

from tests.fakes.tls import TlsFiles
from tests.ports import closed_port

__all__ = ["RedisServer", "closed_port"]


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:<port>``, without persistence.

    Args:
        folder: Its working directory.
        password: Its ``requirepass`` (also the ``masterauth`` a replica uses), if any.
        args: More ``redis-server`` options (``--replicaof 127.0.0.1 <port>``).
        tls: Speak only TLS on the port, with these files (a replica's link to its master too).
    """

    def __init__(
        self, folder: Path, *, password: str | None = None, args: Sequence[str] = (), tls: TlsFiles | None = None
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        self._binary = binary
        self._folder = folder
        self.port = closed_port()
        """The port, kept across restarts."""
        self.password = password
        """The password clients give, if any."""
        self.tls = tls
        """The TLS files, when it speaks TLS."""
        self._args = ["--port", str(self.port)]
        if tls is not None:
            self._args = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(tls.cert),
                          "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                          "--tls-auth-clients", "no", "--tls-replication", "yes"]
        if password is not None:
            self._args += ["--requirepass", password, "--masterauth", password]
        self._args += list(args)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:<port>/0`` (``rediss://…?ssl_ca_certs=<CA>`` with TLS)."""
        auth = f":{self.password}@" if self.password is not None else ""
        if self.tls is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start the server and wait until it answers."""
        self._process = subprocess.Popen(
            [self._binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self._folder),
             *self._args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = aioredis.Redis.from_url(self.url)
        try:
            async with asyncio.timeout(20):
                while True:
                    if self._process.poll() is not None:
                        raise RuntimeError(f"redis-server on port {self.port} exited with {self._process.returncode}")
                    try:
                        await client.ping()
                        return
                    except (ConnectionError, OSError, aioredis.ConnectionError):
                        await asyncio.sleep(0.05)  # polling a process we started: nothing to await instead
        finally:
            await client.aclose()

    def kill(self) -> None:
        """SIGKILL the server and reap it: its port refuses connections from now on."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None
