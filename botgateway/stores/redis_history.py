"""Conversation history in Redis: atomic scripts per write, pipelines per group, versions, and the fencing check.

Keys of one conversation (its id in a ``{hash tag}``, so all of them live in
the same Redis Cluster slot and one script may touch them together):

- ``conv:{<id>}:order`` — LIST of turn ids, oldest first (a summary, if any, first);
- ``conv:{<id>}:turns`` — HASH turn id → turn JSON;
- ``conv:{<id>}:version`` — STRING, changed by every history write of any replica, so a replica that
  keeps a copy of the history in memory can tell in one round trip whether its copy is current;
- ``conv:{<id>}:fence`` — STRING, the fencing token of the conversation's newest lease
  (:mod:`botgateway.fleet.lease` moves it at each acquisition);
- ``conv:{<id>}:lease`` — STRING, who holds the conversation's lease (same module).

Multi-key writes run as Lua scripts, which Redis executes atomically, so two
replicas never see half a turn. Conversation keys expire ``history_ttl_s``
after the last write. Several history writes (the writer's group) or reads go
out as one pipeline: one round trip, each script still atomic.

A conversation's version never repeats: when its key is missing (a new,
cleared-long-ago or expired conversation) the next write seeds it from Redis's
clock in microseconds instead of starting again at 1, so a copy cached before
an expiry can never match a version written after it. Fencing tokens are seeded
the same way, so they never go back either.

**Fencing.** A write that carries a token (:attr:`~botgateway.stores.base.HistoryWrite.fence`)
older than the conversation's current one is refused inside the same script
that would apply it: the writer lost the lease and another process has the
conversation now. Nothing changes and the reply says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from botgateway.stores._codec import decode_turn, encode_turn
from botgateway.stores.base import HistorySnapshot, HistoryWrite, VersionStep

__all__ = ["SEED_FROM_CLOCK", "ConversationKeys", "RedisHistory", "conversation_keys"]

SEED_FROM_CLOCK = """
local function seed()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end
"""
"""Lua: a number from Redis's clock in microseconds, for counters that must never go back after an expiry."""

# Bumps the version key; returns {before, after} (before 0: there was none). Prepended to every history write.
_BUMP = SEED_FROM_CLOCK + """
local function bump(key, ttl)
  local before = tonumber(redis.call('GET', key) or '0')
  local after
  if before > 0 then
    after = redis.call('INCR', key)
  else
    local s = seed()
    redis.call('SET', key, s)
    after = tonumber(s)
  end
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
  return {before, after, 0}
end
local function fenced_out(fence_key, version_key, token)
  if token == '' or tonumber(token) >= tonumber(redis.call('GET', fence_key) or '0') then
    return nil
  end
  local version = tonumber(redis.call('GET', version_key) or '0')
  return {version, version, 1}
end
"""

# KEYS: order, turns, version, fence. ARGV: ttl_ms (0 = keep), fence ('' = none), turn_id, body.
_APPEND = _BUMP + """
local refused = fenced_out(KEYS[4], KEYS[3], ARGV[2])
if refused then return refused end
if redis.call('HSETNX', KEYS[2], ARGV[3], ARGV[4]) == 1 then
  redis.call('RPUSH', KEYS[1], ARGV[3])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return bump(KEYS[3], ttl)
"""

# KEYS: order, turns, version, fence.
# ARGV: ttl_ms, fence, has_summary ('1'/'0'), summary_id, summary_body, remove_ids...
_REPLACE = _BUMP + """
local refused = fenced_out(KEYS[4], KEYS[3], ARGV[2])
if refused then return refused end
for i = 6, #ARGV do
  redis.call('LREM', KEYS[1], 0, ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if ARGV[3] == '1' then
  redis.call('LREM', KEYS[1], 0, ARGV[4])
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
  redis.call('LPUSH', KEYS[1], ARGV[4])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return bump(KEYS[3], ttl)
"""

