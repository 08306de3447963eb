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
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["closed_port", "free_port"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000
"""Below this, ports are often taken by the machine's own services."""


class _Ports:
    """The ports handed out in this session, and where new ones come from."""

    def __init__(self) -> None:
        self.handed_out: set[int] = set()
        self.rng = random.Random()
        self.highest = _below_ephemeral()


def _below_ephemeral() -> int:
    """The highest port below the kernel's ephemeral range (32767 on Linux by default)."""
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return max(_LOWEST + 1_000, low - 1)


_PORTS = _Ports()


def free_port() -> int:
    """A loopback port nothing listens on now, that no outgoing connection will take, new to this session."""
    for _ in range(1_000):
        port = _PORTS.rng.randint(_LOWEST, _PORTS.highest)
        if port in _PORTS.handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS.handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port between {_LOWEST} and {_PORTS.highest}")


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    return free_port()
