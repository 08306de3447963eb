"""A process's own rate accounts, in memory: token buckets and windows, reservations, pauses, learning.

Two shapes of limit: a token bucket (``rate_per_s``, ``burst``: DingTalk's QPS,
refilling within a second) and a window (``window_s`` > 0: at most ``burst``
calls in any ``window_s`` seconds, Slack's per-minute tiers), which may be
spent in a burst. A window's allowance is planned: every open card reserves the
call its final answer will need, and live updates are granted only from what
the reservations leave, so progress updates can never spend the calls the
finals need. Once a window runs low, a card's later live updates are paced over
the window's slices, so an answer that starts late in the window still gets its
first text. Every throttle teaches the ledger that the platform's limit is
lower than we thought (clock skew, another client on the same token, a limit
nobody documented): the key's calls are granted by its learned limit, which
grows back in quiet (:mod:`botgateway.budget.learned`). A limit on arrivals
(DingTalk's QPS, counted as calls arrive) also counts each call from its
grant until a second after its answer.

It is also the fallback of the shared ledger while Redis cannot be reached.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from botgateway.budget.learned import Estimate, Learned, Learning, learned_limit
from botgateway.budget.ledgers.base import PACED_SHARE, SLICES, Verdict
from botgateway.budget.rate_limit import RateLimit, live_room

__all__ = ["LocalLedger"]

log = structlog.get_logger(__name__)


@dataclass
class _Bucket:
    """The accounts of one key (mutable; owned by :class:`LocalLedger`)."""

    limit: RateLimit
    """The configured limit (the latest a caller passed)."""
    tokens: float
    """Tokens available now (fractional while refilling)."""
    updated_at: float
    """Clock time ``tokens`` was last computed."""
    paused_until: float = 0.0
    """No token is handed out before this clock time (set by throttle answers)."""
    grants: deque[float] = field(default_factory=deque)
    """A window's grants still inside it, oldest first (clock times; a landed call's moved to its landing)."""
    elsewhere: deque[float] = field(default_factory=deque)
    """A window's calls spent where this ledger did not see them (the fleet's, as last seen before Redis was lost),
    by when: they count until the window slides past them, and are never this ledger's own grants."""
    unlanded: deque[float] = field(default_factory=deque)
    """A window's grants whose answer has not come back yet (clock times, oldest first)."""
    learned: Learned = field(default_factory=Learned)
    """What throttles taught about the key."""
    share: float = 1.0
    """The learned share of ``limit`` the accounts are kept by now (:meth:`LocalLedger._relearn` moves it)."""
    shape: RateLimit = field(default_factory=lambda: RateLimit(rate_per_s=1.0))
    """``limit`` at ``share``: the rate, burst and limit on arrivals a token bucket is kept by."""
    capacity: float = 0.0
    """A window's calls at ``share`` (fractional: the learned allowance)."""
    reserved: dict[str, int] = field(default_factory=dict)
    """Calls reserved per owner (open cards' finals and cleanups); live updates only get what they leave."""
    paced: deque[float] = field(default_factory=deque)
    """A window's recent grants of later live updates (an owner's second and on), within the last slice."""
    flying: int = 0
    """With a limit on arrivals: calls granted whose answer has not come back yet."""
    landings: deque[float] = field(default_factory=deque)
    """With a limit on arrivals: when the answers of the last second came back (clock times, oldest first)."""

    @property
    def reservations(self) -> int:
        """Calls reserved by all owners."""
        return sum(self.reserved.values())


