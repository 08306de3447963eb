"""Shared, fair budgets for platform API calls, planned across every open card.

Every card call draws one call of the budget its sink names
(:meth:`botgateway.sink.CardSink.rate_key`): all cards of one Slack workspace
share the ``chat.update`` budget, all cards of one DingTalk app the card API
budget. When no call is free, callers wait in line; the line is served
round-robin by *owner* (one owner per card), so a card with many calls
waiting cannot starve another card. A throttle answer from the platform
:meth:`pauses <RateBudget.pause>` the whole budget, because every other card
would be throttled too, and lowers the limit its calls are granted by until
quiet gives it back (:mod:`botgateway.budget.learned`): the callers in line
wait the pause out, then go at the learned rate, never in a volley. Calls that
open or close a card (``priority=True``)
go before live updates: a final answer should not queue behind other cards'
progress updates, and a live update that waits simply carries newer text.
Live updates go least-served first: a card that shows nothing yet before one
showing its third update.

This module is the line; the accounts behind it (token buckets and windows,
the calls every open card :meth:`reserves <RateBudget.reserve>` for its final,
pauses, the allowance learned from throttles) are a
:class:`~botgateway.budget.ledgers.base.Ledger`: in memory for one process
(:class:`~botgateway.budget.ledgers.local.LocalLedger`, the default), or in Redis
for a fleet, where every process keeps its own line in front of the shared
accounts (:class:`~botgateway.budget.ledgers.shared.SharedLedger`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cachetools import LRUCache

from botgateway.budget.learned import Estimate
from botgateway.budget.least_served import LeastServed
from botgateway.budget.ledgers.base import Ledger, Verdict
from botgateway.budget.ledgers.local import LocalLedger
from botgateway.budget.rate_limit import RateLimit

__all__ = ["SHOWN_KEYS", "RateBudget", "RateLimit", "WouldWait"]

_Grant = tuple[str, float]
"""A granted call: the ledger's ticket, and when the dispatcher granted it (the budget's clock)."""

_Lane = OrderedDict[str, deque[asyncio.Future[_Grant]]]
"""Callers waiting, per owner, in the order owners are served (round-robin)."""

_MOST_AT_ONCE = 64
"""A token bucket is asked for at most this many calls at once for the callers in line."""

SHOWN_KEYS = 200
""":meth:`RateBudget.estimates` tells of the keys used most recently, this many at most: a per-channel key for every
channel of a large workspace must not grow ``/metrics`` without bound."""


class WouldWait(Exception):
    """The accounts say no call of the key can be granted within the caller's patience (see :meth:`RateBudget.acquire`).

    Nothing was taken: the caller may plan the call another way (another method, another bucket) or wait on.
    """

    def __init__(self, free_in_s: float) -> None:
        super().__init__(f"no call free for {free_in_s:.1f} s")
        self.free_in_s = free_in_s
        """When the accounts expect a call to be free, in seconds from when they said so."""


@dataclass
class _Line:
    """The callers waiting for one key (mutable; owned by :class:`RateBudget`)."""

    limit: RateLimit
    """The latest limit a caller passed."""
    waiters: _Lane = field(default_factory=OrderedDict)
    """Live updates waiting, per owner."""
    urgent: _Lane = field(default_factory=OrderedDict)
    """Priority callers (card creation, final answers, cleanups), served before ``waiters``, round-robin too."""
    dispatcher: asyncio.Task[None] | None = None
    """The task that hands calls to waiters while any wait."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the accounts change (a release, a pause) so a sleeping dispatcher asks again."""
    granted: int = 0
    """Calls handed out so far (for stats)."""
    landed: int = 0
    """Calls handed out whose answer came back (or that failed) so far."""
    served: dict[str, int] = field(default_factory=dict)
    """Live updates granted per owner so far: the least served goes first (a card showing nothing yet)."""
    order: LeastServed = field(default_factory=LeastServed)
    """The owners in ``waiters``, least served first."""
    patient: dict[asyncio.Future[_Grant], float] = field(default_factory=dict)
    """Callers that wait only while a call can come soon: the latest time (the budget's clock) worth waiting for."""
    free_at: float = 0.0
    """When the accounts' last refusal expected a call to be free (the budget's clock); 0 after a grant."""

    def requeue(self, owner: str) -> None:
        """Place ``owner`` among the live callers by what it was served, or take it out once it has none waiting."""
        if owner in self.waiters:
            self.order.put(owner, self.served.get(owner, 0))
        else:
            self.order.drop(owner)


