"""The votes on answers in Redis: one entry per answer and voter, replaced by a second vote.

Two keys, in one hash slot (``{feedback}``) so one script changes both at once:

- ``feedback:{feedback}:votes`` — HASH ``<turn id> <voter>`` → the vote's JSON;
- ``feedback:{feedback}:at`` — ZSET of the same fields → the time of the vote's last change.

The newest ``max_votes`` are kept (an older vote is dropped from both as new
ones come in), and none older than the retention, when one is set.
:class:`~botgateway.stores.redis.RedisStore` delegates here.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from botgateway.stores._codec import decode_feedback, encode_feedback
from botgateway.stores.base import FeedbackRecord

__all__ = ["RedisFeedback"]

# KEYS: votes, at. ARGV: field, body, at, max_votes, oldest_at ('' = no retention).
_RECORD = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local old = {}
if ARGV[5] ~= '' then
  old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])
end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, f in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do table.insert(old, f) end
end
for _, f in ipairs(old) do
  redis.call('ZREM', KEYS[2], f)
  redis.call('HDEL', KEYS[1], f)
end
return 1
"""


def _field(turn_id: str, voter: str) -> str:
    """A vote's field: turn ids never hold a space."""
    return f"{turn_id} {voter}"


class RedisFeedback:
    """Votes under ``prefix``.

    Args:
        redis: The store's client.
        prefix: The deployment's key prefix.
        max_votes: The newest this many votes are kept.
        retention_s: Votes older than this are dropped as new ones are recorded; ``None`` keeps them.
    """

    def __init__(self, redis: aioredis.Redis, prefix: str, *, max_votes: int, retention_s: float | None) -> None:
        self._redis = redis
        self._votes = f"{prefix}feedback:{{feedback}}:votes"
        self._at = f"{prefix}feedback:{{feedback}}:at"
        self._max_votes = max_votes
        self._retention_s = retention_s
        self._record = redis.register_script(_RECORD)

    async def record(self, record: FeedbackRecord) -> None:
        """Keep the vote, replacing the voter's earlier vote on the same answer."""
        oldest = "" if self._retention_s is None else repr(time.time() - self._retention_s)
        await self._record(keys=[self._votes, self._at],
                           args=[_field(record.turn_id, record.voter), encode_feedback(record), repr(record.at),
                                 self._max_votes, oldest])

    async def vote(self, turn_id: str, voter: str) -> FeedbackRecord | None:
        """The voter's vote on the answer, if any."""
        body = await self._redis.hget(self._votes, _field(turn_id, voter))
        return decode_feedback(body) if body is not None else None

    async def records(self, *, since: float | None, limit: int) -> list[FeedbackRecord]:
        """The newest ``limit`` votes changed at or after ``since``, oldest first."""
        lowest = "-inf" if since is None else repr(since)
        # Without scores the reply is the members alone.
        fields = [field for field in await self._redis.zrevrangebyscore(self._at, "+inf", lowest, start=0, num=limit)
                  if isinstance(field, str | bytes)]
        if not fields:
            return []
        bodies = await self._redis.hmget(self._votes, list(reversed(fields)))
        return [decode_feedback(body) for body in bodies if body is not None]
