"""Shared, fair budgets for platform API calls, planned across every open card.

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

Two shapes of limit: a token bucket (``rate_per_s``, ``burst``: DingTalk's QPS,
refilling within a second) and a window (``window_s`` > 0: at most ``burst``
calls in any ``window_s`` seconds, Slack's per-minute tiers), which may be
spent in a burst. A window's allowance is planned: every open card
:meth:`reserves <RateBudget.reserve>` the call its final answer will need, and
live updates are granted only from what the reservations leave, so progress
updates can never spend the calls the finals need. Once a window runs low,
a card's later live updates are paced over the window's slices, so an answer
that starts late in the window still gets its first text. A throttle inside a window
teaches the budget, step by step, that the platform's allowance is smaller than
we thought (clock skew, or another client shares it); it grows back a little
every quiet window.
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
    """A token bucket (sustained ``rate_per_s``, bursts up to ``burst``), or with ``window_s`` a window."""

    rate_per_s: float
    """Refill rate in calls per second (a window: ``burst / window_s``, informational)."""
    burst: int = 1
    """Bucket size; for a window, the calls allowed in any ``window_s`` seconds."""
    window_s: float = 0.0
    """Above 0: a sliding window of ``burst`` calls per ``window_s`` seconds instead of a token bucket."""

    @classmethod
    def window(cls, calls: int, window_s: float) -> RateLimit:
        """At most ``calls`` calls in any ``window_s`` seconds."""
        return cls(rate_per_s=calls / window_s, burst=max(int(calls), 1), window_s=window_s)


_SLICES = 10
"""A window is paced in this many slices for the live updates of cards that already show something."""

_PACED_SHARE = 0.5
"""Once less than this share of a window's allowance is left to spare, later live updates are paced to this
share of it, spread evenly over the slices: the rest stays for new cards' first text and for finals, whenever in
the window they come."""

_LEARN_BACK = 0.1
"""After a quiet window, a window's learned allowance grows back by this share of its configured size."""


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
    grants: deque[float] = field(default_factory=deque)
    """A window's grants still inside it, oldest first (clock times)."""
    capacity: float = 0.0
    """A window's allowance as learned from throttles (starts at ``limit.burst``)."""
    adjusted_at: float = 0.0
    """When the learned allowance last changed."""
    reserved: dict[str, int] = field(default_factory=dict)
    """Calls reserved per owner (open cards' finals); live updates only get what they leave."""
    served: dict[str, int] = field(default_factory=dict)
    """Live updates granted per owner so far: the least served goes first (a card showing nothing yet)."""
    paced: deque[float] = field(default_factory=deque)
    """A window's recent grants of later live updates (an owner's second and on), within the last slice."""

    @property
    def windowed(self) -> bool:
        """A window-shaped limit."""
        return self.limit.window_s > 0

    @property
    def reservations(self) -> int:
        """Calls reserved by all owners."""
        return sum(self.reserved.values())


