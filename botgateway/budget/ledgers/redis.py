"""The shared rate accounts in Redis: one atomic script per operation, for every process of the fleet.

Whose clock: the callers', passed to every script (``clock``, :func:`time.time`
by default). Redis's own ``TIME`` would spare the hosts' clock skew, but a
window is 60 s and the budgets keep 10 % of every Slack tier for skew, which
NTP keeps to milliseconds; and a clock passed in can be driven by tests, so a
minute-long window is tested without waiting a minute. Two guards remain: time
never runs backwards for a key (each script moves the key's clock to the
latest time any process passed, so a process whose clock lags sees the same
window as the others), and a process's reservations expire on the same clock
they are checked on.

Errors are raised as they come (connection refused, timeouts, a Redis that is
loading or failing over): :class:`~botgateway.budget.ledgers.shared.SharedLedger`
turns them into its local fallback. See :mod:`botgateway.budget.ledgers.scripts` for
the keys.
"""

from __future__ import annotations

import itertools
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from botgateway.budget.learned import Learning
from botgateway.budget.ledgers.scripts import CLAIM, GIVE_BACK, LANDED, PAUSE, PUBLISH, TAKE
from botgateway.budget.rate_limit import RateLimit
from botgateway.redis_url import mask_url
from botgateway.stores.redis_connect import redis_client

__all__ = ["FLIGHT_S", "TIMEOUT_S", "Answer", "RedisLedger", "Throttled"]

TIMEOUT_S = 2.0
"""A Redis call of the budget that takes longer counts as Redis unreachable (the process falls back)."""

FLIGHT_S = 15.0
"""With a limit on arrivals, a call on its way counts this long at most: every platform call times out sooner, and
the calls of a process that died on the way stop counting then."""

_KEEP_S = 60.0
"""A key's accounts outlive its last use by its window and this long at least (then Redis forgets them)."""


def _client(url: str) -> aioredis.Redis:
    """A client for the budget at ``url``: short timeouts and one quick retry, so an outage is noticed at once."""
    try:
        return redis_client(
            url,
            socket_timeout=TIMEOUT_S,
            socket_connect_timeout=TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),  # one reconnect covers a connection Redis closed; more would hide an outage
            health_check_interval=30,
        )
    except ValueError as exc:
        raise ValueError(f"memory.redis_url {mask_url(url)!r} is not usable: {exc}") from None


@dataclass(frozen=True)
class Answer:
    """What the shared accounts of one key said."""

    granted: bool
    """The call was counted and may go."""
    retry_in_s: float
    """Not granted: when a call could be free at the earliest the script could tell."""
    tokens: float
    """Calls left now, before reservations (a window's learned allowance minus its grants)."""
    reserved: int
    """Calls reserved fleet-wide (the caller's own as it passed them)."""
    mine: int
    """The caller's own reservations, as it passed them."""
    paused_until: float
    """No call before this time (the clock's)."""
    at: float
    """When it was said (the clock's)."""
    ticket: str = ""
    """Granted: the grant's name."""
    count: int = 0
    """Calls granted (a token bucket may grant several at once; a window one at most)."""
    share: float = 1.0
    """The key's learned share of its configured limit, the fleet's (:mod:`botgateway.budget.learned`)."""
    throttles: int = 0
    """Throttle answers heard for the key, by every process."""


@dataclass(frozen=True)
class Throttled:
    """What the shared accounts of one key made of a throttle answer."""

    until: float
    """No call of the key before this time (the clock's)."""
    share: float
    """The key's learned share of its configured limit now."""
    throttles: int
    """Throttle answers heard for the key, by every process, this one included."""


