"""The shared store for several replicas: Redis through ``redis.asyncio``.

Layout under ``prefix`` (the conversation id sits in a ``{hash tag}`` so both
keys of one conversation live in the same Redis Cluster slot):

- ``conv:{<id>}:order`` — LIST of turn ids, oldest first (a summary, if any, first);
- ``conv:{<id>}:turns`` — HASH turn id → turn JSON;
- ``conv:{<id>}:version`` — STRING, changed by every history write of any replica, so a replica that
  keeps a copy of the history in memory can tell in one round trip whether its copy is current;
- ``dedupe:<key>`` — STRING set with ``SET NX PX`` (the TTL is Redis's own);
- ``open_cards`` — HASH ``["platform","card_id"]`` → card JSON;
- ``instances`` — ZSET gateway instance id → heartbeat expiry (Redis's own clock, in ms);
- ``audit`` — STREAM of audit records (capped, approximately, at ``audit_max_len``);
- ``tool_calls:{<turn id>}`` — HASH ``call_id:phase`` → tool-call row JSON, until the turn's audit record;
- ``counter:<key>`` — STRING counter of a per-principal limit, expiring with its window;
- ``lease:<key>`` — ZSET holder → lease expiry (Redis's clock, in ms): concurrent turns of a principal;
- ``tool_calls`` — ZSET of the turns with such rows → time of their last row (capped at ``audit_max_len``).

Multi-key writes run as Lua scripts, which Redis executes atomically, so two
replicas never see half a turn. Conversation keys expire ``history_ttl_s``
after the last write. Several history writes (the writer's group) or reads go
out as one pipeline: one round trip, each script still atomic.

A conversation's version never repeats: when its key is missing (a new,
cleared-long-ago or expired conversation) the next write seeds it from Redis's
clock in microseconds instead of starting again at 1, so a copy cached before
an expiry can never match a version written after it.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

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
    StoreError,
    ToolCallRow,
    VersionStep,
)

__all__ = ["RedisStore", "mask_text", "mask_url"]

log = structlog.get_logger(__name__)

# Bumps the version key; returns {before, after} (before 0: there was none). Prepended to every history write.
_BUMP = """
local function bump(key, ttl)
  local before = tonumber(redis.call('GET', key) or '0')
  local after
  if before > 0 then
    after = redis.call('INCR', key)
  else
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('SET', key, seed)
    after = tonumber(seed)
  end
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
  return {before, after}
end
"""

# KEYS: order, turns, version. ARGV: ttl_ms (0 = keep), turn_id, body.
_APPEND = _BUMP + """
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 1 then
  redis.call('RPUSH', KEYS[1], ARGV[2])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return bump(KEYS[3], ttl)
