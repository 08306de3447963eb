"""The process's turn slots, shared fairly between askers.

A plain semaphore serves waiting turns first come, first served: one person
sending 40 questions at once takes every slot, and the next person's one-line
question waits behind all 40. :class:`FairSlots` instead caps what one asker
may hold (``per_key``) and, when slots are scarce, hands the next free slot to
the next asker in turn (round-robin by key), each asker's own turns in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["FairSlots", "fair_share"]


def fair_share(total: int, share: float) -> int:
    """How many of ``total`` slots one asker may hold: ``share`` of them, at least one."""
    return max(1, int(total * share))


class FairSlots:
    """``total`` slots, at most ``per_key`` held by one key, granted round-robin by key (mutable; one per process)."""

    def __init__(self, total: int, *, per_key: int) -> None:
        self.total = total
        """Slots in all."""
        self.per_key = max(1, min(per_key, total))
        """Slots one key may hold at once."""
        self._free = total
        self._held: dict[str, int] = {}
        # Insertion order is the round: a key that was just served moves to the back.
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def held(self, key: str) -> int:
        """Slots ``key`` holds now."""
        return self._held.get(key, 0)

    def waiting(self, key: str) -> int:
        """Turns of ``key`` waiting for a slot."""
        return len(self._waiting.get(key, ()))

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold one slot for ``key`` while the block runs (waiting for one first when needed)."""
        await self._acquire(key)
        try:
            yield
        finally:
            self._release(key)

    async def _acquire(self, key: str) -> None:
        if self._free > 0 and self.held(key) < self.per_key and not self._waiting.get(key):
            self._grant(key)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(key)  # granted at the moment it was cancelled: pass the slot on
            else:
                self._forget(key, future)
            raise

    def _grant(self, key: str) -> None:
        self._free -= 1
        self._held[key] = self.held(key) + 1

    def _release(self, key: str) -> None:
        self._free += 1
        left = self.held(key) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)
        self._dispatch()

    def _forget(self, key: str, future: asyncio.Future[None]) -> None:
        line = self._waiting.get(key)
        if line is not None and future in line:
            line.remove(future)
        if line is not None and not line:
            del self._waiting[key]

    def _dispatch(self) -> None:
        """Hand free slots to waiting keys in round order, skipping keys at their cap."""
        while self._free > 0:
            key = next((k for k in self._waiting if self.held(k) < self.per_key), None)
            if key is None:
                return
            line = self._waiting.pop(key)  # served: to the back of the round if it waits for more
            future = line.popleft()
            if line:
                self._waiting[key] = line
            if not future.done():
                self._grant(key)
                future.set_result(None)