class RedisLedger:
    """The shared accounts' operations on one Redis (one atomic script each); errors are raised."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str,
        instance_id: str,
        clock: Callable[[], float] = time.time,
        reservation_ttl_s: float = 30.0,
        safe_url: str = "",
        learning: Learning | None = None,
    ) -> None:
        """``reservation_ttl_s``: this process's reservations vanish this long after it last refreshed them;
        ``learning``: how throttles lower a key's limit (every process of the fleet must pass the same)."""
        self._redis = client
        self._prefix = prefix
        self.instance_id = instance_id
        """This process in the reservations of every key."""
        self.clock = clock
        """The clock every script is passed (shared by the hosts: wall-clock time)."""
        self.reservation_ttl_s = reservation_ttl_s
        """How long a published reservation count lives without a refresh."""
        self.safe_url = safe_url
        """Where Redis is, password masked (for log lines)."""
        self.learning = learning if learning is not None else Learning()
        """How throttles lower a key's limit and quiet gives it back."""
        # Tickets name grants in a window's set: unique across processes and across restarts of one.
        self._tickets = (f"{instance_id}:{secrets.token_hex(4)}:{n}" for n in itertools.count())
        self._take = client.register_script(TAKE)
        self._pause = client.register_script(PAUSE)
        self._give_back = client.register_script(GIVE_BACK)
        self._landed = client.register_script(LANDED)
        self._publish = client.register_script(PUBLISH)
        self._claim = client.register_script(CLAIM)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        prefix: str,
        instance_id: str,
        clock: Callable[[], float] = time.time,
        reservation_ttl_s: float = 30.0,
        learning: Learning | None = None,
    ) -> RedisLedger:
        """The shared accounts in the Redis at ``url`` (connected on first use; raises ValueError for a bad URL)."""
        return cls(_client(url), prefix=prefix, instance_id=instance_id, clock=clock,
                   reservation_ttl_s=reservation_ttl_s, safe_url=mask_url(url), learning=learning)

    def _keys(self, key: str) -> list[str]:
        base = f"{self._prefix}budget:{{{key}}}"
        return [f"{base}:state", f"{base}:grants", f"{base}:paced", f"{base}:reserved", f"{base}:arriving"]

    @staticmethod
    def _keep_ms(limit: RateLimit) -> int:
        return math.ceil((max(limit.window_s, 0.0) + _KEEP_S) * 1000)

    def _relearning(self, limit: RateLimit) -> list[str]:
        """The scripts' arguments of how ``limit`` grows back: the step a quiet period gives, and the period."""
        return [repr(self.learning.step_share(limit)), repr(self.learning.period_s(limit))]

    async def take(
        self, key: str, limit: RateLimit, *, live: bool, later: bool, mine: int, peek: bool = False, want: int = 1
    ) -> Answer:
        """Count one call of ``key`` if it may go now (``peek``: only look); ``mine``: this process's reservations.

        A token bucket grants up to ``want`` calls at once (as many as it holds tokens); a window one, and so does
        a limit on arrivals, whose every call is counted by its ticket until :meth:`landed`.
        """
        now = self.clock()
        ticket = "" if peek else next(self._tickets)
        reply = await self._take(
            keys=self._keys(key),
            args=[repr(now), repr(float(limit.rate_per_s)), max(int(limit.burst), 1), repr(float(limit.window_s)),
                  "peek" if peek else "take", int(live), int(later), self.instance_id, int(mine), ticket,
                  self._keep_ms(limit), max(int(want), 1), max(int(limit.arrivals_per_s), 0), repr(FLIGHT_S),
                  *self._relearning(limit)],
        )
        granted, retry_in, tokens, reserved, paused_until, share, throttles = reply
        count = int(granted)
        return Answer(granted=count > 0, retry_in_s=max(float(retry_in), 0.0), tokens=float(tokens),
                      reserved=int(reserved), mine=int(mine), paused_until=float(paused_until), at=now,
                      ticket=ticket if count else "", count=count, share=float(share), throttles=int(throttles))

    async def pause(self, key: str, limit: RateLimit, seconds: float) -> Throttled:
        """The platform throttled a call of ``key``: no call of it for ``seconds``, for every process, and its limit
        learned lower for every process (unless an earlier throttle's pause still runs); the throttle is counted."""
        keys = self._keys(key)
        learning = self.learning
        until, share, throttles = await self._pause(
            keys=keys[:2],
            args=[repr(self.clock()), repr(float(seconds)), max(int(limit.burst), 1), repr(float(limit.window_s)),
                  self._keep_ms(limit), repr(learning.lowered_share(limit)), repr(learning.floor_share(limit)),
                  *self._relearning(limit)],
        )
        return Throttled(until=float(until), share=float(share), throttles=int(throttles))

    async def give_back(self, key: str, limit: RateLimit, ticket: str) -> None:
        """A granted call was not made: it no longer counts."""
        keys = self._keys(key)
        await self._give_back(keys=[*keys[:3], keys[4]],
                              args=[ticket, max(int(limit.burst), 1), repr(float(limit.window_s))])

    async def landed(self, key: str, ticket: str, window_s: float = 1.0, *, at: float | None = None) -> None:
        """The call granted as ``ticket`` got its answer (``at``, default now): a window's grant counts from then,
        and with a limit on arrivals it counts ``window_s`` more."""
        keys = self._keys(key)
        when = self.clock() if at is None else at
        await self._landed(keys=[keys[1], keys[4]], args=[ticket, repr(when), repr(float(window_s))])

    async def publish(self, key: str, calls: int) -> None:
        """Tell the fleet this process holds ``calls`` reserved calls of ``key``, for ``reservation_ttl_s`` more."""
        expiry = self.clock() + self.reservation_ttl_s
        await self._publish(keys=self._keys(key)[3:4],
                            args=[self.instance_id, int(calls), repr(expiry), math.ceil(self.reservation_ttl_s * 2000)])

    async def claim(self, key: str, limit: RateLimit, calls: int) -> bool:
        """Tell the fleet this process holds ``calls`` reserved calls of ``key`` (one more than it held), only if the
        window can still promise that many beyond every other process's reservations; False: nothing written."""
        now = self.clock()
        state, grants, _, reserved, _ = self._keys(key)
        claimed, _, _ = await self._claim(
            keys=[state, grants, reserved],
            args=[repr(now), max(int(limit.burst), 1), repr(float(limit.window_s)), self.instance_id, int(calls),
                  repr(now + self.reservation_ttl_s), math.ceil(self.reservation_ttl_s * 2000), *self._relearning(limit)],
        )
        return bool(int(claimed))

    async def absorb(self, key: str, limit: RateLimit, times: Sequence[float]) -> None:
        """Count in ``key``'s window the calls this process made at ``times`` while it could not reach Redis."""
        if not times or not limit.windowed:
            return
        grants = self._keys(key)[1]
        await self._redis.zadd(grants, {next(self._tickets): at for at in times})
        await self._redis.pexpire(grants, self._keep_ms(limit))

    async def ping(self) -> None:
        """Raise unless Redis answers."""
        await self._redis.ping()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._redis.aclose()
