"""Lines shared by the fleet: the order in which the answers of one channel, on any replica, take its new messages.

A Slack channel takes about one new message a second, and in an incident its
answers wait in line for those slots (:class:`~botgateway.sink.ChannelLines`).
Each process keeps its own line, in the order the questions were asked; in a
fleet the questions of one channel are spread over the replicas, and two local
heads would race for each slot: an answer asked later on one replica could
overtake one asked earlier on another, and a replica whose own line is empty
(a Stop control waiting for that) would take a slot another replica's answer
is waiting for. :class:`RedisLines` keeps every line of the fleet in Redis,
ordered by the question's time: a local head goes for its slot only once it
heads the fleet's line too.

Each member has an expiry, pushed forward by its process while it waits: the
places of a process that died leave the line within ``ttl_s`` instead of
holding it up for good. Redis out of reach never stops a line: the local order
goes on alone.

A question holds its place from the moment a replica takes it
(:meth:`RedisLines.announce`), before its turn starts and its card lines up:
in a burst a replica may take a second to start its turns, and a question asked
later on the other replica would go first meanwhile. Its card's place takes the
announcement over when it joins; an announcement no card takes over (a process
that died before its card) leaves the line after ``announced_ttl_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis
import structlog

from botgateway.background import BackgroundTasks, OrderedWrites

__all__ = ["ANNOUNCED_TTL_S", "RedisLines"]

log = structlog.get_logger(__name__)

ANNOUNCED_TTL_S = 5.0
"""How long a question announced holds its place in its channel's line without its card joining: far longer than a
busy replica takes from taking a question to lining its card up (about a second in a burst), short enough that a
question whose card never came (its process died first) holds nobody up for long."""

# KEYS: line (ZSET member → order), expiries (HASH member → unix time). ARGV: now, ttl_s, member, kept members...
# Pushes the kept members' expiries forward, drops expired members off the head, and returns
# {1 if member heads the line (or is not in it), members ahead of it, members in the line}.
_FIRST = """
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 3, #ARGV do
  if ARGV[i] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('HSET', KEYS[2], ARGV[i], tostring(now + ttl))
  end
end
while true do
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #head == 0 then
    break
  end
  if (tonumber(redis.call('HGET', KEYS[2], head[1])) or 0) >= now then
    break
  end
  redis.call('ZREM', KEYS[1], head[1])
  redis.call('HDEL', KEYS[2], head[1])
end
local keep = math.ceil(ttl * 2000)
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
local size = redis.call('ZCARD', KEYS[1])
local rank = redis.call('ZRANK', KEYS[1], ARGV[3])
if not rank then
  return {1, 0, size}
end
if rank == 0 then
  return {1, 0, size}
end
return {0, rank, size}
"""

# KEYS: line, expiries. ARGV: member, order, expiry (unix time), keep_ms, announcement. A member joins (keeping its
# place if in), taking over its question's announcement (which leaves).
_JOIN = """
redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if ARGV[5] ~= '' then
  redis.call('ZREM', KEYS[1], ARGV[5])
  redis.call('HDEL', KEYS[2], ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""

# KEYS: line, expiries. ARGV: member. A member leaves.
_LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


class RedisLines:
    """:class:`~botgateway.sink.FleetLines` in Redis, under the deployment's key prefix.

    Args:
        client: The fleet's Redis connections.
        prefix: The deployment's key prefix.
        ttl_s: How long a member stays without its process pushing its expiry forward (a dead process's places
            leave the line then).
        announced_ttl_s: How long a question announced holds its place without its card joining.
        clock: Unix time (tests move it).
    """

    def __init__(self, client: aioredis.Redis, prefix: str, *, ttl_s: float = 30.0,
                 announced_ttl_s: float = ANNOUNCED_TTL_S, clock: Callable[[], float] = time.time) -> None:
        self._prefix = prefix
        self._ttl_s = ttl_s
        self._announced_ttl_s = announced_ttl_s
        self._clock = clock
        self._first = client.register_script(_FIRST)
        self._join = client.register_script(_JOIN)
        self._leave = client.register_script(_LEAVE)
        self._tasks = BackgroundTasks()
        self._writes = OrderedWrites(self._tasks)  # a member's leave lands after its announcement
        self._unreachable = False

    def _keys(self, line: str) -> list[str]:
        base = f"{self._prefix}lines:{{{line}}}"
        return [base, f"{base}:exp"]

    def now(self) -> float:
        """The clock orders without a question's own time are read from (unix time)."""
        return self._clock()

    async def join(self, line: str, member: str, order: float, *, announced: str = "") -> None:
        """``member`` joins ``line`` at ``order`` (its question's unix time); it keeps its place if it is in, and
        takes over the place of its question's announcement ``announced``, which leaves."""
        await self._write(line, member, order, self._ttl_s, announced)

    def announce(self, line: str, member: str, order: float) -> None:
        """A question taken joins ``line`` at ``order`` as ``member`` until its card's place takes it over (or
        ``announced_ttl_s`` passes, or it leaves). Written in the background, while the turn starts: the join or
        leave that follows waits for it."""
        self._writes.spawn((line, member), self._write(line, member, order, self._announced_ttl_s, ""),
                           name="fleet-lines:announce")

    async def _write(self, line: str, member: str, order: float, ttl_s: float, announced: str) -> None:
        if announced:
            await self._writes.written((line, announced))
        try:
            await self._join(keys=self._keys(line), args=[
                member, repr(float(order)), repr(self._clock() + ttl_s), math.ceil(self._ttl_s * 2000), announced])
        except Exception as exc:
            self._lost(exc)

    def leave(self, line: str, member: str) -> None:
        """``member`` leaves ``line`` (written in the background: the slot it took is already its own)."""
        self._writes.spawn((line, member), self._left(line, member), name="fleet-lines:leave")

    async def _left(self, line: str, member: str) -> None:
        try:
            await self._leave(keys=self._keys(line), args=[member])
        except Exception as exc:
            self._lost(exc)

    async def first(self, line: str, member: str, keep: Sequence[str] = ()) -> tuple[bool, int, int]:
        """Whether ``member`` heads ``line`` (True too when it is not in it, or Redis cannot be reached), how many
        members are ahead of it, and how many are in the line; the expiries of ``member`` and ``keep`` (this
        process's other places in the line) are pushed forward."""
        try:
            heads, ahead, size = await self._first(
                keys=self._keys(line), args=[repr(self._clock()), repr(self._ttl_s), member, *keep])
        except Exception as exc:
            self._lost(exc)
            return True, 0, 0
        self._back()
        return bool(int(heads)), int(ahead), int(size)

    async def size(self, line: str) -> int:
        """Members in ``line`` now (0 when Redis cannot be reached)."""
        try:
            _, _, size = await self._first(keys=self._keys(line), args=[repr(self._clock()), repr(self._ttl_s), ""])
        except Exception as exc:
            self._lost(exc)
            return 0
        self._back()
        return int(size)

    def _lost(self, exc: BaseException) -> None:
        if not self._unreachable:
            self._unreachable = True
            log.warning("fleet.lines_unreachable", error=type(exc).__name__,
                        detail="each replica keeps its own channel lines until Redis answers")

    def _back(self) -> None:
        if self._unreachable:
            self._unreachable = False
            log.info("fleet.lines_back")

    async def aclose(self) -> None:
        """Wait for the leaves still being written (briefly), then stop."""
        await self._tasks.wait(2.0)
        await self._tasks.aclose()