class RateBudget:
    """Budgets per key, shared by all cards and fair between them.

    ``acquire`` returns once the caller may make one call. Buckets start full
    (``burst`` tokens, or a whole window's allowance) and refill at ``rate_per_s``
    (or as the window slides).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, key: str, limit: RateLimit) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            now = self._clock()
            bucket = _Bucket(limit=limit, tokens=float(max(limit.burst, 1)), updated_at=now,
                             capacity=float(max(limit.burst, 1)), adjusted_at=now)
            self._buckets[key] = bucket
        elif bucket.limit != limit:
            self._refill(bucket)
            bucket.limit = limit
            bucket.tokens = min(bucket.tokens, float(max(limit.burst, 1)))
            bucket.capacity = min(bucket.capacity, float(max(limit.burst, 1)))
        return bucket

    def _refill(self, bucket: _Bucket) -> None:
        now = self._clock()
        if bucket.windowed:
            self._slide(bucket, now)
            return
        # Tokens do not accrue while the platform told us to back off.
        start = max(bucket.updated_at, bucket.paused_until)
        if now > start:
            rate = max(bucket.limit.rate_per_s, 1e-9)
            bucket.tokens = min(float(max(bucket.limit.burst, 1)), bucket.tokens + (now - start) * rate)
        bucket.updated_at = max(now, bucket.updated_at)

    def _slide(self, bucket: _Bucket, now: float) -> None:
        """Drop the grants that left the window; a quiet window gives back some learned-away allowance."""
        window = bucket.limit.window_s
        while bucket.grants and bucket.grants[0] <= now - window:
            bucket.grants.popleft()
        size = float(max(bucket.limit.burst, 1))
        if bucket.capacity < size and now - bucket.adjusted_at >= window:
            bucket.capacity = min(size, bucket.capacity + max(1.0, size * _LEARN_BACK))
            bucket.adjusted_at = now
        bucket.tokens = bucket.capacity - len(bucket.grants)

    def _free(self, bucket: _Bucket, *, live: bool, owner: str = "") -> bool:
        """Whether a call may go now: a token is there, and for a live update in a window, one no final needs;
        once the window runs low, a card's later live updates (not its first) also keep to the slice pace."""
        now = self._clock()
        if now < bucket.paused_until:
            return False
        self._refill(bucket)
        needed = 1.0 + (bucket.reservations if live and bucket.windowed else 0)
        if bucket.tokens < needed:
            return False
        if live and bucket.windowed and self._scarce(bucket) and bucket.served.get(owner, 0) > 0:
            slice_s = bucket.limit.window_s / _SLICES
            while bucket.paced and bucket.paced[0] <= now - slice_s:
                bucket.paced.popleft()
            return len(bucket.paced) < max(1.0, bucket.capacity * _PACED_SHARE / _SLICES)
        return True

    @staticmethod
    def _scarce(bucket: _Bucket, *, taken: bool = False) -> bool:
        """Less than :data:`_PACED_SHARE` of the window is left to spare (``taken``: counting the grant just made)."""
        spare = bucket.tokens + (1.0 if taken else 0.0) - bucket.reservations
        return spare < bucket.capacity * _PACED_SHARE

    def _take(self, bucket: _Bucket, owner: str, *, live: bool) -> None:
        bucket.granted += 1
        bucket.tokens -= 1.0
        if bucket.windowed:
            bucket.grants.append(self._clock())
        if live:
            if bucket.windowed and bucket.served.get(owner, 0) > 0 and self._scarce(bucket, taken=True):
                bucket.paced.append(self._clock())  # counts against the slice's pace
            bucket.served[owner] = bucket.served.get(owner, 0) + 1

    def try_acquire(self, key: str, limit: RateLimit, owner: str, *, priority: bool = False) -> bool:
        """Take one token of ``key`` now if one is free and nobody waits ahead; False (nothing taken) otherwise.

        The synchronous fast path of :meth:`acquire`: a call that need not wait costs no event-loop hop.
        """
        bucket = self._bucket(key, limit)
        live = not priority
        ahead = bucket.urgent if priority else (bucket.urgent or bucket.waiters)
        if ahead or not self._free(bucket, live=live, owner=owner):
            return False
        self._take(bucket, owner, live=live)
        return True

    async def acquire(self, key: str, limit: RateLimit, owner: str, *, priority: bool = False) -> float:
        """Wait for one token of ``key`` (created with ``limit`` on first use); returns the seconds waited.

        ``owner`` identifies the card; waiting owners are served round-robin,
        ``priority`` callers before the others (reservations never hold them back).
        Cancelling the wait gives up the place in line without using a token.
        """
        if self.try_acquire(key, limit, owner, priority=priority):
            return 0.0
        bucket = self._bucket(key, limit)
        started = self._clock()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = bucket.urgent if priority else bucket.waiters
        line.setdefault(owner, deque()).append(future)
        self._ensure_dispatcher(key, bucket)
        try:
            await future
        except asyncio.CancelledError:
            self._withdraw(bucket, line, owner, future)
            raise
        return self._clock() - started

    def _ensure_dispatcher(self, key: str, bucket: _Bucket) -> None:
        if bucket.dispatcher is None or bucket.dispatcher.done():
            bucket.dispatcher = asyncio.create_task(self._dispatch(bucket), name=f"rate-budget:{key}")

    def _withdraw(self, bucket: _Bucket, line: OrderedDict[str, deque[asyncio.Future[None]]], owner: str,
                  future: asyncio.Future[None]) -> None:
        """A cancelled wait leaves the line; a token granted as it was cancelled goes back."""
        queue = line.get(owner)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del line[owner]
            if not bucket.waiters and not bucket.urgent:
                # Nobody left in line: let a dispatcher sleeping out a long pause end now, not then.
                bucket.wake.set()
        elif future.done() and not future.cancelled():
            bucket.tokens += 1.0
            bucket.granted -= 1
            if bucket.windowed and bucket.grants:
                bucket.grants.pop()

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner`` (an open card's final answer): live updates leave it alone.

        It stays reserved until the call succeeded (:meth:`unreserve`), so a final that fails and is tried
        again, or closed later, still has it; :meth:`release` gives back all that is left (the card ended).
        """
        bucket = self._bucket(key, limit)
        bucket.reserved[owner] = bucket.reserved.get(owner, 0) + 1

    def unreserve(self, key: str, owner: str) -> None:
        """One reserved call of ``owner`` was made and landed: it is no longer kept."""
        bucket = self._buckets.get(key)
        if bucket is not None and bucket.reserved.get(owner):
            self._unreserve(bucket, owner)
            bucket.wake.set()

    def release(self, key: str, owner: str) -> None:
        """``owner`` is done with ``key``: give back the calls it still holds, forget what it was served."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        bucket.served.pop(owner, None)
        bucket.reserved.pop(owner, None)
        bucket.wake.set()  # live updates held back for it may go now

    def _unreserve(self, bucket: _Bucket, owner: str) -> None:
        left = bucket.reserved.get(owner, 0) - 1
        if left > 0:
            bucket.reserved[owner] = left
        else:
            bucket.reserved.pop(owner, None)

    def reserved(self, key: str) -> int:
        """Calls of ``key`` reserved by open cards now."""
        bucket = self._buckets.get(key)
        return bucket.reservations if bucket else 0

    def available(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` that could be made now, before reservations (0 while paused)."""
        bucket = self._bucket(key, limit)
        if self._clock() < bucket.paused_until:
            return 0.0
        self._refill(bucket)
        return max(bucket.tokens, 0.0)

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` a live update or a new card could use now: what is free beyond the reservations."""
        bucket = self._bucket(key, limit)
        reserved = bucket.reservations if bucket.windowed else 0
        return max(self.available(key, limit) - reserved, 0.0)

    def pause(self, key: str, seconds: float) -> None:
        """Hand out no token of ``key`` for ``seconds`` (a throttle answer); the bucket restarts empty.

        In a window, the calls it holds now are taken as the platform's real allowance.
        """
        bucket = self._buckets.get(key)
        if bucket is None:
            return
        until = self._clock() + max(seconds, 0.0)
        if until > bucket.paused_until:
            self._refill(bucket)
            bucket.paused_until = until
            bucket.tokens = 0.0
            if bucket.windowed:
                # Slack counted more than we did (skew, another client on the same token): aim lower, but
                # step by step, since our window may not be the platform's; Retry-After did the rest.
                learned = max(float(len(bucket.grants)), bucket.capacity * (1 - _LEARN_BACK))
                bucket.capacity = max(1.0, min(bucket.capacity, learned))
                bucket.adjusted_at = until
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

    def _next_waiter(self, bucket: _Bucket) -> tuple[asyncio.Future[None], str, bool] | None:
        """The next caller to serve: urgent ones whenever a token is free, live ones only from what reservations leave.

        Urgent callers are served round-robin; live ones least-served first (then round-robin), so a
        card that shows nothing yet goes before one showing its third update.
        """
        for line, live in ((bucket.urgent, False), (bucket.waiters, True)):
            while line:
                owner = min(line, key=lambda o: bucket.served.get(o, 0)) if live else next(iter(line))
                if not self._free(bucket, live=live, owner=owner):
                    break
                queue = line[owner]
                future = queue.popleft()
                # Round-robin: the served owner goes to the back of the line.
                del line[owner]
                if queue:
                    line[owner] = queue
                if not future.done():
                    return future, owner, live
        return None

    def _delay(self, bucket: _Bucket) -> float:
        """How long the dispatcher may sleep before a token could be free (a release or pause wakes it sooner)."""
        now = self._clock()
        if now < bucket.paused_until:
            return bucket.paused_until - now
        if bucket.windowed:
            # The next grant to leave the window or the slice; held back only by reservations: until a release.
            delay = bucket.grants[0] + bucket.limit.window_s - now if bucket.grants else bucket.limit.window_s
            if bucket.paced:
                delay = min(delay, bucket.paced[0] + bucket.limit.window_s / _SLICES - now)
            return delay
        return (1.0 - bucket.tokens) / max(bucket.limit.rate_per_s, 1e-9)

    async def _dispatch(self, bucket: _Bucket) -> None:
        while bucket.waiters or bucket.urgent:
            chosen = self._next_waiter(bucket)
            if chosen is not None:
                future, owner, live = chosen
                self._take(bucket, owner, live=live)
                future.set_result(None)
                continue
            delay = self._delay(bucket)
            bucket.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(delay, 0.001)):
                    await bucket.wake.wait()
