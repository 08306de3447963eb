"""The line between the supervisor of ``botgateway run --workers`` and each worker process: the worker's stdin.

The supervisor starts each worker with one end of a socket pair as its
stdin and keeps the other. Two things travel on it:

- the worker writes :data:`STARTED` once its adapters are up, so the
  supervisor can tell a worker that crashes at start (and give up after a few)
  from one that died while serving (and is restarted);
- when the supervisor goes away (even killed with SIGKILL), the worker reads
  end-of-file and drains as on SIGTERM: no worker outlives its supervisor.

Workers run in their own session, so a Ctrl-C in the terminal reaches the
supervisor alone, which forwards it once; a worker counts every signal (the
second one skips the drain's wait).
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable

import structlog

__all__ = ["STARTED", "WorkerLink", "link_pair"]

log = structlog.get_logger(__name__)

STARTED = b"started\n"
"""What a worker writes once it serves."""


def link_pair() -> tuple[socket.socket, socket.socket]:
    """``(supervisor's end, worker's end)``; the worker's end becomes the worker's stdin."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


class WorkerLink:
    """The worker's end of the line, on its stdin (only when stdin is a socket: a worker started by hand has none)."""

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd if _is_socket(fd) else None
        self._watching = False

    @property
    def present(self) -> bool:
        """True when a supervisor started this worker."""
        return self._fd is not None

    def report_started(self) -> None:
        """Tell the supervisor the worker serves now (nothing without one)."""
        if self._fd is None:
            return
        try:
            os.write(self._fd, STARTED)
        except OSError as exc:  # the supervisor is gone: the watch below stops us
            log.warning("worker.report_failed", error=type(exc).__name__)

    def watch(self, on_gone: Callable[[], None]) -> None:
        """Call ``on_gone()`` once when the supervisor's end closes (it exited, or was killed)."""
        if self._fd is None:
            return
        fd = self._fd
        loop = asyncio.get_running_loop()

        def readable() -> None:
            try:
                data = os.read(fd, 64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                return  # the supervisor writes nothing; ignore anything that is not the end
            self.stop_watching()
            log.warning("worker.supervisor_gone", note="draining as on SIGTERM")
            on_gone()

        loop.add_reader(fd, readable)
        self._watching = True

    def stop_watching(self) -> None:
        """Stop watching (the worker is shutting down anyway). Idempotent."""
        if self._fd is not None and self._watching:
            self._watching = False
            asyncio.get_running_loop().remove_reader(self._fd)


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False
