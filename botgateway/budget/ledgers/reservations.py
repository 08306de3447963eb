"""This process's reservations, counted here and told to the fleet: one count per key, refreshed while it lives.

A card reserves and releases calls synchronously, many times a second; the
fleet only needs each process's total per key. The book keeps the counts per
owner, and a single publisher writes the changed totals to Redis in order
(one write at a time, each the total as it is when written, so a slow write
can never overwrite a newer one). Every ``refresh_s`` the totals are written
again with a new expiry: a process that stops refreshing (killed, frozen,
cut off) stops holding anything once its last expiry passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from botgateway.background import BackgroundTasks

__all__ = ["ReservationBook"]


class ReservationBook:
    """Reservations per key and owner, published per key as this process's total."""

    def __init__(
        self,
        publish: Callable[[str, int], Awaitable[None]],
        *,
        on_error: Callable[[BaseException], None],
        refresh_s: float,
        tasks: BackgroundTasks,
    ) -> None:
        """``publish(key, total)`` writes one total; ``on_error`` hears a failed background write (kept to redo)."""
        self._publish = publish
        self._on_error = on_error
        self._refresh_s = refresh_s
        self._tasks = tasks
        self._held: dict[str, dict[str, int]] = {}
        self._dirty: set[str] = set()
        self._lock = asyncio.Lock()
        self._publisher: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self.enabled = True
        """False while the fleet cannot be told (Redis unreachable): changes wait for :meth:`flush`."""

    def count(self, key: str) -> int:
        """Calls of ``key`` this process holds."""
        return sum(self._held.get(key, {}).values())

    def add(self, key: str, owner: str) -> None:
        """``owner`` holds one more call of ``key``."""
        owners = self._held.setdefault(key, {})
        owners[owner] = owners.get(owner, 0) + 1
        self._changed(key)

    async def claim(self, key: str, owner: str, publish_if_free: Callable[[int], Awaitable[bool]]) -> bool:
        """``owner`` holds one more call of ``key`` if ``publish_if_free(total)`` writes this process's new total
        (it does only while the call can be promised); False: nothing changed.

        Taken in turn with :meth:`flush`, so a total written meanwhile can never undo the claim's.
        """
        async with self._lock:
            if not await publish_if_free(self.count(key) + 1):
                return False
            owners = self._held.setdefault(key, {})
            owners[owner] = owners.get(owner, 0) + 1
            self._dirty.discard(key)  # Redis holds this total now
            self._keep_refreshed()
            return True

    def remove_one(self, key: str, owner: str) -> None:
        """``owner`` holds one call of ``key`` less (none: nothing changes)."""
        owners = self._held.get(key, {})
        if not owners.get(owner):
            return
        owners[owner] -= 1
        if not owners[owner]:
            del owners[owner]
        self._changed(key)

    def drop(self, key: str, owner: str) -> None:
        """``owner`` holds nothing of ``key`` any more."""
        if self._held.get(key, {}).pop(owner, None):
            self._changed(key)

    def mark_all(self) -> None:
        """Every key is to be written again (after an outage)."""
        self._dirty.update(self._held)

    async def flush(self) -> None:
        """Write every changed total now, in order; raises what the write raised (the key stays to redo)."""
        async with self._lock:
            while self._dirty:
                key = self._dirty.pop()
                try:
                    await self._publish(key, self.count(key))
                except BaseException:
                    self._dirty.add(key)
                    raise
                if not self._held.get(key):
                    self._held.pop(key, None)

    def _changed(self, key: str) -> None:
        self._dirty.add(key)
        self._keep_refreshed()
        if self.enabled and (self._publisher is None or self._publisher.done()):
            self._publisher = self._tasks.spawn(self._flush_quietly(), name="rate-budget:reservations")

    def _keep_refreshed(self) -> None:
        if self._refresher is None:
            self._refresher = self._tasks.spawn(self._refresh(), name="rate-budget:reservations-refresh")

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._on_error(exc)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            self._dirty.update(key for key, owners in self._held.items() if owners)
            if self.enabled and self._dirty:
                await self._flush_quietly()