"""

# KEYS: order, turns, version. ARGV: ttl_ms, has_summary ('1'/'0'), summary_id, summary_body, remove_ids...
_REPLACE = _BUMP + """
for i = 5, #ARGV do
  redis.call('LREM', KEYS[1], 0, ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if ARGV[2] == '1' then
  redis.call('LREM', KEYS[1], 0, ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('LPUSH', KEYS[1], ARGV[3])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return bump(KEYS[3], ttl)
"""

# KEYS: order, turns, version. ARGV: ttl_ms. The version is kept (bumped), so cached copies see the clear.
_CLEAR = _BUMP + """
redis.call('DEL', KEYS[1], KEYS[2])
return bump(KEYS[3], tonumber(ARGV[1]))
"""

# KEYS: order, turns, version. ARGV: the caller's version ('' for none).
# Returns {version, 0} when that is still the version, else {version, 1, bodies in list order...}: one snapshot.
_LOAD = """
local version = redis.call('GET', KEYS[3]) or '0'
if ARGV[1] ~= '' and ARGV[1] == version then
  return {version, 0}
end
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
local out = {version, 1}
for start = 1, #ids, 500 do
  local chunk = {}
  for i = start, math.min(start + 499, #ids) do chunk[#chunk + 1] = ids[i] end
  local bodies = redis.call('HMGET', KEYS[2], unpack(chunk))
  for _, body in ipairs(bodies) do
    if body then out[#out + 1] = body end
  end
end
return out
"""

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
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS).
        prefix: Prepended to every key, so deployments can share one Redis.
        history_ttl_s: Conversations idle longer than this expire; ``None`` keeps them.
        audit_max_len: Approximate cap on the audit stream's length.
        audit_retention_s: Audit records (and tool-call rows) older than this are trimmed as new ones are written.
        client: An existing client to use instead of connecting to ``url`` (not closed by :meth:`close`).
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
            self._redis: aioredis.Redis = client or aioredis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=5, health_check_interval=30
            )
        except ValueError as exc:
            raise StoreError(
                f"memory.redis_url {self.safe_url!r} is not a Redis URL ({exc}); "
                "expected redis://[:password@]host:port/db"
            ) from None
        self._append = self._redis.register_script(_APPEND)
        self._replace = self._redis.register_script(_REPLACE)
        self._clear = self._redis.register_script(_CLEAR)
        self._load = self._redis.register_script(_LOAD)
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
                f"cannot {doing} Redis at {self.safe_url}: {mask_text(str(exc)).rstrip('. ') or type(exc).__name__}; "
                "check memory.redis_url and that Redis is running (or set memory.store: sqlite)"
            ) from None

    # --- keys -----------------------------------------------------------------------

    def _conv_keys(self, conversation_id: str) -> list[str]:
        base = f"{self.prefix}conv:{{{conversation_id}}}"
        return [f"{base}:order", f"{base}:turns", f"{base}:version"]

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
        ids = list(dict.fromkeys(conversation_ids))
        known = unless_version or {}
        if not ids:
            return {}
        async with self._errors(), self._redis.pipeline(transaction=False) as pipe:
            for cid in ids:
                await self._load(keys=self._conv_keys(cid), args=[str(known[cid]) if cid in known else ""], client=pipe)
            replies = await pipe.execute()
        return {cid: _snapshot(reply) for cid, reply in zip(ids, replies, strict=True)}

    async def append_turn(self, conversation_id: str, turn: StoredTurn) -> None:
        """Commit one completed turn atomically; committing the same ``turn_id`` again is a no-op."""
        await self.write_history([HistoryWrite(conversation_id, "append", turn)])

    async def replace_turns(self, conversation_id: str, remove_ids: Sequence[str], summary: StoredTurn | None) -> None:
        """Atomically drop ``remove_ids`` and put ``summary`` (if any) before the remaining turns."""
        await self.write_history([HistoryWrite(conversation_id, "replace", summary, tuple(dict.fromkeys(remove_ids)))])

    async def clear(self, conversation_id: str) -> None:
        """Forget the conversation (its version is bumped, not deleted: see the module's notes)."""
        await self.write_history([HistoryWrite(conversation_id, "clear")])

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        """Apply ``writes`` in order as one pipeline of atomic scripts; how each moved its conversation's version."""
        if not writes:
            return []
        async with self._errors(), self._redis.pipeline(transaction=False) as pipe:
            for write in writes:
                await self._queue_write(pipe, write)
            replies = await pipe.execute()
        return [VersionStep(int(before), int(after)) for before, after in replies]

    async def _queue_write(self, pipe: Any, write: HistoryWrite) -> None:
        """Add ``write``'s script to ``pipe``."""
        keys = self._conv_keys(write.conversation_id)
        if write.kind == "append":
            assert write.turn is not None
            await self._append(keys=keys, args=[self._ttl_ms(), write.turn.turn_id, encode_turn(write.turn)], client=pipe)
        elif write.kind == "replace":
            summary = write.turn
            args: list[Any] = [self._ttl_ms()]
            args += ["0", "", ""] if summary is None else ["1", summary.turn_id, encode_turn(summary)]
            args += list(dict.fromkeys(write.remove_ids))
            await self._replace(keys=keys, args=args, client=pipe)
        else:
            await self._clear(keys=keys, args=[self._ttl_ms()], client=pipe)

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

    def _audit_key(self) -> str:
        return f"{self.prefix}audit"

    def _calls_key(self, turn_id: str | None = None) -> str:
        return f"{self.prefix}tool_calls" if turn_id is None else f"{self.prefix}tool_calls:{{{turn_id}}}"

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""
        calls = self._calls_key(row.turn_id)
        # Not one transaction: the turn's key and the index live in different cluster slots;
        # an index entry whose rows are gone reads as nothing.
        async with self._errors(), self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(calls, f"{row.call_id}:{row.phase}", encode_tool_call(row))
            if self.history_ttl_s is not None:
                pipe.pexpire(calls, self._ttl_ms())
            pipe.zadd(self._calls_key(), {row.turn_id: row.at})
            pipe.zremrangebyrank(self._calls_key(), 0, -self.audit_max_len - 1)
            await pipe.execute()

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record, then drop the turn's tool-call rows (the record holds its calls)."""
        async with self._errors():
            await self._redis.xadd(
                self._audit_key(),
                {"record": dumps(audit_to_dict(record)), "conversation_id": record.conversation_id},
                maxlen=self.audit_max_len,
                approximate=True,
            )
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(self._calls_key(record.turn_id))
                pipe.zrem(self._calls_key(), record.turn_id)
                if self.audit_retention_s is not None:
                    # Stream ids start with the entry's time in ms: everything before the cutoff is older.
                    expired = time.time() - self.audit_retention_s
                    pipe.xtrim(self._audit_key(), minid=str(int(expired * 1000)), approximate=False)
                    pipe.zremrangebyscore(self._calls_key(), "-inf", expired)
                await pipe.execute()

    async def _unfinished(self, conversation_id: str | None, limit: int) -> list[AuditRecord]:
        """The newest ``limit`` turns (of one conversation, or all) with tool-call rows and no audit record yet."""
        turn_ids = await self._redis.zrevrange(self._calls_key(), 0, -1)
        found: list[AuditRecord] = []
        for start in range(0, len(turn_ids), 200):
            async with self._redis.pipeline(transaction=False) as pipe:
                for turn_id in turn_ids[start : start + 200]:
                    pipe.hvals(self._calls_key(turn_id))
                pages = await pipe.execute()
            for bodies in pages:
                records = unfinished_records(decode_tool_call(body) for body in bodies)
                found += [r for r in records if conversation_id is None or r.conversation_id == conversation_id]
            if len(found) >= limit:
                break
        return found[:limit]

    async def audit_records(self, *, conversation_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first."""
        found: list[AuditRecord] = []
        upper = "+"
        async with self._errors():
            unfinished = await self._unfinished(conversation_id, limit)  # read first: see audit_records's merge
            while len(found) < limit:
                page = await self._redis.xrevrange(self._audit_key(), max=upper, count=max(limit, 200))
                if not page:
                    break
                for entry_id, fields in page:
                    if conversation_id is None or fields.get("conversation_id") == conversation_id:
                        found.append(audit_from_dict(json.loads(fields["record"])))
                        if len(found) == limit:
                            break
                upper = f"({page[-1][0]}"
        found.reverse()
        return merged(found, unfinished, limit)


def _snapshot(reply: Sequence[Any]) -> HistorySnapshot:
    """One conversation's :data:`_LOAD` reply as a snapshot."""
    version, changed, *bodies = reply
    turns = tuple(decode_turn(body) for body in bodies) if int(changed) else None
    return HistorySnapshot(turns, int(version))


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def mask_text(text: str) -> str:
    """Mask ``scheme://user:password@`` inside an error message."""
    return re.sub(r"(\w+://[^:/@\s]*:)[^@\s]+@", r"\1***@", text)
