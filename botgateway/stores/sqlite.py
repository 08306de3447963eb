"""The embedded store: one SQLite file (WAL mode) through ``aiosqlite``.

The file and its folder are created on first use; the connections (writes
serialized on one, reads beside them on another), the write lock and the
cancel-proof write transactions are
:class:`~botgateway.stores.sqlite_connection.SqliteConnection`. This module
holds the queries, one table at a time. Every write that touches more than one
row runs in one transaction, so a crash leaves either the old or the new state,
never half a turn.

Expiry is lazy: a claim whose TTL passed is ignored and overwritten, an idle
conversation (``history_ttl_s``) reads as empty and is deleted when touched,
and a periodic sweep (piggy-backed on writes) deletes the rest.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from botgateway.stores._codec import (
    audit_from_dict,
    audit_to_dict,
    decode_card,
    decode_tool_call,
    decode_turn,
    dumps,
    encode_card,
    encode_tool_call,
    encode_turn,
)
from botgateway.stores._unfinished import merged, unfinished_records
from botgateway.stores.base import (
    AuditRecord,
    HistorySnapshot,
    HistoryWrite,
    OpenCard,
    StoredTurn,
    ToolCallRow,
    VersionStep,
)
from botgateway.stores.sqlite_connection import SCHEMA_VERSION, SqliteConnection

__all__ = ["SCHEMA_VERSION", "SqliteStore"]


class SqliteStore:
    """:class:`~botgateway.stores.base.Store` on one SQLite file.

    Args:
        path: The database file (``:memory:`` for a throw-away store). Its folder is created.
        history_ttl_s: Conversations idle longer than this are forgotten; ``None`` keeps them.
        audit_max_len: The sweep keeps only this many newest audit records (as the Redis store caps its stream).
        audit_retention_s: The sweep deletes audit records (and tool-call rows) older than this; ``None`` keeps them.
        sweep_interval_s: How often writes also delete expired claims and idle conversations.
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
        self._last_sweep = 0.0

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    # --- life cycle -------------------------------------------------------------

    async def open(self) -> None:
        """Create the folder, the file and the schema (idempotent); raise :class:`StoreError` if impossible."""
        await self._connection.open()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
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

    def _idle_before(self) -> float | None:
        if self.history_ttl_s is None:
            return None
        return self._clock() - self.history_ttl_s

    async def _maybe_sweep(self, db: aiosqlite.Connection) -> None:
        now = self._clock()
        if now - self._last_sweep < self.sweep_interval_s:
            return
        self._last_sweep = now
        await db.execute("DELETE FROM claims WHERE expires_at <= ?", (now,))
        await db.execute("DELETE FROM counters WHERE expires_at <= ?", (now,))
        await db.execute("DELETE FROM leases WHERE expires_at <= ?", (now,))
        # A bot answering for months must not grow the file without bound.
        await db.execute("DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - ?", (self.audit_max_len,))
        await db.execute("DELETE FROM tool_calls WHERE id <= (SELECT MAX(id) FROM tool_calls) - ?", (self.audit_max_len,))
        if self.audit_retention_s is not None:
            expired = now - self.audit_retention_s
            await db.execute("DELETE FROM audit WHERE started_at < ?", (expired,))
            await db.execute("DELETE FROM tool_calls WHERE json_extract(body, '$.at') < ?", (expired,))
        cutoff = self._idle_before()
        if cutoff is not None:
            await db.execute(
                "DELETE FROM turns WHERE conversation_id IN "
                "(SELECT conversation_id FROM conversations WHERE updated_at < ?)",
                (cutoff,),
            )
            await db.execute("DELETE FROM conversations WHERE updated_at < ?", (cutoff,))

    async def _touch(self, db: aiosqlite.Connection, conversation_ids: Sequence[str]) -> None:
        now = self._clock()
        await db.executemany(
            "INSERT INTO conversations (conversation_id, updated_at) VALUES (?, ?) "
            "ON CONFLICT (conversation_id) DO UPDATE SET updated_at = excluded.updated_at",
            [(cid, now) for cid in conversation_ids],
        )

    async def _forget_if_idle(self, db: aiosqlite.Connection, conversation_ids: Sequence[str]) -> None:
        """Delete the conversations idle past the TTL before writing to them (so an old history never returns)."""
        cutoff = self._idle_before()
        if cutoff is None:
            return
        for start in range(0, len(conversation_ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = list(conversation_ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            await db.execute(
                "DELETE FROM turns WHERE conversation_id IN (SELECT conversation_id FROM conversations "
                f"WHERE conversation_id IN ({marks}) AND updated_at < ?)",
                (*chunk, cutoff),
            )
            await db.execute(
                f"DELETE FROM conversations WHERE conversation_id IN ({marks}) AND updated_at < ?", (*chunk, cutoff)
            )

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
        ids = list(dict.fromkeys(conversation_ids))
        cutoff = self._idle_before()
        found: dict[str, list[StoredTurn]] = {cid: [] for cid in ids}
        touched: dict[str, float] = {}
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._fetchall(
                "SELECT t.conversation_id, t.body, c.updated_at "
                "FROM turns t JOIN conversations c USING (conversation_id) "
                f"WHERE t.conversation_id IN ({marks}) AND (? IS NULL OR c.updated_at >= ?) "
                "ORDER BY t.conversation_id, t.seq",
                (*chunk, cutoff, cutoff),
            )
            for conversation_id, body, updated_at in rows:
                found[conversation_id].append(decode_turn(body))
                touched[conversation_id] = float(updated_at)
        return {
            cid: HistorySnapshot(tuple(turns), None, self._expiry(touched.get(cid))) for cid, turns in found.items()
        }

    def _expiry(self, updated_at: float | None) -> float | None:
        if updated_at is None or self.history_ttl_s is None:
            return None
        return updated_at + self.history_ttl_s

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
        """Apply ``writes`` in order in one transaction; this store keeps no versions (all ``None``)."""

        async def work(db: aiosqlite.Connection) -> None:
            # A run of writes of one kind is a few statements, not a few per write: every statement is
            # a hop to the connection's thread and back through the event loop, with the write lock held.
            for kind, grouped in itertools.groupby(writes, key=lambda write: write.kind):
                run = list(grouped)
                ids = list(dict.fromkeys(write.conversation_id for write in run))
                if kind == "clear":
                    await db.executemany("DELETE FROM turns WHERE conversation_id = ?", [(cid,) for cid in ids])
                    await db.executemany("DELETE FROM conversations WHERE conversation_id = ?", [(cid,) for cid in ids])
                    continue
                await self._forget_if_idle(db, ids)
                if kind == "append":
                    await self._append(db, run)
                else:
                    for write in run:
                        await self._replace(db, write.conversation_id, write.remove_ids, write.turn)
                await self._touch(db, ids)

        if writes:
            await self._transaction(work)
        return [None] * len(writes)

    async def _append(self, db: aiosqlite.Connection, appends: Sequence[HistoryWrite]) -> None:
        """Append each write's turn after its conversation's last (a turn id already there is left alone)."""
        rows = []
        for write in appends:
            assert write.turn is not None
            turn = write.turn
            rows.append((write.conversation_id, turn.turn_id, int(turn.is_summary), encode_turn(turn), write.conversation_id))
        await db.executemany(
            "INSERT INTO turns (conversation_id, turn_id, seq, is_summary, body) "
            "SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM turns WHERE conversation_id = ? "
            "ON CONFLICT (conversation_id, turn_id) DO NOTHING",
            rows,
        )

    async def _replace(
        self, db: aiosqlite.Connection, conversation_id: str, remove_ids: Sequence[str], summary: StoredTurn | None
    ) -> None:
        ids = list(dict.fromkeys(remove_ids))
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            await db.execute(
                f"DELETE FROM turns WHERE conversation_id = ? AND turn_id IN ({marks})",
                (conversation_id, *chunk),
            )
        if summary is not None:
            await db.execute(
                "INSERT OR REPLACE INTO turns (conversation_id, turn_id, seq, is_summary, body) "
                "SELECT ?, ?, COALESCE(MIN(seq), 1) - 1, ?, ? FROM turns WHERE conversation_id = ?",
                (conversation_id, summary.turn_id, int(summary.is_summary), encode_turn(summary), conversation_id),
            )

    # --- dedupe -------------------------------------------------------------------

    async def claim(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` seconds (dedupe), False after."""
        now = self._clock()

        async def work(db: aiosqlite.Connection) -> bool:
            # An expired claim is replaced; a live one makes the insert a no-op.
            cursor = await db.execute(
                "INSERT INTO claims (key, expires_at) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at "
                "WHERE claims.expires_at <= ?",
                (key, now + ttl_s, now),
            )
            return cursor.rowcount == 1

        return bool(await self._transaction(work))

    # --- limits -------------------------------------------------------------------

    async def add_to_counter(self, key: str, amount: int, ttl_s: float) -> int:
        """Atomically add ``amount`` (0 reads) to counter ``key`` and return its new total (see the protocol)."""
        now = self._clock()

        async def work(db: aiosqlite.Connection) -> int:
            # An expired counter starts again from ``amount``; a live one keeps its expiry.
            await db.execute(
                "INSERT INTO counters (key, value, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET "
                "value = CASE WHEN counters.expires_at <= ? THEN excluded.value ELSE counters.value + excluded.value END, "
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

    async def audit_records(self, *, conversation_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
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
