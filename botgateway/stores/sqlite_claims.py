"""Dedupe claims on SQLite, the claims of one moment written by one statement.

Every question's first step is its dedupe claim, a write. SQLite has one write
connection, and each transaction on it costs several event-loop round trips
to its thread, so when a burst of questions arrives at once their claims would
queue one transaction after another and the last question would start seconds
after the first. Instead the claims made in the same moment are gathered (as
the history cache gathers its reads) and written by one multi-row upsert whose
``RETURNING`` names the keys that were free: one transaction, one round trip,
however many questions arrived.

A key claimed twice in one batch is granted to its first claimer only, exactly
as if the claims had been written one after the other.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import aiosqlite

from botgateway.background import BackgroundTasks
from botgateway.stores.base import StoreError
from botgateway.stores.sqlite_types import Transaction

__all__ = ["MAX_CLAIM_BATCH", "SqliteClaims"]

MAX_CLAIM_BATCH = 400
"""Claims written by one statement at most (two bound values each, far below SQLite's limit of 32,766)."""


class SqliteClaims:
    """``await claim(key, ttl_s)``: True the first time ``key`` is seen within ``ttl_s`` seconds.

    Args:
        transaction: The store's write transaction.
        clock: Unix time (the claims' expiry).
    """

    def __init__(self, transaction: Transaction, clock: Callable[[], float]) -> None:
        self._transaction = transaction
        self._clock = clock
        self._pending: list[tuple[str, float, asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._background = BackgroundTasks()

    async def claim(self, key: str, ttl_s: float) -> bool:
        """Claim ``key``; the claims of this moment are written together."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._pending.append((key, ttl_s, future))
        if self._writer is None or self._writer.done():
            self._writer = self._background.spawn(self._write(), name="sqlite-claims")
            if self._writer is None:
                self._fail(self._take_all(), StoreError("the SQLite store is closed; nothing was claimed"))
        # Shielded: a caller giving up must not cancel the statement the other claimers wait for.
        return await asyncio.shield(future)

    async def aclose(self) -> None:
        """Let the claims already gathered be written, then take no more."""
        await self._background.wait()
        await self._background.aclose()

    async def _write(self) -> None:
        while self._pending:
            await asyncio.sleep(0)  # the other questions of this moment join the batch
            batch, self._pending = self._pending[:MAX_CLAIM_BATCH], self._pending[MAX_CLAIM_BATCH:]
            now = self._clock()
            try:
                free = await self._transaction(functools.partial(_upsert, batch=batch, now=now))
            except Exception as exc:
                self._fail(batch, exc)
                continue
            granted: set[str] = set()
            for key, _, future in batch:
                if not future.done():
                    future.set_result(key in free and key not in granted)
                granted.add(key)

    def _take_all(self) -> list[tuple[str, float, asyncio.Future[bool]]]:
        batch, self._pending = self._pending, []
        return batch

    @staticmethod
    def _fail(batch: list[tuple[str, float, asyncio.Future[bool]]], exc: BaseException) -> None:
        for _, _, future in batch:
            if not future.done():
                future.set_exception(exc)


async def _upsert(db: aiosqlite.Connection, batch: list[tuple[str, float, asyncio.Future[bool]]], now: float) -> set[str]:
    """Insert every claim; an expired one is replaced, a live one left alone. Returns the keys claimed now."""
    rows = ", ".join("(?, ?)" for _ in batch)
    params: list[Any] = [value for key, ttl_s, _ in batch for value in (key, now + ttl_s)]
    cursor = await db.execute(
        f"INSERT INTO claims (key, expires_at) VALUES {rows} "  # only placeholders are formatted in
        "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE claims.expires_at <= ? "
        "RETURNING key",
        (*params, now),
    )
    try:
        return {str(row[0]) for row in await cursor.fetchall()}
    finally:
        await cursor.close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a claim's error as seen even when its caller gave up (no "never retrieved" noise)."""
    if not future.cancelled():
        future.exception()
