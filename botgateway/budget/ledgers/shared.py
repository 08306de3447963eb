"""One rate budget for the whole fleet: the accounts in Redis, and a local share of them while Redis is away.

Every process keeps its own fair line in front (:class:`~botgateway.budget.rate_budget.RateBudget`);
this ledger answers it from Redis (:class:`~botgateway.budget.ledgers.redis.RedisLedger`),
so all processes together keep every platform limit:

- a call is granted by one atomic script that sees every process's grants;
- reservations are fleet-wide: each process's total per key is kept in Redis
  with an expiry it refreshes while it lives (:class:`~botgateway.budget.ledgers.reservations.ReservationBook`),
  and live updates get only what every live process's reservations leave;
- a throttle seen by one process pauses the key for all, and lowers its
  learned limit for all (:mod:`botgateway.budget.learned`: the learned share
  and the throttles heard are kept in Redis beside the key's bucket);
- a limit on arrivals (DingTalk's QPS) counts every process's calls from their
  grant until a second after their answer, so calls bunched on their way from
  several processes cannot push a second past the limit either;
- a large token bucket is leased: calls are taken from it in batches ahead of
  need (:mod:`~botgateway.budget.ledgers.leases`), so most calls need no round trip.

A Redis round trip cannot be made synchronously, so :meth:`SharedLedger.take_now`
answers False and the line asks :meth:`SharedLedger.take`. What a sink plans
by (:meth:`SharedLedger.spare`) is answered from the key's last answer, looked
up again in the background once it is older than ``poll_s``
(:class:`~botgateway.budget.ledgers.last_seen.LastSeen`).

When Redis cannot be reached (refused, timed out, failing over), the process
says so once and goes on with a :class:`~botgateway.budget.ledgers.local.LocalLedger`
holding its share of every limit (the limit ÷ ``share``, the processes the
fleet runs), probing Redis with the core backoff
(:class:`~botgateway.budget.ledgers.outage.OutageWatch`). When Redis answers again,
this process's reservations and the window grants it made meanwhile are
written there, and the shared accounts take over (said once too). Callers in
line are not lost by either switch: they are answered by whichever side is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import structlog
from redis.exceptions import RedisError

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.budget.learned import Estimate
from botgateway.budget.ledgers.base import Verdict
from botgateway.budget.ledgers.last_seen import LastSeen
from botgateway.budget.ledgers.leases import Leases
from botgateway.budget.ledgers.local import LocalLedger
from botgateway.budget.ledgers.outage import OutageWatch
from botgateway.budget.ledgers.redis import RedisLedger
from botgateway.budget.ledgers.reservations import ReservationBook
from botgateway.budget.rate_limit import RateLimit

__all__ = ["PROBE_BACKOFF", "SharedLedger"]

log = structlog.get_logger(__name__)

PROBE_BACKOFF = Backoff(base_s=0.5, max_s=15.0)
"""How often an unreachable Redis is tried again."""

_LEASED = "leased"
"""The ticket of calls served from a lease (given back to it, not to Redis)."""

_UNREACHABLE = (RedisError, OSError)
"""What a Redis call raises when Redis cannot answer (timeouts included); the probe keeps trying past these."""


class SharedLedger:
    """:class:`~botgateway.budget.ledgers.base.Ledger` shared by the fleet through Redis, with a local share as fallback."""

    def __init__(
        self,
        redis: RedisLedger,
        *,
        share: int,
        refresh_s: float = 10.0,
        poll_s: float = 0.5,
        probe: Backoff = PROBE_BACKOFF,
    ) -> None:
        """``share``: processes in the fleet (replicas × workers); ``refresh_s``: how often reservations are
        refreshed (well within ``redis.reservation_ttl_s``); ``poll_s``: how often a caller held back asks again."""
        self._redis = redis
        self._clock: Callable[[], float] = redis.clock
        self._share = max(int(share), 1)
        self._poll_s = poll_s
        self._tasks = BackgroundTasks()
        self._local = LocalLedger(clock=self._clock, learning=redis.learning)
        self._leases = Leases(self._share)
        self._book = ReservationBook(redis.publish, on_error=self._lost, refresh_s=refresh_s, tasks=self._tasks)
        self._limits: dict[str, RateLimit] = {}
        self._seen = LastSeen(redis, self._book, poll_s=poll_s, tasks=self._tasks, on_error=self._lost)
        self._paused: dict[str, float] = {}
        self._flying: dict[str, deque[str]] = {}  # per key with a limit on arrivals: tickets granted, not landed
        self._outage = OutageWatch(redis, self._local, self._book, limits=self._limits, share=self._share, probe=probe,
                                   tasks=self._tasks, on_lost=self._go_local,
                                   on_back=self._seen.clear)  # what was seen before the outage says nothing now

    @property
    def shared(self) -> bool:
        """True while the accounts are Redis's; False while this process spends its local share."""
        return self._outage.shared

    # --- calls ----------------------------------------------------------------------------

    def take_now(self, key: str, limit: RateLimit, *, live: bool, later: bool) -> bool:
        """A call held ahead of need of a large bucket (:mod:`~botgateway.budget.ledgers.leases`), or the local share's
        answer while Redis is away; otherwise False: the shared accounts are asked by :meth:`take`."""
        self._limits[key] = limit
        if self._paused.get(key, 0.0) > self._clock():
            return False
        if not self.shared:
            return self._local.take_now(key, limit.share(self._share), live=live, later=later)
        taken = self._leases.take(key) > 0
        self._lease_ahead(key, limit)
        return taken

    def _lease_ahead(self, key: str, limit: RateLimit) -> None:
        """Take the next batch of a leased bucket in the background once half the last one is spent."""
        if self._leases.wants_batch(key, limit):
            self._leases.refilling(key, True)
            self._tasks.spawn(self._lease(key, limit), name="rate-budget:lease")

    async def _lease(self, key: str, limit: RateLimit) -> None:
        """Take the next batch of a leased bucket's calls from Redis."""
        try:
            answer = await self._redis.take(key, limit, live=False, later=False, mine=self._book.count(key),
                                            want=self._leases.size(limit))
        except Exception as exc:
            self._lost(exc)
        else:
            self._seen.note(key, answer)
            if self.shared and self._paused.get(key, 0.0) <= self._clock():
                self._leases.add(key, answer.count)
        finally:
            self._leases.refilling(key, False)

    async def take(self, key: str, limit: RateLimit, *, live: bool, later: bool, want: int = 1) -> Verdict:
        """Count one call of ``key`` in the fleet's accounts (the local share while Redis is away); a token
        bucket grants up to ``want`` in one round trip, so a busy line is not served one round trip a call."""
        self._limits[key] = limit
        paused = self._paused.get(key, 0.0) - self._clock()
        if paused > 0:
            return Verdict(False, retry_in_s=paused)  # this process was throttled: no need to ask
        if self.shared and (held := self._leases.take(key, want)):
            self._lease_ahead(key, limit)
            return Verdict(True, ticket=_LEASED, count=held)  # calls held ahead of need serve the line first
        if self.shared:
            batch = self._leases.wants_batch(key, limit)  # the line was served from a leased batch: take the next
            try:
                answer = await self._redis.take(key, limit, live=live, later=later, mine=self._book.count(key),
                                                want=want + (self._leases.size(limit) if batch else 0))
            except Exception as exc:  # unreachable, or an answer we cannot read: callers in line are served anyway
                self._lost(exc)
            else:
                self._seen.note(key, answer)
                self._leases.add(key, answer.count - want)  # a leased bucket's batch: kept for the next calls
                if answer.granted and (limit.arrivals_per_s > 0 or limit.windowed):
                    self._flying.setdefault(key, deque()).append(answer.ticket)
                # Another process's release frees calls without telling us: ask again within poll_s.
                return Verdict(answer.granted, retry_in_s=min(answer.retry_in_s, self._poll_s), ticket=answer.ticket,
                               count=min(answer.count, want), free_in_s=answer.retry_in_s)
        return await self._local.take(key, limit.share(self._share), live=live, later=later)

    def give_back(self, key: str, ticket: str) -> None:
        """A granted call was not made: give it back where it was granted."""
        flying = self._flying.get(key)
        if flying and ticket in flying:
            flying.remove(ticket)
        limit = self._limits.get(key)
        if not ticket or limit is None:
            self._local.give_back(key, ticket)
        elif self.shared and self._leases.size(limit):
            self._leases.add(key, 1)  # a leased bucket's call: kept for the next one, no round trip
        elif self.shared:
            self._outage.push(self._redis.give_back(key, limit, ticket), name="rate-budget:give-back")

    # --- reservations ---------------------------------------------------------------------

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner``, fleet-wide (and in the local share)."""
        self._limits[key] = limit
        self._book.add(key, owner)
        self._local.reserve(key, limit.share(self._share), owner)

    async def claim(self, key: str, limit: RateLimit, owner: str) -> bool:
        """Reserve one call of ``key`` for ``owner`` if the fleet's window can still promise it, checked and
        written in Redis in one step (the local share's view while Redis is away); a token bucket always can."""
        self._limits[key] = limit
        if not limit.windowed:
            self.reserve(key, limit, owner)
            return True
        if self.shared:
            try:
                claimed = await self._book.claim(key, owner, lambda calls: self._redis.claim(key, limit, calls))
            except Exception as exc:  # unreachable: the local share answers from now on
                self._lost(exc)
            else:
                if claimed:
                    self._local.reserve(key, limit.share(self._share), owner)
                return claimed
        if self._local.spare(key, limit.share(self._share)) < 1:
            return False
        self.reserve(key, limit, owner)
        return True

    def unreserve(self, key: str, owner: str) -> None:
        """One reserved call of ``owner`` was made and landed."""
        self._book.remove_one(key, owner)
        self._local.unreserve(key, owner)

    def release(self, key: str, owner: str) -> None:
        """Give back every call ``owner`` holds of ``key``."""
        self._book.drop(key, owner)
        self._local.release(key, owner)

    def reserved(self, key: str) -> int:
        """Calls of ``key`` this process's owners hold (the fleet's others are in Redis)."""
        return self._book.count(key)

    async def settle(self) -> None:
        """Wait until Redis has what this process told it so far: its reservations, pauses, calls given back.

        Raises what Redis raised (while it is unreachable, nothing is written).
        """
        await self._outage.pushed()
        if self.shared:
            await self._book.flush()

    # --- pauses and what is left ----------------------------------------------------------

    def late(self, key: str, seconds: float) -> None:
        """A granted call went out late: counted from then by the local share while Redis is away; the shared
        accounts, which counted it in Redis, are not asked again for it (a round trip per late call)."""
        if not self.shared:
            self._local.late(key, seconds)

    def landed(self, key: str) -> None:
        """A granted call got its answer: a window's grant counts from now, and with a limit on arrivals it counts
        one window more, in Redis (any of this process's calls of the key on their way stands for it: they count
        alike), or in the local share."""
        flying = self._flying.get(key)
        if self.shared and flying:
            limit = self._limits.get(key)
            window_s = limit.arrival_window_s if limit is not None else 1.0
            self._outage.push(self._redis.landed(key, flying.popleft(), window_s, at=self._clock()),
                              name="rate-budget:landed")
        else:
            self._local.landed(key)  # granted by the local share (a call it did not grant is not counted)

    def pause(self, key: str, seconds: float) -> None:
        """The platform throttled a call of ``key``: no call of it for ``seconds``, here at once and for every process
        through Redis, where its learned limit is lowered for all and the throttle counted."""
        until = self._clock() + max(seconds, 0.0)
        if until > self._paused.get(key, 0.0):
            self._paused[key] = until
        self._leases.drop(key)  # calls taken ahead of the throttle must not go now
        limit = self._limits.get(key)
        if not self.shared or limit is None:
            self._local.pause(key, seconds)
            return
        log.info("rate_budget.paused", key=key, seconds=round(seconds, 3), fleet=True)
        self._outage.push(self._throttle(key, limit, seconds), name="rate-budget:pause")

    async def _throttle(self, key: str, limit: RateLimit, seconds: float) -> None:
        """Tell the fleet of a throttle, then look at the key again: what it learned shows at once."""
        throttled = await self._redis.pause(key, limit, seconds)
        await self._seen.refresh(key, limit)
        log.info("rate_budget.learned", key=key, share=round(throttled.share, 3), throttles=throttled.throttles)

    def estimate(self, key: str, limit: RateLimit) -> Estimate:
        """``key``'s configured ``limit``, its learned share and the fleet's throttles, as last seen (looked up again
        in the background once ``poll_s`` old); the local share's own while Redis is away."""
        if not self.shared:
            return replace(self._local.estimate(key, limit.share(self._share)), configured=limit)
        self._limits[key] = limit
        seen = self._seen.look(key, limit)
        if seen is None:
            return Estimate(key=key, configured=limit, share=1.0, throttles=0)
        return Estimate(key=key, configured=limit, share=seen.share, throttles=seen.throttles)

    def paused_for(self, key: str) -> float:
        """Seconds left of the pause on ``key``, as far as this process knows."""
        seen = self._seen.get(key) if self.shared else None
        until = max(self._paused.get(key, 0.0), seen.paused_until if seen else 0.0)
        return max(until - self._clock(), 0.0)

    def available(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` free now before reservations, as last seen (0 while paused)."""
        if self.paused_for(key) > 0:
            return 0.0
        if not self.shared:
            return self._local.available(key, limit.share(self._share))
        self._limits[key] = limit
        seen = self._seen.look(key, limit)
        return max(seen.tokens if seen else float(max(limit.burst, 1)), 0.0)

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` free beyond the fleet's reservations, as last seen."""
        if not self.shared:
            return self._local.spare(key, limit.share(self._share))
        available = self.available(key, limit)
        if not limit.windowed:
            return available
        seen = self._seen.get(key)
        others = seen.reserved - seen.mine if seen else 0
        return max(available - others - self._book.count(key), 0.0)

    # --- losing Redis and getting it back -------------------------------------------------

    def _lost(self, exc: BaseException) -> None:
        """Redis did not answer: the local share is spent from now on, until Redis answers again."""
        self._outage.lost(exc)

    def _go_local(self) -> None:
        """Redis is lost: forget what only Redis counts (the calls held ahead of need, the calls on their way), and
        start the local share of each window from what the fleet had spent of it when this process last looked.

        A fresh share of a window the fleet had half spent would let the fleet spend it again, and the platform
        would throttle the calls that matter most, right when Redis is away.
        """
        self._leases.clear()
        self._flying.clear()  # Redis forgets them after their longest flight
        for key, limit in self._limits.items():
            seen = self._seen.get(key)
            if seen is not None and limit.windowed:
                spent = max(limit.burst * seen.share - seen.tokens, 0.0)
                self._local.spent_elsewhere(key, limit.share(self._share), math.ceil(spent / self._share - 1e-9),
                                            at=seen.at)

    async def aclose(self, timeout_s: float = 2.0) -> None:
        """Stop refreshing; tell Redis what this process still holds (nothing, after a clean stop); close."""
        if self.shared:
            with contextlib.suppress(*_UNREACHABLE, asyncio.TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._book.flush()
        await self._tasks.aclose()
        await self._redis.aclose()
