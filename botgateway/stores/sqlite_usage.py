"""The usage rows in SQLite: table ``model_usage`` (:data:`USAGE_SCHEMA`), one JSON row per model call, found by
its time.

Rows are written in groups (the turn's calls together), read newest first up to
a limit, and swept with the audit records: older than the audit retention, or
beyond the newest ``max_rows``. A row's ``row_id`` is unique: a group written
again (a retry) adds only the rows not yet there.
:class:`~botgateway.stores.sqlite.SqliteStore` delegates here.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiosqlite

from botgateway.stores._usage_codec import decode_usage, encode_usage
from botgateway.stores.base import UsageRow
from botgateway.stores.sqlite_types import Fetch, Transaction

__all__ = ["USAGE_SCHEMA", "SqliteUsage", "prepare_usage"]

USAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS model_usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    body TEXT NOT NULL,
    row_id TEXT
);
CREATE INDEX IF NOT EXISTS model_usage_at ON model_usage (at);
"""
"""The table of usage rows (part of the store's schema; :func:`prepare_usage` creates it)."""


async def prepare_usage(db: aiosqlite.Connection) -> None:
    """Create the table, or give one of an earlier release its ``row_id`` column; then its unique index."""
    await db.executescript(USAGE_SCHEMA)
    columns = {row[1] for row in await db.execute_fetchall("PRAGMA table_info(model_usage)")}
    if "row_id" not in columns:
        await db.execute("ALTER TABLE model_usage ADD COLUMN row_id TEXT")
    # NULLs are distinct in a unique index: rows of an earlier release (no id) all stay.
    await db.execute("CREATE UNIQUE INDEX IF NOT EXISTS model_usage_row ON model_usage (row_id)")


class SqliteUsage:
    """Usage rows on the store's connections.

    Args:
        transaction: The store's write transaction.
        fetchall: The store's read statement.
        max_rows: The sweep keeps only this many newest rows.
    """

    def __init__(self, transaction: Transaction, fetchall: Fetch, *, max_rows: int) -> None:
        self._transaction = transaction
        self._fetchall = fetchall
        self.max_rows = max_rows
        """How many newest rows the sweep keeps."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        """Append ``rows`` in one transaction, but those whose ``row_id`` is already stored."""
        if not rows:
            return
        values = [(row.at, encode_usage(row), row.row_id or None) for row in rows]

        async def work(db: aiosqlite.Connection) -> None:
            await db.executemany("INSERT OR IGNORE INTO model_usage (at, body, row_id) VALUES (?, ?, ?)", values)

        await self._transaction(work)

    async def rows(self, since: float | None, limit: int) -> list[UsageRow]:
        """The newest ``limit`` rows from ``since`` on, oldest first."""
        found = await self._fetchall(
            "SELECT body FROM model_usage WHERE (? IS NULL OR at >= ?) ORDER BY at DESC, id DESC LIMIT ?",
            (since, since, max(0, limit)),
        )
        return [decode_usage(row[0]) for row in reversed(found)]

    async def sweep(self, db: aiosqlite.Connection, expired: float | None) -> None:
        """Delete rows older than ``expired`` (Unix time; ``None``: none by age) and beyond the newest ``max_rows``."""
        await db.execute("DELETE FROM model_usage WHERE id <= (SELECT MAX(id) FROM model_usage) - ?", (self.max_rows,))
        if expired is not None:
            await db.execute("DELETE FROM model_usage WHERE at < ?", (expired,))