class RateBudget:
    """Budgets per key, shared by all cards and fair between them.

    ``acquire`` returns once the caller may make one call. A budget starts
    full (``burst`` calls, or a whole window's allowance) and refills at
    ``rate_per_s`` (or as the window slides). ``ledger`` keeps the accounts
    (default: in memory, on ``clock``).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, ledger: Ledger | None = None) -> None:
        self._clock = clock
        self._ledger: Ledger = ledger if ledger is not None else LocalLedger(clock=clock)
        self._lines: dict[str, _Line] = {}
        self._shown: LRUCache[str, RateLimit] = LRUCache(SHOWN_KEYS)  # the keys used last, for estimates()

    def _line(self, key: str, limit: RateLimit) -> _Line:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(limit=limit)
        line.limit = limit
        self._shown[key] = limit
        return line

    def _later(self, line: _Line, owner: str) -> bool:
        return line.served.get(owner, 0) > 0

    def _count(self, line: _Line, owner: str, *, live: bool) -> None:
        line.granted += 1
        if live:
            line.served[owner] = line.served.get(owner, 0) + 1

    def try_acquire(self, key: str, limit: RateLimit, owner: str, *, priority: bool = False) -> bool:
        """Take one call of ``key`` now if one is free and nobody waits ahead; False (nothing taken) otherwise.

        The synchronous fast path of :meth:`acquire`: a call that need not wait costs no event-loop hop.
        A ledger that must ask another process (Redis) answers False: :meth:`acquire` then asks it.
        """
        line = self._line(key, limit)
        live = not priority
        ahead = line.urgent if priority else (line.urgent or line.waiters)
        if ahead or not self._ledger.take_now(key, limit, live=live, later=self._later(line, owner)):
            return False
        self._count(line, owner, live=live)
        return True

    async def acquire(
        self, key: str, limit: RateLimit, owner: str, *, priority: bool = False, patience_s: float | None = None
    ) -> float:
        """Wait for one call of ``key`` (created with ``limit`` on first use); returns the seconds waited.

        ``owner`` identifies the card; waiting owners are served round-robin,
        ``priority`` callers before the others (reservations never hold them back).
        Cancelling the wait gives up the place in line without using a call.

        ``patience_s``: wait only while a call can come that soon. When the accounts say the next call of
        ``key`` is further away (a window spent, by this process or another; a pause), :class:`WouldWait`
        is raised at once, and nothing is taken: the caller can plan the call another way.
        """
        if self.try_acquire(key, limit, owner, priority=priority):
            return 0.0
        line = self._line(key, limit)
        started = self._clock()
        if patience_s is not None and line.free_at > started + patience_s:
            raise WouldWait(line.free_at - started)  # the last refusal already said so: no need to ask again
        future: asyncio.Future[_Grant] = asyncio.get_running_loop().create_future()
        if patience_s is not None:
            line.patient[future] = started + patience_s
        lane = line.urgent if priority else line.waiters
        lane.setdefault(owner, deque()).append(future)
        if not priority and owner not in line.order:
            line.requeue(owner)
        if line.dispatcher is None or line.dispatcher.done():
            line.dispatcher = asyncio.create_task(self._dispatch(key, line), name=f"rate-budget:{key}")
        elif priority:
            line.wake.set()  # a dispatcher asleep on a refused live update must serve this final first, now
        try:
            _, granted_at = await future
        except asyncio.CancelledError:
            self._withdraw(key, line, lane, owner, future)
            raise
        finally:
            line.patient.pop(future, None)
        now = self._clock()
        self._ledger.late(key, now - granted_at)  # the loop was busy between the grant and this call
        return now - started

    def _withdraw(self, key: str, line: _Line, lane: _Lane, owner: str, future: asyncio.Future[_Grant]) -> None:
        """A cancelled wait leaves the line; a call granted as it was cancelled goes back."""
        queue = lane.get(owner)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del lane[owner]
                line.requeue(owner)
            if not line.waiters and not line.urgent:
                # Nobody left in line: let a dispatcher sleeping out a long pause end now, not then.
                line.wake.set()
        elif future.done() and not future.cancelled():
            line.granted -= 1
            self._ledger.give_back(key, future.result()[0])

    def landed(self, key: str) -> None:
        """A call granted for ``key`` was made and its answer came back (or it failed, or was abandoned).

        Every granted call that went out must say so, once: a limit on arrivals counts a call until a second
        after its answer (:attr:`RateLimit.arrivals_per_s`).
        """
        self._ledger.landed(key)
        line = self._lines.get(key)
        if line is not None:
            line.landed += 1
        if line is not None and line.limit.arrivals_per_s > 0 and (line.waiters or line.urgent):
            line.wake.set()  # a call held back only by calls on their way may go a second after this one

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner`` (an open card's final answer, a cleanup): live updates leave it alone.

        It stays reserved until the call succeeded (:meth:`unreserve`), so a final that fails and is tried
        again, or closed later, still has it; :meth:`release` gives back all that is left (the card ended).
        """
        self._ledger.reserve(key, limit, owner)

    async def claim(self, key: str, limit: RateLimit, owner: str) -> bool:
        """:meth:`reserve` one call of ``key`` for ``owner`` only if the accounts can still promise it: a window's
        calls left beyond every reservation, the fleet's included, checked and reserved in one step. False:
        nothing was reserved (a card's final would wait for the window to slide: plan it another way)."""
        return await self._ledger.claim(key, limit, owner)

    def unreserve(self, key: str, owner: str) -> None:
        """One reserved call of ``owner`` was made and landed: it is no longer kept."""
        self._ledger.unreserve(key, owner)
        self._wake(key)

    def release(self, key: str, owner: str) -> None:
        """``owner`` is done with ``key``: give back the calls it still holds, forget what it was served."""
        line = self._lines.get(key)
        if line is not None:
            line.served.pop(owner, None)
            if owner in line.order:
                line.requeue(owner)
        self._ledger.release(key, owner)
        self._wake(key)  # live updates held back for it may go now

    def keys(self) -> tuple[str, ...]:
        """The rate keys this budget has been asked for so far (a platform's app or workspace × API)."""
        return tuple(self._lines)

    def limit_of(self, key: str) -> RateLimit | None:
        """The latest limit a caller gave for ``key``; None for a key never asked for."""
        line = self._lines.get(key)
        return line.limit if line else None

    def reserved(self, key: str) -> int:
        """Calls of ``key`` reserved by this process's open cards now."""
        return self._ledger.reserved(key)

    def available(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` that could be made now, before reservations (0 while paused)."""
        return self._ledger.available(key, limit)

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` a live update or a new card could use now: what is free beyond the reservations."""
        return self._ledger.spare(key, limit)

    def pause(self, key: str, seconds: float) -> None:
        """The platform throttled a call of ``key``: hand out no call of it, to any caller, for ``seconds`` (its
        ``Retry-After``); the budget restarts empty and its limit is learned lower, then given back in quiet
        (:mod:`botgateway.budget.learned`). Every throttle answer is reported here, once."""
        self._ledger.pause(key, seconds)
        self._wake(key)

    def estimates(self) -> tuple[Estimate, ...]:
        """Each key's configured limit, learned limit and throttles, for the :data:`SHOWN_KEYS` keys used last
        (by key). With Redis, the learned limits and throttles are the fleet's, as last seen."""
        return tuple(self._ledger.estimate(key, limit) for key, limit in sorted(self._shown.items()))

    def paused_for(self, key: str) -> float:
        """Seconds left of the pause on ``key`` (0 when not paused)."""
        return self._ledger.paused_for(key)

    def waiting(self, key: str) -> int:
        """How many calls wait for ``key`` now."""
        line = self._lines.get(key)
        if line is None:
            return 0
        return sum(len(q) for q in line.waiters.values()) + sum(len(q) for q in line.urgent.values())

    def granted(self, key: str) -> int:
        """How many calls of ``key`` this budget has handed out."""
        line = self._lines.get(key)
        return line.granted if line else 0

    def in_flight(self, key: str) -> int:
        """How many calls of ``key`` this budget handed out are still on their way (granted, no answer yet)."""
        line = self._lines.get(key)
        return max(line.granted - line.landed, 0) if line else 0

    def _wake(self, key: str) -> None:
        line = self._lines.get(key)
        if line is not None:
            line.wake.set()

    @staticmethod
    def _next(line: _Line) -> tuple[_Lane, str, bool] | None:
        """Whom to serve next: urgent callers round-robin, else live ones least-served first (then round-robin).

        A live update never goes where an urgent call could not, so asking for the first in line is enough.
        """
        if line.urgent:
            return line.urgent, next(iter(line.urgent)), False
        owner = line.order.first()
        if owner is not None:
            return line.waiters, owner, True
        return None

    @staticmethod
    def _pop(lane: _Lane, owner: str) -> asyncio.Future[_Grant] | None:
        """The owner's first waiting caller; the owner goes to the back of the line (round-robin)."""
        queue = lane.pop(owner, None)
        future = None
        while queue and future is None:
            candidate = queue.popleft()
            if not candidate.done():
                future = candidate
        if queue:
            lane[owner] = queue
        return future

    def _hand_out(self, key: str, line: _Line, verdict: Verdict, *, first: tuple[_Lane, str, bool]) -> None:
        """Give the calls of ``verdict`` to the callers in line: the one it was asked for, then the next ones
        (a bucket's calls are all alike); any call left over goes back."""
        lane, owner, live = first
        count = max(verdict.count, 1)
        for n in range(count):
            if n:
                chosen = self._next(line)
                if chosen is None:  # nobody left in line: the rest go back
                    for _ in range(count - n):
                        self._ledger.give_back(key, verdict.ticket)
                    return
                lane, owner, live = chosen
            future = self._pop(lane, owner)
            if future is not None:
                self._count(line, owner, live=live)
            if live:
                line.requeue(owner)  # behind those served as often, or out of line
            if future is None:  # the caller left while the ledger answered
                self._ledger.give_back(key, verdict.ticket)
                continue
            future.set_result((verdict.ticket, self._clock()))

    def _refused(self, line: _Line, verdict: Verdict, *, live: bool) -> None:
        """Note when a call is expected free; callers in line that would wait longer than their patience leave it.

        Asked for the first in line, the answer holds for every caller behind of the same kind: a live update's
        refusal may come of reservations that an urgent call does not respect, so it tells only live callers.
        """
        free_in = verdict.retry_in_s if verdict.free_in_s is None else verdict.free_in_s
        now = self._clock()
        if not live:
            line.free_at = now + free_in
        if not line.patient:
            return
        lanes = (line.waiters,) if live else (line.urgent, line.waiters)
        for lane in lanes:
            for owner in list(lane):
                queue = lane[owner]
                for future in [f for f in queue if f in line.patient and line.patient[f] < now + free_in]:
                    queue.remove(future)
                    if not future.done():
                        future.set_exception(WouldWait(free_in))
                if not queue:
                    del lane[owner]
                    if lane is line.waiters:
                        line.requeue(owner)

    async def _dispatch(self, key: str, line: _Line) -> None:
        while line.waiters or line.urgent:
            # Cleared before asking: a release or pause while the ledger answers must not be slept through.
            line.wake.clear()
            chosen = self._next(line)
            if chosen is None:
                continue
            lane, owner, live = chosen
            want = 1 if line.limit.windowed else min(self.waiting(key), _MOST_AT_ONCE)
            verdict = await self._ledger.take(key, line.limit, live=live, later=self._later(line, owner), want=want)
            if verdict.granted:
                line.free_at = 0.0
                self._hand_out(key, line, verdict, first=(lane, owner, live))
                continue
            self._refused(line, verdict, live=live)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(verdict.retry_in_s, 0.001)):
                    await line.wake.wait()
