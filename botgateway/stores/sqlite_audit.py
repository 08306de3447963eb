"""The audit in the SQLite file: tables ``audit`` (one record per finished turn) and ``tool_calls`` (each call's
start and end, written as they happen, until the turn's record replaces them).

Records and rows are swept with the rest (:meth:`SqliteAudit.sweep`): beyond
the newest ``audit_max_len``, or older than the retention.
:class:`~botgateway.stores.sqlite.SqliteStore` delegates here.
"""

from __future__ import annotations

import json

import aiosqlite

from botgateway.stores._codec import audit_from_dict, audit_to_dict, decode_tool_call, dumps, encode_tool_call
from botgateway.stores._unfinished import merged, unfinished_records
from botgateway.stores.base import AuditRecord, ToolCallRow
from botgateway.stores.sqlite_types import Fetch, Transaction

__all__ = ["SqliteAudit"]


class SqliteAudit:
    """Audit records and tool-call rows on the store's connections.

    Args:
        transaction: The store's write transaction.
        fetchall: The store's read statement.
        max_len: The sweep keeps only this many newest records (and tool-call rows).
    """

    def __init__(self, transaction: Transaction, fetchall: Fetch, *, max_len: int) -> None:
        self._transaction = transaction
        self._fetchall = fetchall
        self.max_len = max_len
        """How many newest records the sweep keeps."""

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT INTO tool_calls (turn_id, conversation_id, body) VALUES (?, ?, ?)",
                (row.turn_id, row.conversation_id, encode_tool_call(row)),
            )

        await self._transaction(work)

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record; the turn's tool-call rows are dropped in the same transaction."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT INTO audit (turn_id, conversation_id, started_at, body) VALUES (?, ?, ?, ?)",
                (record.turn_id, record.conversation_id, record.started_at, dumps(audit_to_dict(record))),
            )
            await db.execute("DELETE FROM tool_calls WHERE turn_id = ?", (record.turn_id,))

        await self._transaction(work)

    async def records(self, conversation_id: str | None, limit: int) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first; unfinished turns too."""
        # The tool-call rows of the newest ``limit`` turns that never ended.
        calls = await self._fetchall(
            "SELECT body FROM tool_calls WHERE turn_id IN (SELECT turn_id FROM tool_calls "
            "WHERE (? IS NULL OR conversation_id = ?) GROUP BY turn_id ORDER BY MAX(id) DESC LIMIT ?) ORDER BY id",
            (conversation_id, conversation_id, limit),
        )
        rows = await self._fetchall(
            "SELECT body FROM (SELECT id, body FROM audit WHERE (? IS NULL OR conversation_id = ?) "
            "ORDER BY id DESC LIMIT ?) ORDER BY id",
            (conversation_id, conversation_id, limit),
        )
        written = [audit_from_dict(json.loads(row[0])) for row in rows]
        return merged(written, unfinished_records(decode_tool_call(call[0]) for call in calls), limit)

    async def sweep(self, db: aiosqlite.Connection, expired: float | None) -> None:
        """Delete records and rows beyond the newest ``max_len``, and older than ``expired`` (Unix time; ``None``:
        none by age). A bot answering for months must not grow the file without bound."""
        await db.execute("DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - ?", (self.max_len,))
        await db.execute("DELETE FROM tool_calls WHERE id <= (SELECT MAX(id) FROM tool_calls) - ?", (self.max_len,))
        if expired is not None:
            await db.execute("DELETE FROM audit WHERE started_at < ?", (expired,))
            await db.execute("DELETE FROM tool_calls WHERE json_extract(body, '$.at') < ?", (expired,))
