"""A real Redis Sentinel the test owns: ``redis-server <sentinel.conf> --sentinel`` watching a test's redis-server.

It runs on a free loopback port with its configuration written in the test's
folder (a Sentinel rewrites its file as it learns replicas and failovers). One
Sentinel with a quorum of 1 may fail the master over on its own, which is what
a test of a failover needs; real deployments run three or more.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import redis.asyncio as aioredis

from tests.fakes.redis_server import RedisServer, closed_port
from tests.fakes.tls import TlsFiles

__all__ = ["SERVICE", "RedisSentinel"]

SERVICE = "botgateway-master"
"""The master's name in the Sentinel (the URL's service name)."""

_START_TIMEOUT_S = 20.0
"""Hang guard while a process we started comes up (not a timing assertion)."""


class RedisSentinel:
    """One Sentinel process on ``127.0.0.1:<port>`` watching ``master`` as :data:`SERVICE`.

    Args:
        folder: Where its configuration file goes.
        master: The redis-server it watches (its password, if any, is given to the Sentinel).
        password: The Sentinel's own ``requirepass``, if any.

    A master that speaks TLS gets a Sentinel that speaks only TLS too, to its clients and to the master.
    """

    def __init__(self, folder: Path, master: RedisServer, *, password: str | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        self._folder = folder
        self._master = master
        self.password = password
        """The password a client gives the Sentinel, if any."""
        self.port = closed_port()
        """The Sentinel's port."""
        self.tls: TlsFiles | None = master.tls
        """The TLS files, when it speaks TLS."""
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, *, db: int = 0) -> str:
        """``redis+sentinel://[:master password@]127.0.0.1:<port>/<service>/<db>[?sentinel_password=…]``.

        With TLS: ``rediss+sentinel://…`` and ``ssl_ca_certs=<the CA>``.
        """
        auth = f":{self._master.password}@" if self._master.password is not None else ""
        options = {"sentinel_password": self.password} if self.password is not None else {}
        if self.tls is not None:
            options["ssl_ca_certs"] = str(self.tls.ca)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        scheme = "rediss+sentinel" if self.tls is not None else "redis+sentinel"
        return f"{scheme}://{auth}127.0.0.1:{self.port}/{SERVICE}/{db}" + (f"?{query}" if query else "")

    def client(self) -> aioredis.Redis:
        """A plain client of the Sentinel itself (for SENTINEL commands and its event channels)."""
        tls = {"ssl": True, "ssl_ca_certs": str(self.tls.ca)} if self.tls is not None else {}
        return aioredis.Redis(host="127.0.0.1", port=self.port, password=self.password, decode_responses=True, **tls)

    async def start(self) -> None:
        """Start it and wait until it names the master's address."""
        self._folder.mkdir(parents=True, exist_ok=True)
        conf = self._folder / "sentinel.conf"
        lines = [f"port {self.port}"]
        if self.tls is not None:
            lines = [
                "port 0",
                f"tls-port {self.port}",
                f"tls-cert-file {self.tls.cert}",
                f"tls-key-file {self.tls.key}",
                f"tls-ca-cert-file {self.tls.ca}",
                "tls-auth-clients no",
                "tls-replication yes",  # to the master too
            ]
        lines += [
            "bind 127.0.0.1",
            f"dir {self._folder}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self._master.port} 1",
            # Only the test fails the master over (SENTINEL FAILOVER), never a slow, busy machine.
            f"sentinel down-after-milliseconds {SERVICE} 600000",
            f"sentinel failover-timeout {SERVICE} 60000",
        ]
        if self._master.password is not None:
            lines.append(f"sentinel auth-pass {SERVICE} {self._master.password}")
        if self.password is not None:
            lines.append(f"requirepass {self.password}")
        conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._process = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        async with self.client() as client, asyncio.timeout(_START_TIMEOUT_S):
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"redis sentinel on port {self.port} exited with {self._process.returncode}")
                try:
                    if await client.sentinel_get_master_addr_by_name(SERVICE):
                        return
                except (ConnectionError, OSError, aioredis.ConnectionError):
                    pass
                await asyncio.sleep(0.05)  # polling a process we started: nothing to await instead

    async def master_port(self) -> int:
        """The port of the master the Sentinel names now."""
        async with self.client() as client:
            _, port = await client.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def kill(self) -> None:
        """SIGKILL the Sentinel and reap it."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None