# KEYS: order, turns, version, fence. ARGV: ttl_ms, fence. The version is kept (bumped), so cached copies see the clear.
_CLEAR = _BUMP + """
local refused = fenced_out(KEYS[4], KEYS[3], ARGV[2])
if refused then return refused end
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


@dataclass(frozen=True)
class ConversationKeys:
    """The Redis keys of one conversation (all in one cluster slot)."""

    order: str
    """LIST of turn ids, oldest first."""
    turns: str
    """HASH turn id → turn JSON."""
    version: str
    """STRING moved by every history write."""
    fence: str
    """STRING: the fencing token of the newest lease."""
    lease: str
    """STRING: the holder of the conversation's lease."""


def conversation_keys(prefix: str, conversation_id: str) -> ConversationKeys:
    """The keys of ``conversation_id`` under ``prefix``."""
    base = f"{prefix}conv:{{{conversation_id}}}"
    return ConversationKeys(f"{base}:order", f"{base}:turns", f"{base}:version", f"{base}:fence", f"{base}:lease")


class RedisHistory:
    """The history scripts of one key prefix, on a shared client.

    Args:
        client: The store's client (its errors are the store's to translate).
        prefix: Prepended to every key.
        ttl_ms: Idle time after which a conversation expires, in ms (0: never).
    """

    def __init__(self, client: aioredis.Redis, prefix: str, *, ttl_ms: int) -> None:
        self._redis = client
        self._prefix = prefix
        self._ttl_ms = ttl_ms
        self._append = client.register_script(_APPEND)
        self._replace = client.register_script(_REPLACE)
        self._clear = client.register_script(_CLEAR)
        self._load = client.register_script(_LOAD)

    def _keys(self, conversation_id: str) -> list[str]:
        keys = conversation_keys(self._prefix, conversation_id)
        return [keys.order, keys.turns, keys.version, keys.fence]

    async def load_histories(
        self, conversation_ids: Sequence[str], *, unless_version: Mapping[str, int] | None = None
    ) -> dict[str, HistorySnapshot]:
        """Several conversations in one pipeline; one whose version is still ``unless_version[id]`` is not read."""
        ids = list(dict.fromkeys(conversation_ids))
        known = unless_version or {}
        if not ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for cid in ids:
                await self._load(keys=self._keys(cid)[:3], args=[str(known[cid]) if cid in known else ""], client=pipe)
            replies = await pipe.execute()
        return {cid: _snapshot(reply) for cid, reply in zip(ids, replies, strict=True)}

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        """Apply ``writes`` in order as one pipeline of atomic scripts; how each moved its conversation's version."""
        if not writes:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for write in writes:
                await self._queue_write(pipe, write)
            replies = await pipe.execute()
        return [VersionStep(int(before), int(after), refused=bool(int(refused))) for before, after, refused in replies]

    async def _queue_write(self, pipe: Any, write: HistoryWrite) -> None:
        """Add ``write``'s script to ``pipe``."""
        keys = self._keys(write.conversation_id)
        head: list[Any] = [self._ttl_ms, "" if write.fence is None else str(int(write.fence))]
        if write.kind == "append":
            assert write.turn is not None
            await self._append(keys=keys, args=[*head, write.turn.turn_id, encode_turn(write.turn)], client=pipe)
        elif write.kind == "replace":
            summary = write.turn
            args = head + (["0", "", ""] if summary is None else ["1", summary.turn_id, encode_turn(summary)])
            args += list(dict.fromkeys(write.remove_ids))
            await self._replace(keys=keys, args=args, client=pipe)
        else:
            await self._clear(keys=keys, args=head, client=pipe)


def _snapshot(reply: Sequence[Any]) -> HistorySnapshot:
    """One conversation's :data:`_LOAD` reply as a snapshot."""
    version, changed, *bodies = reply
    turns = tuple(decode_turn(body) for body in bodies) if int(changed) else None
    return HistorySnapshot(turns, int(version))
