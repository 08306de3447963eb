"""The embedded store: one SQLite file (WAL mode) through ``aiosqlite``.

The file and its folder are created on first use; the connections (writes
serialized on one, reads beside them on another), the write lock and the
cancel-proof write transactions are
:class:`~botgateway.stores.sqlite_connection.SqliteConnection`; the history's
queries are :class:`~botgateway.stores.sqlite_history.SqliteHistory`; the
dedupe claims, the audit, the limits, the usage rows and the votes have a module
each (:mod:`~botgateway.stores.sqlite_claims`, :mod:`~botgateway.stores.sqlite_audit`,
:mod:`~botgateway.stores.sqlite_limits`, :mod:`~botgateway.stores.sqlite_usage`,
:mod:`~botgateway.stores.sqlite_feedback`), to which the store delegates. This
module holds the other queries, one table at a time. Every write that touches
more than one row runs in one transaction, so a crash leaves either the old or
the new state, never half a turn.

Expiry is lazy: a claim whose TTL passed is ignored and overwritten, an idle
conversation (``history_ttl_s``) reads as empty and is deleted when touched,
and a periodic sweep (piggy-backed on writes) deletes the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from botgateway.stores._codec import decode_card, encode_card
from botgateway.stores.base import (
    AuditRecord,
    FeedbackRecord,
    HistorySnapshot,
    HistoryWrite,
    OpenCard,
    StoredTurn,
    ToolCallRow,
    UsageRow,
    VersionStep,
)
from botgateway.stores.sqlite_audit import SqliteAudit
from botgateway.stores.sqlite_claims import SqliteClaims
from botgateway.stores.sqlite_connection import SCHEMA_VERSION, SqliteConnection
from botgateway.stores.sqlite_feedback import SqliteFeedback
from botgateway.stores.sqlite_history import SqliteHistory
from botgateway.stores.sqlite_limits import SqliteLimits
from botgateway.stores.sqlite_usage import SqliteUsage

__all__ = ["SCHEMA_VERSION", "SqliteStore"]


class SqliteStore:
    """:class:`~botgateway.stores.base.Store` on one SQLite file.

    Args:
        path: The database file (``:memory:`` for a throw-away store). Its folder is created.
        history_ttl_s: Conversations idle longer than this are forgotten; ``None`` keeps them.
        audit_max_len: The sweep keeps only this many newest audit records (as the Redis store caps its stream).
        audit_retention_s: The sweep deletes audit records (and tool-call rows) older than this; ``None`` keeps them.
        sweep_interval_s: How often writes also delete expired claims and idle conversations.
        usage_max_rows: The sweep keeps only this many newest usage rows (they go with ``audit_retention_s`` too).
        clock: Wall clock in Unix seconds (injected so tests can move time).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        history_ttl_s: float | None = None,
        audit_max_len: int = 100_000,
        audit_retention_s: float | None = None,
        sweep_interval_s: float = 600.0,
        usage_max_rows: int = 300_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = str(path)
        """The database file as configured."""
        self.history_ttl_s = history_ttl_s
        """Idle time after which a conversation is forgotten (``None``: never)."""
        self.audit_max_len = audit_max_len
        """How many newest audit records the sweep keeps."""
        self.audit_retention_s = audit_retention_s
        """Age past which the sweep deletes audit records (``None``: kept, up to ``audit_max_len``)."""
        self.sweep_interval_s = sweep_interval_s
        """Least time between two sweeps."""
        self._clock = clock
        self._connection = SqliteConnection(self.path)
        self._history = SqliteHistory(self._connection, history_ttl_s=history_ttl_s, clock=clock)
        self._claims = SqliteClaims(self._transaction, clock)
        self._feedback = SqliteFeedback(self._transaction, self._fetchall)
        self._usage = SqliteUsage(self._transaction, self._fetchall, max_rows=usage_max_rows)
        self._audit = SqliteAudit(self._transaction, self._fetchall, max_len=audit_max_len)
        self._limits = SqliteLimits(self._transaction, self._fetchall, clock)
        self._last_sweep = 0.0

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    @property
    def write_transactions(self) -> int:
        """Write transactions committed so far (diagnostics: how well writes are grouped)."""
        return self._connection.committed

    # --- life cycle -------------------------------------------------------------

    async def open(self) -> None:
        """Create the folder, the file and the schema (idempotent); raise :class:`StoreError` if impossible."""
        await self._connection.open()

    async def ping(self) -> None:
        """``SELECT 1`` on the read connection; raises :class:`StoreError` when the file cannot be read."""
        await self._fetchall("SELECT 1")

    async def close(self) -> None:
        """Write the claims already made, then close the connection (idempotent)."""
        await self._claims.aclose()
        await self._connection.close()

    # --- helpers ------------------------------------------------------------------

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self._connection.fetchall(sql, params)

    async def _transaction(self, work: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> Any:
        """Run ``work(db)`` in one write transaction, with the periodic sweep in the same transaction."""

        async def work_then_sweep(db: aiosqlite.Connection) -> Any:
            result = await work(db)
            await self._maybe_sweep(db)
            return result

        return await self._connection.transaction(work_then_sweep)

    async def _maybe_sweep(self, db: aiosqlite.Connection) -> None:
        now = self._clock()
        if now - self._last_sweep < self.sweep_interval_s:
            return
        self._last_sweep = now
        await db.execute("DELETE FROM claims WHERE expires_at <= ?", (now,))
        await SqliteLimits.sweep(db, now)
        expired = None if self.audit_retention_s is None else now - self.audit_retention_s
        await self._audit.sweep(db, expired)
        await self._usage.sweep(db, expired)
        await SqliteFeedback.sweep(db, keep=self._audit.max_len, older_than=expired)
        await self._history.sweep(db)

    # --- history ------------------------------------------------------------------

    async def load_turns(self, conversation_id: str) -> list[StoredTurn]:
        """The conversation's turns, oldest first (a summary turn, if any, comes first)."""
        snapshot = (await self.load_histories([conversation_id]))[conversation_id]
        return list(snapshot.turns or ())

    async def load_histories(
        self, conversation_ids: Sequence[str], *, unless_version: Mapping[str, int] | None = None
    ) -> dict[str, HistorySnapshot]:
        """Several conversations in one query per 500 (on the read connection, beside the writes).

        This store keeps no versions (one process writes it), so ``unless_version`` is ignored.
        """
        return await self._history.load_histories(conversation_ids)

    async def history_index(self, limit: int) -> frozenset[str] | None:
        """The conversations with history (one process writes this file); ``None`` when there are more than ``limit``."""
        return await self._history.conversations(limit)

    async def append_turn(self, conversation_id: str, turn: StoredTurn) -> None:
        """Commit one completed turn atomically; committing the same ``turn_id`` again is a no-op."""
        await self.write_history([HistoryWrite(conversation_id, "append", turn)])

    async def replace_turns(self, conversation_id: str, remove_ids: Sequence[str], summary: StoredTurn | None) -> None:
        """Atomically drop ``remove_ids`` and put ``summary`` (if any) before the remaining turns."""
        await self.write_history([HistoryWrite(conversation_id, "replace", summary, tuple(dict.fromkeys(remove_ids)))])

    async def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""
        await self.write_history([HistoryWrite(conversation_id, "clear")])

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        """Apply ``writes`` in order in one transaction; this store keeps no versions (all ``None``).

        One process writes this file, so fencing tokens are not checked (see :mod:`~botgateway.stores.sqlite_history`).
        """

        async def work(db: aiosqlite.Connection) -> None:
            await self._history.write(db, writes)

        if writes:
            await self._transaction(work)
        return [None] * len(writes)

    # --- dedupe -------------------------------------------------------------------

    async def claim(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` seconds (dedupe), False after.

        The claims of one moment are written together (:mod:`~botgateway.stores.sqlite_claims`).
        """
        return await self._claims.claim(key, ttl_s)

    # --- limits -------------------------------------------------------------------

    async def add_to_counter(self, key: str, amount: int, ttl_s: float) -> int:
        """Atomically add ``amount`` (0 reads) to counter ``key`` and return its new total (see the protocol)."""
        return await self._limits.add_to_counter(key, amount, ttl_s)

    async def take_lease(self, key: str, holder: str, limit: int, ttl_s: float) -> bool:
        """Hold one of ``limit`` leases of ``key`` for ``ttl_s`` seconds; False when all are held by others."""
        return await self._limits.take_lease(key, holder, limit, ttl_s)

    async def drop_lease(self, key: str, holder: str) -> None:
        """Give back ``holder``'s lease of ``key`` (nothing when it holds none)."""
        await self._limits.drop_lease(key, holder)

    # --- documents ----------------------------------------------------------------

    async def get_document(self, key: str) -> dict[str, Any] | None:
        """The JSON document under ``key``, or None when absent or expired."""
        rows = await self._fetchall("SELECT data FROM documents WHERE key = ? AND expires_at > ?", (key, self._clock()))
        if not rows:
            return None
        data = json.loads(rows[0][0])
        return data if isinstance(data, dict) else None

    async def put_document(self, key: str, data: Mapping[str, Any], ttl_s: float) -> None:
        """Store ``data`` under ``key`` for ``ttl_s`` seconds (expired documents of any key are dropped too)."""
        text, now = json.dumps(dict(data), ensure_ascii=False), self._clock()

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM documents WHERE expires_at <= ?", (now,))
            await db.execute("INSERT OR REPLACE INTO documents (key, data, expires_at) VALUES (?, ?, ?)",
                             (key, text, now + ttl_s))

        await self._transaction(work)

    # --- open cards ---------------------------------------------------------------

    async def add_open_card(self, card: OpenCard) -> None:
        """Remember a card that is streaming."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT OR REPLACE INTO open_cards (platform, card_id, created_at, body) VALUES (?, ?, ?, ?)",
                (card.platform, card.card_id, card.created_at, encode_card(card)),
            )

        await self._transaction(work)

    async def remove_open_card(self, platform: str, card_id: str) -> None:
        """Forget a card once it is finalized."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM open_cards WHERE platform = ? AND card_id = ?", (platform, card_id))

        await self._transaction(work)

    async def open_cards(self, platform: str | None = None) -> list[OpenCard]:
        """Cards still open, oldest first (all platforms when ``platform`` is None)."""
        rows = await self._fetchall(
            "SELECT body FROM open_cards WHERE (? IS NULL OR platform = ?) ORDER BY created_at, card_id",
            (platform, platform),
        )
        return [decode_card(row[0]) for row in rows]

    # --- liveness -----------------------------------------------------------------

    async def heartbeat(self, instance_id: str, ttl_s: float) -> None:
        """Mark the gateway process ``instance_id`` live for the next ``ttl_s`` seconds."""
        now = self._clock()

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM instances WHERE expires_at <= ?", (now,))
            await db.execute(
                "INSERT INTO instances (instance_id, expires_at) VALUES (?, ?) "
                "ON CONFLICT (instance_id) DO UPDATE SET expires_at = excluded.expires_at",
                (instance_id, now + ttl_s),
            )

        await self._transaction(work)

    async def live_instances(self) -> set[str]:
        """Ids of the gateway processes whose last heartbeat has not expired."""
        rows = await self._fetchall("SELECT instance_id FROM instances WHERE expires_at > ?", (self._clock(),))
        return {row[0] for row in rows}

    async def forget_instance(self, instance_id: str) -> None:
        """Drop ``instance_id``'s heartbeat at once (a clean shutdown)."""

        async def work(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM instances WHERE instance_id = ?", (instance_id,))

        await self._transaction(work)

    # --- audit --------------------------------------------------------------------

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""
        await self._audit.record_tool_call(row)

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record; the turn's tool-call rows are dropped in the same transaction."""
        await self._audit.record_audit(record)

    async def audit_records(self, *, conversation_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first; unfinished turns too."""
        return await self._audit.records(conversation_id, limit)

    # --- usage --------------------------------------------------------------------

    async def record_usage(self, rows: Sequence[UsageRow]) -> None:
        """Append model calls' usage rows in one transaction."""
        await self._usage.record(rows)

    async def usage_rows(self, *, since: float | None = None, limit: int = 100_000) -> list[UsageRow]:
        """The newest ``limit`` usage rows recorded from ``since`` on, oldest first."""
        return await self._usage.rows(since, limit)

    # --- feedback -----------------------------------------------------------------

    async def record_feedback(self, record: FeedbackRecord) -> None:
        """Keep ``record``, replacing the same voter's earlier vote on the same answer."""
        await self._feedback.record(record)

    async def feedback_vote(self, turn_id: str, voter: str) -> FeedbackRecord | None:
        """``voter``'s vote on the answer of ``turn_id``, if any."""
        return await self._feedback.vote(turn_id, voter)

    async def feedback_records(self, *, since: float | None = None, limit: int = 1000) -> list[FeedbackRecord]:
        """The newest ``limit`` votes (changed at or after ``since``, when given), oldest first."""
        return await self._feedback.records(since=since, limit=limit)
