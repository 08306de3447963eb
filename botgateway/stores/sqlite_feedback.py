"""The votes on answers in the SQLite store: one row per answer and voter, replaced by a second vote.

Table ``feedback`` (created with the rest of the schema by
:class:`~botgateway.stores.sqlite_connection.SqliteConnection`): ``turn_id``
and ``voter`` are the key, so a second click changes the vote instead of adding
one; ``at`` (the time of the last change) orders them for ``botgateway feedback``.
"""

from __future__ import annotations

import aiosqlite

from botgateway.stores._codec import decode_feedback, encode_feedback
from botgateway.stores.base import FeedbackRecord
from botgateway.stores.sqlite_types import Fetch, Transaction

__all__ = ["FEEDBACK_SCHEMA", "SqliteFeedback"]

FEEDBACK_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    turn_id TEXT NOT NULL,
    voter TEXT NOT NULL,
    at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (turn_id, voter)
);
CREATE INDEX IF NOT EXISTS feedback_at ON feedback (at);
"""
"""The table of votes (part of the store's schema)."""


class SqliteFeedback:
    """The queries of the ``feedback`` table."""

    def __init__(self, transaction: Transaction, fetch: Fetch) -> None:
        self._transaction = transaction
        self._fetch = fetch

    async def record(self, record: FeedbackRecord) -> None:
        """Insert the vote, or replace the voter's earlier vote on the same answer."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT INTO feedback (turn_id, voter, at, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (turn_id, voter) DO UPDATE SET at = excluded.at, body = excluded.body",
                (record.turn_id, record.voter, record.at, encode_feedback(record)),
            )

        await self._transaction(work)

    async def vote(self, turn_id: str, voter: str) -> FeedbackRecord | None:
        """The voter's vote on the answer, if any."""
        rows = await self._fetch("SELECT body FROM feedback WHERE turn_id = ? AND voter = ?", (turn_id, voter))
        return decode_feedback(rows[0][0]) if rows else None

    async def records(self, *, since: float | None, limit: int) -> list[FeedbackRecord]:
        """The newest ``limit`` votes changed at or after ``since``, oldest first."""
        rows = await self._fetch(
            "SELECT body FROM (SELECT at, turn_id, voter, body FROM feedback WHERE at >= ? "
            "ORDER BY at DESC, turn_id DESC, voter DESC LIMIT ?) ORDER BY at, turn_id, voter",
            (since if since is not None else 0.0, limit),
        )
        return [decode_feedback(row[0]) for row in rows]

    @staticmethod
    async def sweep(db: aiosqlite.Connection, *, keep: int, older_than: float | None) -> None:
        """Keep the newest ``keep`` votes, and none changed before ``older_than`` (when given)."""
        await db.execute(
            "DELETE FROM feedback WHERE rowid NOT IN (SELECT rowid FROM feedback ORDER BY at DESC LIMIT ?)", (keep,)
        )
        if older_than is not None:
            await db.execute("DELETE FROM feedback WHERE at < ?", (older_than,))
