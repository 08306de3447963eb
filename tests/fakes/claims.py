"""An in-memory :class:`~botgateway.stores.base.ClaimStore`: dedupe claims with a TTL, and no other concern.

For a part that needs only claims: it shows the part asks nothing else of the Store.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class MemoryClaims:
    """Claims kept in a dict of expiry times, on ``clock`` (monotonic seconds by default)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}
        self.claimed: list[str] = []
        """Every key claimed, in order, whether or not the claim was won."""

    async def claim(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` seconds, False after."""
        self.claimed.append(key)
        now = self._clock()
        if self._until.get(key, now) > now:
            return False
        self._until[key] = now + ttl_s
        return True
