"""The shared store for several replicas: Redis through ``redis.asyncio``.

Layout under ``prefix`` (conversation keys, with the history's scripts, are
:mod:`botgateway.stores.redis_history`):

- ``dedupe:<key>`` — STRING set with ``SET NX PX`` (the TTL is Redis's own);
- ``open_cards`` — HASH ``["platform","card_id"]`` → card JSON;
- ``instances`` — ZSET gateway instance id → heartbeat expiry (Redis's own clock, in ms);
- ``audit``, ``tool_calls…`` — the audit records and running turns' tool calls (:mod:`botgateway.stores.redis_audit`);
- ``counter:<key>`` — STRING counter of a per-principal limit, expiring with its window;
- ``lease:<key>`` — ZSET holder → lease expiry (Redis's clock, in ms): concurrent turns of a principal;
- ``usage:{usage}:…`` — model calls' usage rows, a STREAM (:mod:`botgateway.stores.redis_usage`);
- ``feedback:{feedback}:…`` — the votes on answers (:mod:`botgateway.stores.redis_feedback`).

Multi-key writes run as Lua scripts, which Redis executes atomically. Times
(heartbeats, leases) are Redis's own clock, so replicas' clock skew does not matter.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from botgateway.redaction import redact_text
from botgateway.redis_url import mask_url
from botgateway.stores._codec import decode_card, dumps, encode_card
from botgateway.stores.base import (
    AuditRecord,
    FeedbackRecord,
    HistorySnapshot,
    HistoryWrite,
    OpenCard,
    StoredTurn,
    StoreError,
    ToolCallRow,
    UsageRow,
    VersionStep,
)
from botgateway.stores.redis_audit import RedisAudit
from botgateway.stores.redis_connect import redis_client
from botgateway.stores.redis_feedback import RedisFeedback
from botgateway.stores.redis_history import RedisHistory
from botgateway.stores.redis_usage import RedisUsage

__all__ = ["RedisStore"]

log = structlog.get_logger(__name__)

# KEYS: instances. ARGV: ttl_ms, instance_id. Redis's clock, so replicas' clock skew does not matter.
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
return 1
"""

