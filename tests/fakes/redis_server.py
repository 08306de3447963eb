"""A real ``redis-server`` the test owns: started on a free loopback port, killed and started again at will.

For what the shared Redis on 6379 cannot do in a test: go away in the middle of
a run and come back (on the same port, empty, as a restarted Redis without
persistence does).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from pathlib import Path

import redis.asyncio as aioredis

__all__ = ["RedisServer", "closed_port"]


def closed_port() -> int:
    """A loopback port nothing listens on right now (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:<port>``, without persistence."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        self._binary = binary
        self._folder = folder
        self.port = closed_port()
        """The port, kept across restarts."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start the server and wait until it answers."""
        self._process = subprocess.Popen(
            [self._binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self._folder)],
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
