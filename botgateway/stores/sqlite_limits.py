"""The per-principal limits in the SQLite file: tables ``counters`` (a count that expires with its window) and
``leases`` (holders of one of a limited number of places, each expiring).

Expired counters and leases are ignored when read and taken over when written;
the store's periodic sweep deletes the rest (:meth:`SqliteLimits.sweep`).
:class:`~botgateway.stores.sqlite.SqliteStore` delegates here.
"""

from __future__ import annotations

from collections.abc import Callable

import aiosqlite

from botgateway.stores.sqlite_types import Fetch, Transaction

__all__ = ["SqliteLimits"]


class SqliteLimits:
    """Counters and leases on the store's connections.

    Args:
        transaction: The store's write transaction.
        fetchall: The store's read statement.
        clock: Wall clock in Unix seconds (the store's, so tests can move time).
    """

    def __init__(self, transaction: Transaction, fetchall: Fetch, clock: Callable[[], float]) -> None:
        self._transaction = transaction
        self._fetchall = fetchall
        self._clock = clock

    async def add_to_counter(self, key: str, amount: int, ttl_s: float) -> int:
        """Atomically add ``amount`` (0 reads) to counter ``key`` and return its new total."""
        now = self._clock()
        if amount == 0:  # a read: beside the writes, not a transaction queued behind them
            rows = await self._fetchall("SELECT value FROM counters WHERE key = ? AND expires_at > ?", (key, now))
            return int(rows[0][0]) if rows else 0

        async def work(db: aiosqlite.Connection) -> int:
            # An expired counter starts again from ``amount``; a live one keeps its expiry.
            await db.execute(
                "INSERT INTO counters (key, value, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET "
                "value = CASE WHEN counters.expires_at <= ? THEN excluded.value "
                "ELSE counters.value + excluded.value END, "
                "expires_at = CASE WHEN counters.expires_at <= ? THEN excluded.expires_at ELSE counters.expires_at END",
                (key, amount, now + ttl_s, now, now),
            )
            rows = list(await db.execute_fetchall("SELECT value FROM counters WHERE key = ?", (key,)))
            return int(rows[0][0])

        return int(await self._transaction(work))

    async def take_lease(self, key: str, holder: str, limit: int, ttl_s: float) -> bool:
        """Hold one of ``limit`` leases of ``key`` for ``ttl_s`` seconds; False when all are held by others."""
        now = self._clock()

        async def work(db: aiosqlite.Connection) -> bool:
            await db.execute("DELETE FROM leases WHERE key = ? AND expires_at <= ?", (key, now))
            rows = list(
                await db.execute_fetchall("SELECT COUNT(*), SUM(holder = ?) FROM leases WHERE key = ?", (holder, key))
            )
            held, mine = int(rows[0][0]), int(rows[0][1] or 0)
            if not mine and held >= limit:
                return False
            await db.execute(
                "INSERT OR REPLACE INTO leases (key, holder, expires_at) VALUES (?, ?, ?)", (key, holder, now + ttl_s)
            )
            return True

        return bool(await self._transaction(work))

    async def drop_lease(self, key: str, holder: str) -> None:
        """Give back ``holder``'s lease of ``key`` (nothing when it holds none)."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM leases WHERE key = ? AND holder = ?", (key, holder))

        await self._transaction(work)

    @staticmethod
    async def sweep(db: aiosqlite.Connection, now: float) -> None:
        """Delete the counters and leases expired at ``now``."""
        await db.execute("DELETE FROM counters WHERE expires_at <= ?", (now,))
        await db.execute("DELETE FROM leases WHERE expires_at <= ?", (now,))
