"""Calls a process takes ahead of need from a large shared token bucket, so most of its calls need no round trip.

A fleet's shared bucket is one Redis script call per grant. For a platform limit
of a few calls a second that is nothing; for a bucket of thousands of calls (an
API whose limit is far above what the cards need) it is a round trip per card
call, one at a time per key, on a busy event loop. Such a bucket is leased: the
process takes a batch of calls from Redis at once, spends them synchronously
(the budget's fast path), and takes the next batch in the background when half
is spent. Small buckets, windows (planned call by call, with reservations) and
limits on arrivals are never leased: every call asks Redis, so the fleet keeps
them exactly. Leased calls are counted in Redis when taken, so the fleet never
spends more than the bucket holds; a throttle drops them.
"""

from __future__ import annotations

from botgateway.budget.rate_limit import RateLimit

__all__ = ["LEASE_FROM_BURST", "LEASE_MOST", "Leases"]

LEASE_MOST = 64
"""The most calls of one key a process holds ahead of need."""

LEASE_FROM_BURST = 256
"""A bucket is leased only when each process's share of its burst is at least this many calls: its leases
(a quarter of that share at most) are then a small part of what the bucket holds."""


class Leases:
    """The calls this process holds ahead of need, per key (mutable; owned by the shared ledger)."""

    def __init__(self, share: int) -> None:
        """``share``: the processes of the fleet, each leasing from the same buckets."""
        self._share = max(int(share), 1)
        self._held: dict[str, int] = {}
        self._refilling: set[str] = set()

    def size(self, limit: RateLimit) -> int:
        """How many calls of ``limit`` a batch takes (0: none is leased, every call asks Redis)."""
        if limit.windowed or limit.arrivals_per_s > 0:
            return 0
        per_process = int(limit.burst) // self._share
        if per_process < LEASE_FROM_BURST:
            return 0
        return min(LEASE_MOST, per_process // 4)

    def take(self, key: str, calls: int = 1) -> int:
        """Spend up to ``calls`` held calls of ``key``; how many were."""
        held = self._held.get(key, 0)
        spent = max(min(held, calls), 0)
        if spent:
            self._held[key] = held - spent
        return spent

    def add(self, key: str, calls: int) -> None:
        """Hold ``calls`` more calls of ``key`` (taken from Redis, or granted and not made)."""
        if calls > 0:
            self._held[key] = self._held.get(key, 0) + calls

    def wants_batch(self, key: str, limit: RateLimit) -> bool:
        """Whether to take the next batch of ``key`` now: it is leased, half of it is spent, none is on its way."""
        size = self.size(limit)
        return size > 0 and key not in self._refilling and self._held.get(key, 0) <= size // 2

    def refilling(self, key: str, on: bool) -> None:
        """A batch of ``key`` is on its way (``on``), or arrived or failed."""
        if on:
            self._refilling.add(key)
        else:
            self._refilling.discard(key)

    def drop(self, key: str) -> None:
        """Forget the calls held of ``key`` (the platform throttled it: they must not go)."""
        self._held.pop(key, None)

    def clear(self) -> None:
        """Forget every call held (Redis is away: the local share answers now)."""
        self._held.clear()
