"""Loopback ports for the servers a test starts in another process, or for a port nothing listens on.

A port asked from the kernel with ``bind(port 0)`` comes from the ephemeral
range (``/proc/sys/net/ipv4/ip_local_port_range``), the same range every
outgoing connection of the machine takes its local port from. Between the
moment a test learns such a port and the moment the subprocess binds it (a
second or more: the process has to start), an outgoing connection of the
test or of another subprocess may take it, and the server cannot listen; and
a port handed out once may be handed out again to the next server of the same
test. So the ports here come from below the ephemeral range, which the kernel
never hands out by itself, and never twice in one test session.

Under pytest-xdist each worker is a session of its own, with its own memory of
what it handed out: two workers could hand out the same free port, one second
apart, to two servers still starting. So each worker draws from its own slice
of the range (worker ``gwN`` of ``PYTEST_XDIST_WORKER_COUNT``), and no port is
ever handed out by two workers.
"""

from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Mapping
from pathlib import Path

__all__ = ["closed_port", "free_port", "port_range"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000
"""Below this, ports are often taken by the machine's own services."""


def _below_ephemeral() -> int:
    """The highest port below the kernel's ephemeral range (32767 on Linux by default)."""
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return max(_LOWEST + 1_000, low - 1)


def port_range(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """The ports (lowest, highest, both included) this session may hand out: its xdist worker's slice, or all."""
    lowest, highest = _LOWEST, _below_ephemeral()
    worker = re.fullmatch(r"gw(\d+)", environ.get("PYTEST_XDIST_WORKER", ""))
    try:
        count = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        count = 1
    if worker is None or count < 2:
        return lowest, highest
    index = int(worker.group(1)) % count
    width = (highest - lowest + 1) // count
    start = lowest + index * width
    return start, start + width - 1


class _Ports:
    """The ports handed out in this session, and where new ones come from."""

    def __init__(self) -> None:
        self.handed_out: set[int] = set()
        self.rng = random.Random()
        self.lowest, self.highest = port_range()


_PORTS = _Ports()


def free_port() -> int:
    """A loopback port nothing listens on now, that no outgoing connection will take, new to this session and
    to every other xdist worker of it."""
    for _ in range(1_000):
        port = _PORTS.rng.randint(_PORTS.lowest, _PORTS.highest)
        if port in _PORTS.handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS.handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port between {_PORTS.lowest} and {_PORTS.highest}")


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    return free_port()
