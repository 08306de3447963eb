"""Shared, fair token buckets for platform API calls.

Every card call draws one token from the bucket its sink names
(:meth:`botgateway.sink.CardSink.rate_key`): all cards of one Slack workspace
share the ``chat.update`` bucket, all cards of one DingTalk app the card API
bucket. When the bucket is empty callers wait in line; the line is served
round-robin by *owner* (one owner per card), so a card with many calls
waiting cannot starve another card. A throttle answer from the platform
:meth:`pauses <RateBudget.pause>` the whole bucket, because every other card
would be throttled too. Calls that open or close a card (``priority=True``)
go before live updates: a final answer should not queue behind other cards'
progress updates, and a live update that waits simply carries newer text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

__all__ = ["RateBudget", "RateLimit"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: sustained ``rate_per_s`` with bursts up to ``burst``."""

    rate_per_s: float
    """Refill rate in calls per second."""
    burst: int = 1
    """Bucket size."""


@dataclass
class _Bucket:
    """The state of one key's bucket (mutable; owned by :class:`RateBudget`)."""

    limit: RateLimit
    """Current rate and burst (the latest a caller passed)."""
    tokens: float
    """Tokens available now (fractional while refilling)."""
    updated_at: float
    """Clock time ``tokens`` was last computed."""
    paused_until: float = 0.0
    """No token is handed out before this clock time (set by throttle answers)."""
    waiters: OrderedDict[str, deque[asyncio.Future[None]]] = field(default_factory=OrderedDict)
    """Callers waiting, per owner; owners are served in turn (round-robin)."""
    urgent: OrderedDict[str, deque[asyncio.Future[None]]] = field(default_factory=OrderedDict)
    """Priority callers (card creation, final answers), served before ``waiters``, round-robin too."""
    dispatcher: asyncio.Task[None] | None = None
    """The task that hands tokens to waiters while any wait."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a pause changes so a sleeping dispatcher re-plans."""
    granted: int = 0
    """Tokens handed out so far (for stats)."""


class RateBudget:
    """Token buckets per key, shared by all cards and fair between them.

    ``acquire`` returns once the caller may make one call. Buckets start full
    (``burst`` tokens) and refill at ``rate_per_s``.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, key: str, limit: RateLimit) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(limit=limit, tokens=float(max(limit.burst, 1)), updated_at=self._clock())
            self._buckets[key] = bucket
        elif bucket.limit != limit:
            self._refill(bucket)
            bucket.limit = limit
            bucket.tokens = min(bucket.tokens, float(max(limit.burst, 1)))
        return bucket

    def _refill(self, bucket: _Bucket) -> None:
        now = self._clock()
        # Tokens do not accrue while the platform told us to back off.
        start = max(bucket.updated_at, bucket.paused_until)
        if now > start:
            rate = max(bucket.limit.rate_per_s, 1e-9)
            bucket.tokens = min(float(max(bucket.limit.burst, 1)), bucket.tokens + (now - start) * rate)
        bucket.updated_at = max(now, bucket.updated_at)

    def _try_take(self, bucket: _Bucket) -> bool:
        now = self._clock()
        if now < bucket.paused_until:
            return False
        self._refill(bucket)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            bucket.granted += 1
            return True
        return False

    async def acquire(self, key: str, limit: RateLimit, owner: str, *, priority: bool = False) -> float:
        """Wait for one token of ``key`` (created with ``limit`` on first use); returns the seconds waited.

        ``owner`` identifies the card; waiting owners are served round-robin,
        ``priority`` callers before the others. Cancelling the wait gives up the
        place in line without using a token.
        """
        bucket = self._bucket(key, limit)
        ahead = bucket.urgent if priority else (bucket.urgent or bucket.waiters)
        if not ahead and self._try_take(bucket):
            return 0.0
        started = self._clock()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = bucket.urgent if priority else bucket.waiters
        line.setdefault(owner, deque()).append(future)
        if bucket.dispatcher is None or bucket.dispatcher.done():
            bucket.dispatcher = asyncio.create_task(self._dispatch(key, bucket), name=f"rate-budget:{key}")
        try:
            await future
        except asyncio.CancelledError:
            queue = line.get(owner)
            if queue is not None and future in queue:
                queue.remove(future)
                if not queue:
                    del line[owner]
                if not bucket.waiters and not bucket.urgent:
                    # Nobody left in line: let a dispatcher sleeping out a long pause end now, not then.
                    bucket.wake.set()
            elif future.done() and not future.cancelled():
                # The token was granted as we were cancelled: give it back.
                bucket.tokens += 1.0
                bucket.granted -= 1
            raise
        return self._clock() - started

    def pause(self, key: str, seconds: float) -> None:
        """Hand out no token of ``key`` for ``seconds`` (a throttle answer); the bucket restarts empty."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        until = self._clock() + max(seconds, 0.0)
        if until > bucket.paused_until:
            self._refill(bucket)
            bucket.paused_until = until
            bucket.tokens = 0.0
            log.info("rate_budget.paused", key=key, seconds=round(seconds, 3))
        bucket.wake.set()

    def paused_for(self, key: str) -> float:
        """Seconds left of the pause on ``key`` (0 when not paused)."""
        bucket = self._buckets.get(key)
        return max(bucket.paused_until - self._clock(), 0.0) if bucket else 0.0

    def waiting(self, key: str) -> int:
        """How many calls wait for ``key`` now."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0
        return sum(len(q) for q in bucket.waiters.values()) + sum(len(q) for q in bucket.urgent.values())

    def granted(self, key: str) -> int:
        """How many tokens ``key`` has handed out."""
        bucket = self._buckets.get(key)
        return bucket.granted if bucket else 0

    @staticmethod
    def _next_waiter(bucket: _Bucket) -> asyncio.Future[None] | None:
        for line in (bucket.urgent, bucket.waiters):
            while line:
                owner, queue = next(iter(line.items()))
                future = queue.popleft()
                # Round-robin: the served owner goes to the back of the line.
                del line[owner]
                if queue:
                    line[owner] = queue
                if not future.done():
                    return future
        return None

    async def _dispatch(self, key: str, bucket: _Bucket) -> None:
        while bucket.waiters or bucket.urgent:
            now = self._clock()
            if now < bucket.paused_until:
                delay = bucket.paused_until - now
            else:
                self._refill(bucket)
                if bucket.tokens >= 1.0:
                    future = self._next_waiter(bucket)
                    if future is None:
                        break
                    bucket.tokens -= 1.0
                    bucket.granted += 1
                    future.set_result(None)
                    continue
                delay = (1.0 - bucket.tokens) / max(bucket.limit.rate_per_s, 1e-9)
            bucket.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(delay, 0.001)):
                    await bucket.wake.wait()
