"""One writer per alert group card at a time, across the fleet.

Alertmanager may send the same group twice at once (two Alertmanager replicas,
a retry racing its original), and a replica's investigation saves its outcome
while another replica folds a new notification into the same record. Each
read-modify-write of a card record therefore holds the record's lock: an
asyncio lock inside the process, and a Store lease (one holder) across it. A
lease whose holder died lapses after its TTL, so a killed replica never blocks
a group for long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog

from botgateway.backoff import Backoff
from botgateway.stores.base import LeaseStore

__all__ = ["GroupLocks"]

log = structlog.get_logger(__name__)

_RETRY = Backoff(base_s=0.02, max_s=0.5, jitter=(0.5, 1.0))
"""Waits between tries while another process holds the lease (no event crosses processes)."""


class GroupLocks:
    """Locks of alert card records: in-process, then a Store lease of ``key`` held by ``holder``."""

    def __init__(self, store: LeaseStore, holder: str, *, ttl_s: float = 60.0, wait_s: float | None = None) -> None:
        """``ttl_s``: a lease outlives a dead holder this long; ``wait_s``: longest wait for another holder, by default
        a little longer than ``ttl_s`` (a live holder never loses it to a waiter; a dead one's lapses). Past it the
        work goes ahead unlocked, logged: an alert shown twice beats an alert lost."""
        self._store = store
        self._holder = holder
        self._ttl_s = ttl_s
        self._wait_s = wait_s if wait_s is not None else ttl_s + 10.0
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the body."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                leased = await self._lease(key)
                try:
                    yield
                finally:
                    if leased:
                        await self._drop(key)
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]  # nobody waits for it: the map holds only locks in use
            else:
                self._locks[key] = (lock, users - 1)

    async def _lease(self, key: str) -> bool:
        deadline = time.monotonic() + self._wait_s
        attempt = 0
        while True:
            try:
                if await self._store.take_lease(f"alertlock:{key}", self._holder, 1, self._ttl_s):
                    return True
            except Exception as exc:  # the Store is down: this process's lock still orders its own writers
                log.warning("alerts.lock_unavailable", key=key, error=type(exc).__name__)
                return False
            if time.monotonic() >= deadline:
                log.warning("alerts.lock_timeout", key=key, wait_s=self._wait_s)
                return False
            await asyncio.sleep(_RETRY.delay(attempt))
            attempt += 1

    async def _drop(self, key: str) -> None:
        try:
            await self._store.drop_lease(f"alertlock:{key}", self._holder)
        except Exception as exc:  # it lapses after its TTL
            log.warning("alerts.unlock_failed", key=key, error=type(exc).__name__)
