"""A small time-to-live cache for tool outputs and provider answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cachetools import FIFOCache

__all__ = ["TTLCache"]


class TTLCache:
    """Values kept for ``ttl_s`` seconds, keyed on anything hashable (tool outputs, provider answers).

    A TTL of 0 or less caches nothing. When full, the entry closest to expiry makes room.
    """

    def __init__(self, ttl_s: float, *, max_entries: int = 256, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        # Every entry lives one TTL from its last put, so the first in is the first to expire:
        # first-in-first-out eviction is closest-to-expiry eviction.
        self._data: FIFOCache[Any, tuple[float, Any]] = FIFOCache(maxsize=max(1, max_entries))

    def get(self, key: Any) -> Any | None:
        """The live value for ``key``, or ``None``."""
        hit = self._data.get(key)
        if hit is None:
            return None
        expires, value = hit
        if expires < self._clock():
            del self._data[key]
            return None
        return value

    def put(self, key: Any, value: Any) -> None:
        """Remember ``value`` for the TTL (no-op when the TTL is 0)."""
        if self._ttl <= 0:
            return
        self._data[key] = (self._clock() + self._ttl, value)