class LocalLedger:
    """:class:`~botgateway.budget.ledgers.base.Ledger` in memory: exact and immediate, for one process."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, learning: Learning | None = None) -> None:
        """``learning``: how throttles lower a key's limit and quiet gives it back (default: :class:`Learning`)."""
        self._clock = clock
        self._learning = learning if learning is not None else Learning()
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, key: str, limit: RateLimit) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            size = float(max(limit.burst, 1))
            bucket = _Bucket(limit=limit, tokens=size, updated_at=self._clock(), shape=limit, capacity=size)
            self._buckets[key] = bucket
        elif bucket.limit != limit:
            self._refill(bucket)
            bucket.limit = limit
            self._reshape(bucket)
        return bucket

    def _relearn(self, bucket: _Bucket, now: float) -> None:
        """Keep the accounts by the learned share at ``now`` (a quiet period may have given a step back)."""
        share = bucket.learned.share_at(self._learning, bucket.limit, now)
        if share != bucket.share:
            bucket.share = share
            self._reshape(bucket)

    @staticmethod
    def _reshape(bucket: _Bucket) -> None:
        """The limit the accounts are kept by: the configured one at the learned share; no more tokens than it holds."""
        bucket.shape = learned_limit(bucket.limit, bucket.share)
        bucket.capacity = max(1.0, bucket.limit.burst * bucket.share)
        if not bucket.limit.windowed:
            bucket.tokens = min(bucket.tokens, float(max(bucket.shape.burst, 1)))

    def _refill(self, bucket: _Bucket) -> None:
        now = self._clock()
        if bucket.limit.windowed:
            self._relearn(bucket, now)
            self._slide(bucket, now)
            return
        # Tokens do not accrue while the platform told us to back off; they accrue at the rate learned so far (a
        # quiet period's step applies from now on: never more calls than the estimate allowed meanwhile).
        start = max(bucket.updated_at, bucket.paused_until)
        if now > start:
            rate = max(bucket.shape.rate_per_s, 1e-9)
            bucket.tokens = min(float(max(bucket.shape.burst, 1)), bucket.tokens + (now - start) * rate)
        bucket.updated_at = max(now, bucket.updated_at)
        self._relearn(bucket, now)

    @staticmethod
    def _slide(bucket: _Bucket, now: float) -> None:
        """Drop the grants that left the window; what is left of its learned allowance is free."""
        window = bucket.limit.window_s
        while bucket.grants and bucket.grants[0] <= now - window:
            bucket.grants.popleft()
        while bucket.elsewhere and bucket.elsewhere[0] <= now - window:
            bucket.elsewhere.popleft()
        bucket.tokens = bucket.capacity - len(bucket.grants) - len(bucket.elsewhere)

    def _free(self, bucket: _Bucket, *, live: bool, later: bool) -> bool:
        """Whether a call may go now: a token is there, and for a live update in a window, one no final needs;
        once the window runs low, a card's later live updates (not its first) also keep to the slice pace."""
        now = self._clock()
        if now < bucket.paused_until:
            return False
        self._refill(bucket)
        windowed = bucket.limit.windowed
        needed = 1.0 + (bucket.reservations if live and windowed else 0)
        if bucket.tokens < needed:
            return False
        arrivals = bucket.shape.arrivals_per_s
        if arrivals > 0:
            room = live_room(arrivals, bucket.reservations) if live else arrivals
            if self._arriving(bucket, now) >= room:
                return False
        if live and windowed and later and self._scarce(bucket):
            slice_s = bucket.limit.window_s / SLICES
            while bucket.paced and bucket.paced[0] <= now - slice_s:
                bucket.paced.popleft()
            return len(bucket.paced) < max(1.0, bucket.capacity * PACED_SHARE / SLICES)
        return True

    @staticmethod
    def _arriving(bucket: _Bucket, now: float) -> int:
        """Calls the platform may count in the window ending now: on their way, or answered within the window."""
        while bucket.landings and bucket.landings[0] <= now - bucket.limit.arrival_window_s:
            bucket.landings.popleft()
        return bucket.flying + len(bucket.landings)

    @staticmethod
    def _scarce(bucket: _Bucket) -> bool:
        """Less than :data:`PACED_SHARE` of the window is left to spare."""
        return bucket.tokens - bucket.reservations < bucket.capacity * PACED_SHARE

    def _count(self, bucket: _Bucket, *, live: bool, later: bool) -> None:
        if live and bucket.limit.windowed and later and self._scarce(bucket):
            bucket.paced.append(self._clock())  # counts against the slice's pace
        bucket.tokens -= 1.0
        if bucket.limit.windowed:
            bucket.grants.append(self._clock())
            bucket.unlanded.append(bucket.grants[-1])
        if bucket.limit.arrivals_per_s > 0:
            bucket.flying += 1

    def take_now(self, key: str, limit: RateLimit, *, live: bool, later: bool) -> bool:
        """Count one call of ``key`` if it may go now."""
        bucket = self._bucket(key, limit)
        if not self._free(bucket, live=live, later=later):
            return False
        self._count(bucket, live=live, later=later)
        return True

    async def take(self, key: str, limit: RateLimit, *, live: bool, later: bool, want: int = 1) -> Verdict:
        """Count one call of ``key`` if it may go now; otherwise say when a call could be free (one at a time:
        answering is immediate, so ``want`` saves nothing here)."""
        if self.take_now(key, limit, live=live, later=later):
            return Verdict(True)
        return Verdict(False, retry_in_s=self._delay(self._buckets[key], live=live))

    def _delay(self, bucket: _Bucket, *, live: bool = False) -> float:
        """How long until a call could be free (a release or pause wakes the queue sooner)."""
        now = self._clock()
        if now < bucket.paused_until:
            return bucket.paused_until - now
        arrivals = bucket.shape.arrivals_per_s
        if live and arrivals > 0:
            arrivals = live_room(arrivals, bucket.reservations)
        if arrivals > 0 and self._arriving(bucket, now) >= arrivals:
            # Held back by calls the platform may still count: until the oldest answer is a window old, or
            # sooner when a call on its way lands or a final is released (either wakes the queue).
            span = bucket.limit.arrival_window_s
            return bucket.landings[0] + span - now if bucket.landings else span
        if bucket.limit.windowed:
            # The next grant to leave the window or the slice; held back only by reservations: until a release.
            window = bucket.limit.window_s
            oldest = [calls[0] for calls in (bucket.grants, bucket.elsewhere) if calls]
            delay = min(oldest) + window - now if oldest else window
            if bucket.paced:
                delay = min(delay, bucket.paced[0] + window / SLICES - now)
            return delay
        return (1.0 - bucket.tokens) / max(bucket.shape.rate_per_s, 1e-9)

    def late(self, key: str, seconds: float) -> None:
        """A granted call went out ``seconds`` late: a token bucket counts it from then.

        The platform counts a call when it arrives. Calls granted on time but sent late, after the event
        loop was busy, would arrive bunched, and a busy second could see more than the rate; taking the
        tokens that accrued meanwhile spaces what is sent, not only what is granted. (A window of a minute
        is not moved by such delays.)
        """
        bucket = self._buckets.get(key)
        if bucket is None or bucket.limit.windowed or seconds <= 0:
            return
        self._refill(bucket)
        bucket.tokens -= seconds * max(bucket.shape.rate_per_s, 1e-9)

    def landed(self, key: str) -> None:
        """A granted call got its answer: a window's grant counts from now (the platform counted the call on arrival,
        by now at the latest: a window slid from the grant could let the next call arrive early), and with a limit
        on arrivals it counts until a window from now. Calls land in the order they were granted, near enough."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        if bucket.unlanded:
            granted = bucket.unlanded.popleft()
            if granted in bucket.grants:  # else it left the window already (an answer a window late): it stays out
                bucket.grants.remove(granted)
                bucket.grants.append(self._clock())
        if bucket.flying <= 0:
            return  # granted before the limit counted arrivals, or by the shared accounts
        bucket.flying -= 1
        bucket.landings.append(self._clock())

    def give_back(self, key: str, ticket: str = "") -> None:
        """A granted call was not made: its token goes back (the latest grant of a window)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        if bucket.flying > 0:
            bucket.flying -= 1
        bucket.tokens += 1.0
        if bucket.limit.windowed and bucket.grants:
            given = bucket.grants.pop()
            if bucket.unlanded and bucket.unlanded[-1] == given:
                bucket.unlanded.pop()

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner``."""
        bucket = self._bucket(key, limit)
        bucket.reserved[owner] = bucket.reserved.get(owner, 0) + 1

    async def claim(self, key: str, limit: RateLimit, owner: str) -> bool:
        """Reserve one call of ``key`` for ``owner`` if a window still has one beyond the reservations (while
        paused it has none); a token bucket always does."""
        if limit.windowed and self.spare(key, limit) < 1:
            return False
        self.reserve(key, limit, owner)
        return True

    def unreserve(self, key: str, owner: str) -> None:
        """One reserved call of ``owner`` was made and landed."""
        bucket = self._buckets.get(key)
        if bucket is None or not bucket.reserved.get(owner):
            return
        left = bucket.reserved[owner] - 1
        if left > 0:
            bucket.reserved[owner] = left
        else:
            del bucket.reserved[owner]

    def release(self, key: str, owner: str) -> None:
        """Give back every call ``owner`` holds of ``key``."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.reserved.pop(owner, None)

    def reserved(self, key: str) -> int:
        """Calls of ``key`` reserved now."""
        bucket = self._buckets.get(key)
        return bucket.reservations if bucket else 0

    def pause(self, key: str, seconds: float) -> None:
        """The platform throttled a call of ``key``: grant none for ``seconds``, the bucket restarts empty, and its
        limit is learned lower (:mod:`botgateway.budget.learned`; a window by the calls it holds now).

        A throttle while the key is still paused by an earlier one answers a call sent before that one was heard:
        it is counted, it may make the pause longer, and it lowers nothing more.
        """
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        now = self._clock()
        until = now + max(seconds, 0.0)
        self._refill(bucket)
        bucket.learned = bucket.learned.throttled(
            self._learning, bucket.limit, now, until=max(until, bucket.paused_until), held=len(bucket.grants),
            lower=now >= bucket.paused_until,
        )
        self._relearn(bucket, now)
        if until > bucket.paused_until:
            bucket.paused_until = until
            bucket.tokens = 0.0
        log.info("rate_budget.paused", key=key, seconds=round(seconds, 3), learned_share=round(bucket.share, 3))

    def estimate(self, key: str, limit: RateLimit) -> Estimate:
        """``key``'s configured ``limit``, the share of it learned now and the throttles heard."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return Estimate(key=key, configured=limit, share=1.0, throttles=0)
        share = bucket.learned.share_at(self._learning, limit, self._clock())
        return Estimate(key=key, configured=limit, share=share, throttles=bucket.learned.throttles)

    def paused_for(self, key: str) -> float:
        """Seconds left of the pause on ``key``."""
        bucket = self._buckets.get(key)
        return max(bucket.paused_until - self._clock(), 0.0) if bucket else 0.0

    def available(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` that could be made now, before reservations (0 while paused)."""
        bucket = self._bucket(key, limit)
        now = self._clock()
        if now < bucket.paused_until:
            return 0.0
        self._refill(bucket)
        if bucket.shape.arrivals_per_s > 0:
            return max(min(bucket.tokens, float(bucket.shape.arrivals_per_s - self._arriving(bucket, now))), 0.0)
        return max(bucket.tokens, 0.0)

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` free beyond the reservations (a token bucket's reservations do not hold calls back)."""
        bucket = self._bucket(key, limit)
        reserved = bucket.reservations if limit.windowed else 0
        return max(self.available(key, limit) - reserved, 0.0)

    def spent_elsewhere(self, key: str, limit: RateLimit, calls: int, *, at: float) -> None:
        """``calls`` of ``key``'s window were spent by ``at`` where this ledger did not see them (what is known now:
        it replaces what was known before): they count against the window until it slides past ``at`` (a token
        bucket ignores them), never as this ledger's grants."""
        bucket = self._bucket(key, limit)
        if not limit.windowed:
            return
        bucket.elsewhere = deque([at] * max(calls, 0))
        self._refill(bucket)

    def recent_grants(self, key: str, since: float) -> list[float]:
        """A window's grants of ``key`` still inside it and made after ``since`` (clock times, oldest first)."""
        bucket = self._buckets.get(key)
        if bucket is None or not bucket.limit.windowed:
            return []
        self._refill(bucket)
        return [at for at in bucket.grants if at > since]
