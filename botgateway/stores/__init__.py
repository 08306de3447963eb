"""The Store's contracts (one narrow protocol per concern, :class:`Store` their union), its back-ends, and the
factory that picks one.

SQLite (:mod:`botgateway.stores.sqlite`) is the embedded default for one
process; Redis (:mod:`botgateway.stores.redis`) is for several replicas that
share history, dedupe keys and open cards. Back-end modules are imported only
when chosen, so a deployment on SQLite never needs a reachable Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botgateway.stores.base import (
    UNFINISHED,
    AuditRecord,
    AuditStore,
    ClaimStore,
    ConversationStore,
    CounterStore,
    DocumentStore,
    FeedbackStore,
    HistorySnapshot,
    HistoryWrite,
    InstanceStore,
    LeaseStore,
    Message,
    OpenCard,
    OpenCardStore,
    Store,
    StoredTurn,
    StoreError,
    StoreLifecycle,
    ToolCallRow,
    UsageStore,
    VersionStep,
)

if TYPE_CHECKING:
    from botgateway.config import MemoryConfig
    from botgateway.stores.redis import RedisStore
    from botgateway.stores.sqlite import SqliteStore

__all__ = [
    "UNFINISHED",
    "AuditRecord",
    "AuditStore",
    "ClaimStore",
    "ConversationStore",
    "CounterStore",
    "DocumentStore",
    "FeedbackStore",
    "HistorySnapshot",
    "HistoryWrite",
    "InstanceStore",
    "LeaseStore",
    "Message",
    "OpenCard",
    "OpenCardStore",
    "Store",
    "StoreError",
    "StoreLifecycle",
    "StoredTurn",
    "ToolCallRow",
    "UsageStore",
    "VersionStep",
    "open_store",
]


async def open_store(config: MemoryConfig, *, audit_retention_days: float | None = None) -> Store:
    """Open the store ``config.store`` names and check it is usable right away.

    ``audit_retention_days``: audit records older than this are deleted (``audit.retention_days``).

    Problems (unwritable SQLite folder, unreachable Redis) raise
    :class:`StoreError` at start-up instead of failing the first question.
    """
    history_ttl_s = config.history_ttl_days * 86400.0
    retention_s = None if audit_retention_days is None else audit_retention_days * 86400.0
    store: SqliteStore | RedisStore
    if config.store == "redis":
        from botgateway.stores.redis import RedisStore

        store = RedisStore(
            config.redis_url.get_secret_value(),
            config.redis_prefix,
            history_ttl_s=history_ttl_s,
            audit_retention_s=retention_s,
        )
    else:
        from botgateway.stores.sqlite import SqliteStore

        store = SqliteStore(config.sqlite_path, history_ttl_s=history_ttl_s, audit_retention_s=retention_s)
    try:
        await store.open()
    except BaseException:
        await store.close()
        raise
    return store
