"""Conversation history in the SQLite file: reads in batches, writes grouped into the caller's transaction.

Tables ``conversations`` (when each was last written) and ``turns`` (one row
per turn, ordered by ``seq``; a summary takes a ``seq`` before the first).
Expiry is lazy: an idle conversation (``history_ttl_s``) reads as empty, is
deleted before it is written again, and the store's periodic sweep deletes the
rest (:meth:`SqliteHistory.sweep`). One process writes this file, so no
fencing token is checked here: the gateway's per-conversation line is the lease.
:class:`~botgateway.stores.sqlite.SqliteStore` runs the transactions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import aiosqlite

from botgateway.stores._codec import decode_turn, encode_turn
from botgateway.stores.base import HistorySnapshot, HistoryWrite, StoredTurn
from botgateway.stores.sqlite_connection import SqliteConnection

__all__ = ["SqliteHistory"]

_CHUNK = 500
"""Ids per statement: SQLite's bound-parameter limit is 999 on older builds."""


class SqliteHistory:
    """The history queries of one SQLite file.

    Args:
        connection: The file's connections (reads run beside the writes).
        history_ttl_s: Conversations idle longer than this are forgotten; ``None`` keeps them.
        clock: Wall clock in Unix seconds (the store's, so tests can move time).
    """

    def __init__(self, connection: SqliteConnection, *, history_ttl_s: float | None, clock: Callable[[], float]) -> None:
        self._connection = connection
        self._history_ttl_s = history_ttl_s
        self._clock = clock

    def _idle_before(self) -> float | None:
        if self._history_ttl_s is None:
            return None
        return self._clock() - self._history_ttl_s

    async def load_histories(self, conversation_ids: Sequence[str]) -> dict[str, HistorySnapshot]:
        """Several conversations in one query per 500 (on the read connection, beside the writes)."""
        ids = list(dict.fromkeys(conversation_ids))
        cutoff = self._idle_before()
        found: dict[str, list[StoredTurn]] = {cid: [] for cid in ids}
        touched: dict[str, float] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = await self._connection.fetchall(
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

    async def conversations(self, limit: int) -> frozenset[str] | None:
        """The conversations with turns (on the read connection); ``None`` when there are more than ``limit``."""
        rows = await self._connection.fetchall(
            "SELECT DISTINCT conversation_id FROM turns LIMIT ?", (limit + 1,)
        )
        return frozenset(row[0] for row in rows) if len(rows) <= limit else None

    def _expiry(self, updated_at: float | None) -> float | None:
        if updated_at is None or self._history_ttl_s is None:
            return None
        return updated_at + self._history_ttl_s

    async def write(self, db: aiosqlite.Connection, writes: Sequence[HistoryWrite]) -> None:
        """Apply ``writes`` in order, inside the caller's write transaction."""
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

    async def sweep(self, db: aiosqlite.Connection) -> None:
        """Delete the conversations idle past the TTL (the store's periodic sweep, inside its transaction)."""
        cutoff = self._idle_before()
        if cutoff is None:
            return
        await db.execute(
            "DELETE FROM turns WHERE conversation_id IN (SELECT conversation_id FROM conversations WHERE updated_at < ?)",
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
        for start in range(0, len(conversation_ids), _CHUNK):
            chunk = list(conversation_ids[start : start + _CHUNK])
            marks = ",".join("?" * len(chunk))
            await db.execute(
                "DELETE FROM turns WHERE conversation_id IN (SELECT conversation_id FROM conversations "
                f"WHERE conversation_id IN ({marks}) AND updated_at < ?)",
                (*chunk, cutoff),
            )
            await db.execute(
                f"DELETE FROM conversations WHERE conversation_id IN ({marks}) AND updated_at < ?", (*chunk, cutoff)
            )

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
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
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
