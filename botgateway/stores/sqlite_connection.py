"""The connections to one SQLite file: writes serialized on one, reads on another, write transactions whole.

The file is in WAL mode, so a reader never waits for a writer: reads run on
their own ``aiosqlite`` connection (and thread) and see the last committed
state, while writes queue on the write connection. An :class:`asyncio.Lock`
serializes the write connection's statements so that a transaction of one task
never interleaves with another task's statements. Every write runs in one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction, shielded from the caller's
cancellation, so a crash or a stop leaves either the old or the new state. An
in-memory database (``:memory:``) exists only on its one connection, so there
reads share the write connection and its lock.
:class:`~botgateway.stores.sqlite.SqliteStore` holds the queries.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from botgateway.stores.base import StoreError
from botgateway.stores.sqlite_feedback import FEEDBACK_SCHEMA
from botgateway.stores.sqlite_usage import prepare_usage

__all__ = ["SCHEMA_VERSION", "SqliteConnection"]

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 4
"""Written to ``PRAGMA user_version``, so a later release can tell which layout a file has."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    conversation_id TEXT PRIMARY KEY,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations (updated_at);
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    is_summary INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    PRIMARY KEY (conversation_id, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_order ON turns (conversation_id, seq);
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_expiry ON claims (expires_at);
CREATE TABLE IF NOT EXISTS open_cards (
    platform TEXT NOT NULL,
    card_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (platform, card_id)
);
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_conversation ON audit (conversation_id, id);
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_calls_turn ON tool_calls (turn_id);
CREATE INDEX IF NOT EXISTS tool_calls_conversation ON tool_calls (conversation_id, id);
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    key TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_expiry ON documents (expires_at);
CREATE TABLE IF NOT EXISTS leases (
    key TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (key, holder)
);
"""


class SqliteConnection:
    """The connections to one SQLite file (WAL mode), with the schema created on first use.

    Args:
        path: The database file (``:memory:`` for a throw-away store, or a ``file:`` URI). Its folder is created.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        """The database file as configured."""
        self._db: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()  # only guards opening the read connection
        self._closed = False
        self.committed = 0
        """Write transactions committed so far (diagnostics: how well writes are grouped)."""
        # A private in-memory database is visible to its own connection only.
        self._shared_reads = path == ":memory:" or "mode=memory" in path

    async def open(self) -> None:
        """Create the folder, the file and the schema (idempotent); raise :class:`StoreError` if impossible."""
        async with self._lock:
            await self._connect()
        await self._read_connection()

    async def close(self) -> None:
        """Close both connections (idempotent); later use raises :class:`StoreError`."""
        async with self._lock, self._read_lock:
            self._closed = True
            for db in (self._reader, self._db):
                if db is not None:
                    await db.close()
            self._db = self._reader = None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read statement, read beside the writes (never queued behind them)."""
        if self._shared_reads:
            async with self._lock:
                return await self._read(await self._connect(), sql, params)
        return await self._read(await self._read_connection(), sql, params)

    async def _read(self, db: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return list(await db.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    async def transaction(self, work: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> Any:
        """Run ``work(db)`` inside one write transaction and return its result.

        The transaction runs in its own task, shielded from the caller's
        cancellation: statements already queued on the connection's thread would
        run anyway, so a transaction cut in half would leave the shared
        connection inside ``BEGIN`` for the next caller. A cancelled caller
        raises ``CancelledError`` at once; its transaction commits or rolls back
        on its own.
        """
        task = asyncio.ensure_future(self._run_transaction(work))
        task.add_done_callback(_consume_exception)
        return await asyncio.shield(task)

    async def _run_transaction(self, work: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> Any:
        async with self._lock:
            db = await self._connect()
            try:
                await db.execute("BEGIN IMMEDIATE")
                try:
                    result = await work(db)
                except BaseException:
                    await db.rollback()
                    raise
                await db.commit()
                self.committed += 1
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            return result

    def _where(self) -> str:
        """The file to open (its folder created), or the path as given for ``:memory:`` and URIs."""
        if self.path == ":memory:" or self.path.startswith("file:"):
            return self.path
        folder = Path(self.path).expanduser().resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        return str(Path(self.path).expanduser().resolve())

    def _check_open(self) -> None:
        if self._closed:
            # Reopening lazily after close() would start a connection thread nobody closes,
            # and that thread keeps the process from exiting.
            raise StoreError("the SQLite store was used after it was closed (during shutdown); nothing was read or saved")

    async def _connect(self) -> aiosqlite.Connection:
        """The write connection, opened (with the schema) on first use; call with ``_lock`` held."""
        if self._db is not None:
            return self._db
        self._check_open()
        where = self.path
        try:
            where = self._where()
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so nothing is implicit.
            db = await aiosqlite.connect(where, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the SQLite store {where}: {_reason(exc)}; "
                "set memory.sqlite_path to a file in a writable folder"
            ) from None
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=NORMAL")
            # Another process on the same file (a CLI next to the server) waits instead of failing.
            await db.execute("PRAGMA busy_timeout=5000")
            await db.execute("PRAGMA foreign_keys=ON")
            await db.executescript(_SCHEMA)
            await db.executescript(FEEDBACK_SCHEMA)
            await prepare_usage(db)
            await db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            await db.close()
            raise StoreError(
                f"cannot use the SQLite store {where}: {_reason(exc)}; "
                "is it a botgateway database on a local, writable disk?"
            ) from None
        self._db = db
        log.debug("store.sqlite.opened", path=where)
        return db

    async def _read_connection(self) -> aiosqlite.Connection:
        """The read connection, opened after the write connection made the schema."""
        if self._reader is not None:
            return self._reader
        if self._shared_reads:
            async with self._lock:
                return await self._connect()
        async with self._lock:
            await self._connect()
        async with self._read_lock:
            if self._reader is not None:
                return self._reader
            self._check_open()
            try:
                reader = await aiosqlite.connect(self._where(), isolation_level=None)
            except (OSError, sqlite3.Error) as exc:
                raise StoreError(f"cannot open the SQLite store {self.path} for reading: {_reason(exc)}") from None
            try:
                await reader.execute("PRAGMA busy_timeout=5000")
                await reader.execute("PRAGMA query_only=ON")  # reads only: a write here would bypass the write lock
            except sqlite3.Error as exc:
                await reader.close()
                raise self._failed(exc) from None
            self._reader = reader
            return reader

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        return StoreError(
            f"the SQLite store {self.path} failed: {_reason(exc)}; "
            "check free disk space and that no other program holds the file"
        )


def _consume_exception(task: asyncio.Future[Any]) -> None:
    """Mark a shielded transaction's error as seen when its caller was cancelled (no "never retrieved" noise)."""
    if not task.cancelled():
        task.exception()


def _reason(exc: BaseException) -> str:
    """The operating system's or SQLite's reason, in lower case."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