# KEYS: instances. Returns the ids whose heartbeat has not expired.
_LIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf')
"""

# KEYS: counter. ARGV: amount, ttl_ms. The expiry is set once, when the counter is created.
_COUNT = """
if ARGV[1] == '0' then return tonumber(redis.call('GET', KEYS[1]) or '0') end
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return total
"""

# KEYS: lease. ARGV: holder, limit, ttl_ms. Returns 1 when held. Redis's clock, as for heartbeats.
_LEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class RedisStore:
    """:class:`~botgateway.stores.base.Store` on Redis, shared by several replicas.

    Args:
        url: ``memory.redis_url``: one Redis or a Sentinel's master (see :mod:`botgateway.redis_url`).
        prefix: Prepended to every key, so deployments can share one Redis.
        history_ttl_s: Conversations idle longer than this expire; ``None`` keeps them.
        audit_max_len: Approximate cap on the audit stream's length.
        audit_retention_s: Audit records (and tool-call rows) older than this are trimmed as new ones are written.
        client: An existing client to use instead of connecting to ``url`` (not closed by :meth:`close`).
        usage_max_rows: Approximate cap on the usage stream's length (trimmed by ``audit_retention_s`` too).
    """

    def __init__(
        self,
        url: str,
        prefix: str = "botgateway:",
        *,
        history_ttl_s: float | None = None,
        audit_max_len: int = 100_000,
        audit_retention_s: float | None = None,
        client: aioredis.Redis | None = None,
        usage_max_rows: int = 300_000,
    ) -> None:
        self.safe_url = mask_url(url)
        """The URL with its password masked, for messages."""
        self.prefix = prefix
        """Prepended to every key."""
        self.history_ttl_s = history_ttl_s
        """Idle time after which a conversation expires (``None``: never)."""
        self.audit_max_len = audit_max_len
        """Approximate cap on the audit stream's length."""
        self.audit_retention_s = audit_retention_s
        """Age past which audit records are trimmed (``None``: kept, up to ``audit_max_len``)."""
        self._owns_client = client is None
        try:
            self._redis: aioredis.Redis = client or redis_client(url)
        except ValueError as exc:
            raise StoreError(f"memory.redis_url {self.safe_url!r} is not usable: {exc}") from None
        self._history = RedisHistory(self._redis, prefix, ttl_ms=self._ttl_ms())
        self._audit = RedisAudit(self._redis, prefix, max_len=audit_max_len, retention_s=audit_retention_s,
                                 rows_ttl_ms=self._ttl_ms())
        self._usage = RedisUsage(self._redis, prefix, max_rows=usage_max_rows, retention_s=audit_retention_s)
        self._feedback = RedisFeedback(self._redis, prefix, max_votes=audit_max_len,
                                       retention_s=audit_retention_s)
        self._beat = self._redis.register_script(_BEAT)
        self._live = self._redis.register_script(_LIVE)
        self._count = self._redis.register_script(_COUNT)
        self._lease = self._redis.register_script(_LEASE)

    def __repr__(self) -> str:
        return f"RedisStore({self.safe_url!r}, prefix={self.prefix!r})"

    # --- life cycle -------------------------------------------------------------

    async def open(self) -> None:
        """Check that Redis answers; raise :class:`StoreError` with what to do otherwise."""
        async with self._errors("connect to"):
            await self._redis.ping()

    async def ping(self) -> None:
        """``PING``; raises :class:`StoreError` when Redis does not answer."""
        async with self._errors("reach"):
            await self._redis.ping()

    async def close(self) -> None:
        """Close the connection pool (idempotent)."""
        if self._owns_client:
            await self._redis.aclose()

    @asynccontextmanager
    async def _errors(self, doing: str = "use") -> AsyncIterator[None]:
        try:
            yield
        except RedisError as exc:
            raise StoreError(
                f"cannot {doing} Redis at {self.safe_url}: {redact_text(str(exc)).rstrip('. ') or type(exc).__name__}; "
                "check memory.redis_url and that Redis is running (or set memory.store: sqlite)"
            ) from None

    def _ttl_ms(self) -> int:
        return 0 if self.history_ttl_s is None else max(1, math.ceil(self.history_ttl_s * 1000))

    # --- history ------------------------------------------------------------------

    async def load_turns(self, conversation_id: str) -> list[StoredTurn]:
        """The conversation's turns, oldest first (a summary turn, if any, comes first)."""
        snapshot = (await self.load_histories([conversation_id]))[conversation_id]
        return list(snapshot.turns or ())

    async def load_histories(
        self, conversation_ids: Sequence[str], *, unless_version: Mapping[str, int] | None = None
    ) -> dict[str, HistorySnapshot]:
        """Several conversations in one pipeline; one whose version is still ``unless_version[id]`` is not read."""
        async with self._errors():
            return await self._history.load_histories(conversation_ids, unless_version=unless_version)

    async def history_index(self, limit: int) -> frozenset[str] | None:
        """``None``: every replica writes this history, so no list of its conversations stays true here."""
        return None

    async def append_turn(self, conversation_id: str, turn: StoredTurn) -> None:
        """Commit one completed turn atomically; committing the same ``turn_id`` again is a no-op."""
        await self.write_history([HistoryWrite(conversation_id, "append", turn)])

    async def replace_turns(self, conversation_id: str, remove_ids: Sequence[str], summary: StoredTurn | None) -> None:
        """Atomically drop ``remove_ids`` and put ``summary`` (if any) before the remaining turns."""
        await self.write_history([HistoryWrite(conversation_id, "replace", summary, tuple(dict.fromkeys(remove_ids)))])

    async def clear(self, conversation_id: str) -> None:
        """Forget the conversation (its version is bumped, not deleted: see :mod:`~botgateway.stores.redis_history`)."""
        await self.write_history([HistoryWrite(conversation_id, "clear")])

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        """Apply ``writes`` in order as one pipeline of atomic scripts; a write with a stale fencing token is refused."""
        async with self._errors():
            return list(await self._history.write_history(writes))

    # --- dedupe -------------------------------------------------------------------

    async def claim(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` seconds (dedupe), False after."""
        async with self._errors():
            won = await self._redis.set(
                f"{self.prefix}dedupe:{key}", "1", nx=True, px=max(1, math.ceil(ttl_s * 1000))
            )
        return bool(won)

    # --- limits -------------------------------------------------------------------

    async def add_to_counter(self, key: str, amount: int, ttl_s: float) -> int:
        """Atomically add ``amount`` (0 reads) to counter ``key`` and return its new total (see the protocol)."""
        async with self._errors():
            total = await self._count(
                keys=[f"{self.prefix}counter:{key}"], args=[int(amount), max(1, math.ceil(ttl_s * 1000))]
            )
        return int(total)

    async def take_lease(self, key: str, holder: str, limit: int, ttl_s: float) -> bool:
        """Hold one of ``limit`` leases of ``key`` for ``ttl_s`` seconds; False when all are held by others."""
        async with self._errors():
            held = await self._lease(
                keys=[f"{self.prefix}lease:{key}"], args=[holder, int(limit), max(1, math.ceil(ttl_s * 1000))]
            )
        return bool(held)

    async def drop_lease(self, key: str, holder: str) -> None:
        """Give back ``holder``'s lease of ``key`` (nothing when it holds none)."""
        async with self._errors():
            await self._redis.zrem(f"{self.prefix}lease:{key}", holder)

    # --- documents ----------------------------------------------------------------

    async def get_document(self, key: str) -> dict[str, Any] | None:
        """The JSON document under ``key``, or None when absent or expired."""
        async with self._errors():
            raw = await self._redis.get(f"{self.prefix}doc:{key}")
        if raw is None:
            return None
        data = json.loads(raw)
        return data if isinstance(data, dict) else None

    async def put_document(self, key: str, data: Mapping[str, Any], ttl_s: float) -> None:
        """Store ``data`` under ``key`` for ``ttl_s`` seconds."""
        text = json.dumps(dict(data), ensure_ascii=False)
        async with self._errors():
            await self._redis.set(f"{self.prefix}doc:{key}", text, px=max(1, math.ceil(ttl_s * 1000)))

    # --- open cards ---------------------------------------------------------------

    def _cards_key(self) -> str:
        return f"{self.prefix}open_cards"

    async def add_open_card(self, card: OpenCard) -> None:
        """Remember a card that is streaming."""
        async with self._errors():
            await self._redis.hset(self._cards_key(), dumps([card.platform, card.card_id]), encode_card(card))

    async def remove_open_card(self, platform: str, card_id: str) -> None:
        """Forget a card once it is finalized."""
        async with self._errors():
            await self._redis.hdel(self._cards_key(), dumps([platform, card_id]))

    async def open_cards(self, platform: str | None = None) -> list[OpenCard]:
        """Cards still open, oldest first (all platforms when ``platform`` is None)."""
        async with self._errors():
            bodies = await self._redis.hvals(self._cards_key())
        cards = [decode_card(body) for body in bodies]
        if platform is not None:
            cards = [card for card in cards if card.platform == platform]
        return sorted(cards, key=lambda card: (card.created_at, card.card_id))

    # --- liveness -----------------------------------------------------------------

    def _instances_key(self) -> str:
        return f"{self.prefix}instances"

    async def heartbeat(self, instance_id: str, ttl_s: float) -> None:
        """Mark the gateway process ``instance_id`` live for the next ``ttl_s`` seconds."""
        async with self._errors():
            await self._beat(keys=[self._instances_key()], args=[max(1, math.ceil(ttl_s * 1000)), instance_id])

    async def live_instances(self) -> set[str]:
        """Ids of the gateway processes whose last heartbeat has not expired."""
        async with self._errors():
            return set(await self._live(keys=[self._instances_key()]))

    async def forget_instance(self, instance_id: str) -> None:
        """Drop ``instance_id``'s heartbeat at once (a clean shutdown)."""
        async with self._errors():
            await self._redis.zrem(self._instances_key(), instance_id)

    # --- audit --------------------------------------------------------------------

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""
        async with self._errors():
            await self._audit.record_tool_call(row)

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record, then drop the turn's tool-call rows (the record holds its calls)."""
        async with self._errors():
            await self._audit.record_audit(record)

    async def audit_records(self, *, conversation_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first; unfinished turns too."""
        async with self._errors():
            return await self._audit.records(conversation_id, limit)

    # --- usage --------------------------------------------------------------------

    async def record_usage(self, rows: Sequence[UsageRow]) -> None:
        """Append model calls' usage rows in one pipeline."""
        async with self._errors():
            await self._usage.record(rows)

    async def usage_rows(self, *, since: float | None = None, limit: int = 100_000) -> list[UsageRow]:
        """The newest ``limit`` usage rows recorded from ``since`` on, oldest first."""
        async with self._errors():
            return await self._usage.rows(since, limit)

    # --- feedback -----------------------------------------------------------------

    async def record_feedback(self, record: FeedbackRecord) -> None:
        """Keep ``record``, replacing the same voter's earlier vote on the same answer."""
        async with self._errors():
            await self._feedback.record(record)

    async def feedback_vote(self, turn_id: str, voter: str) -> FeedbackRecord | None:
        """``voter``'s vote on the answer of ``turn_id``, if any."""
        async with self._errors():
            return await self._feedback.vote(turn_id, voter)

    async def feedback_records(self, *, since: float | None = None, limit: int = 1000) -> list[FeedbackRecord]:
        """The newest ``limit`` votes (changed at or after ``since``, when given), oldest first."""
        async with self._errors():
            return await self._feedback.records(since=since, limit=limit)
