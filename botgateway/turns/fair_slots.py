"""The process's turn slots, shared fairly between askers.

A plain semaphore serves waiting turns first come, first served: one person
sending 40 questions at once takes every slot, and the next person's one-line
question waits behind all 40. :class:`FairSlots` instead caps what one asker
may hold (``per_key``) and, when slots are scarce, hands the next free slot to
the next asker in turn (round-robin by key), each asker's own turns in order.
A turn that has to wait is told its place in that order (1: next) and told
again whenever it changes, so its card can say where it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog

__all__ = ["FairSlots", "fair_share"]

log = structlog.get_logger(__name__)


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
        # Waiting turns that want to know their place: what to call, and the place last told.
        self._watchers: dict[asyncio.Future[None], tuple[Callable[[int], None], int]] = {}

    def held(self, key: str) -> int:
        """Slots ``key`` holds now."""
        return self._held.get(key, 0)

    def waiting(self, key: str) -> int:
        """Turns of ``key`` waiting for a slot."""
        return len(self._waiting.get(key, ()))

    @asynccontextmanager
    async def hold(self, key: str, *, on_place: Callable[[int], None] | None = None) -> AsyncIterator[None]:
        """Hold one slot for ``key`` while the block runs (waiting for one first when needed).

        ``on_place(place)`` is called when the turn has to wait, with its place among the waiting turns in the
        order they will be served (1: next), and again whenever that place changes; never once it holds a slot.
        """
        await self._acquire(key, on_place)
        try:
            yield
        finally:
            self._release(key)

    def places(self) -> dict[asyncio.Future[None], int]:
        """Each waiting turn's place in the order slots will be handed out: round-robin by key, each key's turns in
        order (1: next). Keys at their cap are served once they give a slot back; the order ignores that."""
        order: dict[asyncio.Future[None], int] = {}
        lines = list(self._waiting.values())
        depth = max((len(line) for line in lines), default=0)
        for round_ in range(depth):
            for line in lines:
                if round_ < len(line):
                    order[line[round_]] = len(order) + 1
        return order

    async def _acquire(self, key: str, on_place: Callable[[int], None] | None) -> None:
        if self._free > 0 and self.held(key) < self.per_key and not self._waiting.get(key):
            self._grant(key)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(future)
        if on_place is not None:
            self._watchers[future] = (on_place, 0)
        self._tell_places()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(key)  # granted at the moment it was cancelled: pass the slot on
            else:
                self._forget(key, future)
            raise
        finally:
            self._watchers.pop(future, None)

    def _tell_places(self) -> None:
        """Tell every watching waiter whose place changed its new place (a watcher's failure is only logged)."""
        if not self._watchers:
            return
        places = self.places()
        for future, (tell, told) in list(self._watchers.items()):
            place = places.get(future, 0)
            if place == told or not place:
                continue
            self._watchers[future] = (tell, place)
            try:
                tell(place)
            except Exception as exc:
                log.warning("turns.place_watcher_failed", error=type(exc).__name__)

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
        self._tell_places()

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
                self._watchers.pop(future, None)
                future.set_result(None)
                self._tell_places()
