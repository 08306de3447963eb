"""One platform call of a card: wait for the budget, make the call, classify what came back.

Every card call goes through here, whether the streamer makes it (create,
live update, final, fallback), start-up recovery closes a card a crashed
process left open, or a sink pays for a call of its own (:class:`BudgetPacer`):

- the call draws one token of its bucket from the shared
  :class:`~botgateway.budget.rate_budget.RateBudget` (``None``: unpaced, the benchmark's
  baseline only);
- a throttle answer pauses the whole bucket the call drew from (every card
  would be throttled too), for the platform's ``Retry-After`` or, without one,
  a backoff that grows with each throttle in a row; the budget learns from it
  a lower limit for that bucket (:mod:`botgateway.budget.learned`);
- transient errors are retried with jittered backoff until the deadline;
- the result is a :class:`CallOutcome`, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import structlog

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget, RateLimit, WouldWait
from botgateway.cards.metrics import CardMetrics
from botgateway.sink import CardGone, CardOp, PermanentError, RateLimited, TooLong, TransientError

__all__ = ["CREATE_PATIENCE_S", "LIVE_BACKOFF", "BudgetPacer", "CallOutcome", "CardCaller"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

LIVE_BACKOFF = Backoff(base_s=0.25, max_s=5.0)
"""Retry pacing of a card's calls after a transient error or an unexplained throttle."""

PACER_BACKOFF = Backoff(base_s=1.0, max_s=1.0, jitter=(1.0, 1.0))
"""A sink's own throttled call without a Retry-After pauses its bucket this long."""

PACER_MAX_SLEEP_S = 5.0
"""Without a budget to pause, a sink's throttled call waits at most this long before its next try."""

CREATE_PATIENCE_S = 1.0
"""A card whose creation the budget cannot grant within this long is planned another way, where its sink has one
(:class:`~botgateway.sink.Replanning`): a Slack stream whose workspace window another replica spent starts as an
edited message now, instead of waiting most of a minute for the window to slide."""

_NO_DEADLINE_S = 3600.0
"""How long a wait without a deadline may sleep at most between tries."""


class CallOutcome(enum.Enum):
    """How one card call ended, after its retries."""

    OK = "ok"
    """The platform accepted it."""
    TOO_LONG = "too_long"
    """The rendered card is larger than the platform takes."""
    GONE = "gone"
    """The card no longer exists or can no longer be changed."""
    FAILED = "failed"
    """Refused for good (bad token, missing scope), or the sink crashed."""
    TIMEOUT = "timeout"
    """The deadline passed, waiting for the budget or retrying."""
    INTERRUPTED = "interrupted"
    """The interrupt event was set while waiting for the budget (the turn is finishing)."""
    THROTTLED = "throttled"
    """Throttled, and the call was not to be retried (the bucket is paused)."""
    RETRY = "retry"
    """A transient error, and the call was not to be retried."""


class CardCaller:
    """Makes one card's calls through the shared budget; see the module docstring.

    One per card (or per orphan being closed): it owns the card's place in the
    budget's round-robin (``owner``), its throttle streak and its metrics.
    """

    def __init__(
        self,
        budget: RateBudget | None,
        rate_key: Callable[[CardOp], tuple[str, RateLimit]],
        *,
        owner: str,
        platform: str,
        metrics: CardMetrics | None = None,
        backoff: Backoff = LIVE_BACKOFF,
        call_timeout_s: float = 30.0,
        replan: Callable[[CardOp], bool] | None = None,
    ) -> None:
        """``replan(op)`` asks the sink to plan a call another way (see :class:`~botgateway.sink.Replanning`)
        when the budget cannot grant the planned one soon; None: the card waits for the call it planned."""
        self._budget = budget
        self._rate_key = rate_key
        self._replan = replan
        self.owner = owner
        """The card's name in the budget's round-robin."""
        self._platform = platform
        self.metrics = metrics if metrics is not None else CardMetrics()
        """Calls, retries, throttles and budget waits of this card."""
        self._backoff = backoff
        self._call_timeout_s = call_timeout_s
        self._throttle_streak = 0
        self._keys: set[str] = set()  # every budget key this card drew from, given back by release()
        self._final_keys: list[str] = []  # keys of finals reserved and not yet made

    async def reserve_final(self) -> None:
        """Keep one call of the card's final-answer budget for it: other cards' live updates leave it alone.

        The call is claimed (:meth:`RateBudget.claim`): promised only while the accounts, every process's
        reservations counted, still have one. Where they do not (another replica planned the same window's calls a
        moment ago), the sink plans the card another way first, as long as it has one; with none left the call is
        reserved all the same, and the final waits its turn. Its next priority call there uses it (the final,
        usually); :meth:`release` gives back what is left.
        """
        if self._budget is None:
            return
        while True:
            # The sink plans a new card (its mode, hence its final's budget) when asked for the create's budget.
            self._rate_key("create")
            key, limit = self._rate_key("finalize")
            if await self._budget.claim(key, limit, self.owner):
                break
            if self._replan is None or not self._replan("finalize"):
                self._budget.reserve(key, limit, self.owner)
                break
            log.info("card.replanned", platform=self._platform, op="finalize", key=key)
        self._keys.add(key)
        self._final_keys.append(key)

    def release(self) -> None:
        """The card needs no more of the budget: give back its reserved calls and what the budget kept of it."""
        if self._budget is not None:
            for key in self._keys:
                self._budget.release(key, self.owner)
        self._keys.clear()
        self._final_keys.clear()

    def _final_landed(self) -> None:
        """A final answer landed: the call reserved for it is made."""
        if self._budget is not None and self._final_keys:
            self._budget.unreserve(self._final_keys.pop(0), self.owner)

    async def call(
        self,
        op: CardOp,
        make_call: Callable[[], Awaitable[object]],
        *,
        deadline: float | None,
        priority: bool = True,
        interrupt: asyncio.Event | None = None,
        retry: bool = True,
        attempts: int | None = None,
    ) -> CallOutcome:
        """Make ``make_call`` through the budget, retrying throttles and transient errors until ``deadline``.

        ``deadline`` is a :func:`time.monotonic` time (None: no deadline) for
        waiting and retrying: no try starts after it, and a throttle asking to
        wait past it ends the call at once with ``TIMEOUT``. A try once made
        runs to its answer or ``call_timeout_s``, even past the deadline. ``attempts``
        caps the calls made (None: as many as the deadline allows). With
        ``retry=False`` a throttle or transient error ends the call at once
        (``THROTTLED`` / ``RETRY``). Setting ``interrupt`` while the call waits
        for the budget ends it with ``INTERRUPTED``.
        """
        attempt = 0
        while True:
            if attempts is not None and attempt >= attempts:
                return CallOutcome.TIMEOUT
            key = await self._acquire(op, deadline=deadline, priority=priority, interrupt=interrupt)
            if key is None:
                self.metrics.coalesced += 1
                return CallOutcome.INTERRUPTED
            if key is False:
                return CallOutcome.TIMEOUT
            self.metrics.count_call(op)
            if attempt:
                self.metrics.retries += 1
            last = attempts is not None and attempt + 1 >= attempts
            try:
                outcome = await self._attempt(op, key, make_call, attempt, deadline=deadline, retry=retry and not last)
            finally:
                if self._budget is not None:
                    self._budget.landed(key)
            if op == "finalize" and outcome in (CallOutcome.OK, CallOutcome.GONE):
                self._final_landed()
            if last and outcome in (CallOutcome.THROTTLED, CallOutcome.RETRY):
                return CallOutcome.TIMEOUT  # the tries ran out
            if outcome is not None:
                return outcome
            attempt += 1
            if deadline is not None and time.monotonic() >= deadline:
                return CallOutcome.TIMEOUT

    async def _attempt(
        self, op: CardOp, key: str, make_call: Callable[[], Awaitable[object]], attempt: int, *,
        deadline: float | None, retry: bool,
    ) -> CallOutcome | None:
        """One try on the budget of ``key``: its outcome, or None when it is to be tried again (after the wait it
        asked for)."""
        # A call once made gets the whole call timeout, never just what is left of the deadline: the
        # platform may carry out a call we stopped listening to (a card created that nobody closes, an
        # answer counted lost), and a busy event loop can eat those last moments before the answer is read.
        # The deadline decides whether a try starts; the timeout keeps a hung request from freezing the card.
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (shutdown)
            # that arrives as the call completes, and the caller would carry on.
            async with asyncio.timeout(self._call_timeout_s):
                await make_call()
        except RateLimited as exc:
            pause = self._throttled(op, key, exc)
            if not retry:
                if self._budget is None:
                    await asyncio.sleep(pause)
                return CallOutcome.THROTTLED
            if deadline is not None and pause >= _remaining(deadline):
                return CallOutcome.TIMEOUT  # waiting it out cannot end in time
            if self._budget is None:
                await asyncio.sleep(min(pause, _remaining(deadline)))
            return None
        except (TransientError, TimeoutError) as exc:
            log.info("card.transient_error", platform=self._platform, op=op, error=str(exc) or type(exc).__name__)
            if not retry:
                return CallOutcome.RETRY
            await asyncio.sleep(min(self._backoff.delay(attempt), _remaining(deadline)))
            return None
        except TooLong:
            return CallOutcome.TOO_LONG
        except CardGone:
            return CallOutcome.GONE
        except PermanentError as exc:
            log.warning("card.permanent_error", platform=self._platform, op=op, error=str(exc))
            return CallOutcome.FAILED
        except Exception:
            # A sink bug must not lose the answer: report it and let the caller fall back.
            log.exception("card.sink_crashed", platform=self._platform, op=op)
            return CallOutcome.FAILED
        self._throttle_streak = 0
        return CallOutcome.OK

    def backoff(self, attempt: int) -> float:
        """This card's retry delay for ``attempt`` (for waits the caller makes itself)."""
        return self._backoff.delay(attempt)

    def _throttled(self, op: CardOp, key: str, exc: RateLimited) -> float:
        """Report the throttle to the budget of ``key``, the one the call drew from (asking the sink again could name
        another: a card's plan may have changed meanwhile); returns the pause in seconds."""
        self.metrics.throttles += 1
        self._throttle_streak += 1
        # Without a Retry-After, back off longer on every throttle in a row.
        pause = exc.retry_after if exc.retry_after and exc.retry_after > 0 else self._backoff.delay(self._throttle_streak - 1)
        if self._budget is not None:
            self._budget.pause(key, pause)
        log.info("card.throttled", platform=self._platform, op=op, retry_after=exc.retry_after)
        return pause

    async def _acquire(
        self, op: CardOp, *, deadline: float | None, priority: bool, interrupt: asyncio.Event | None
    ) -> str | Literal[False] | None:
        """Wait for the budget: the key granted (``""`` without a budget), False when the deadline passed, None
        when ``interrupt`` was set."""
        if self._budget is None:
            return ""
        patience = CREATE_PATIENCE_S if op == "create" and self._replan is not None else None
        while True:
            key, limit = self._rate_key(op)
            self._keys.add(key)
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                return False
            if self._budget.try_acquire(key, limit, self.owner, priority=priority):
                return key  # a free token: no task, no wait, no event-loop hop
            acquire = asyncio.ensure_future(
                self._budget.acquire(key, limit, self.owner, priority=priority, patience_s=patience)
            )
            waiters: set[asyncio.Future[Any]] = {acquire}  # futures of two result types, as asyncio.wait takes them
            stop = asyncio.ensure_future(interrupt.wait()) if interrupt is not None else None
            if stop is not None:
                waiters.add(stop)
            try:
                done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if stop is not None:
                    stop.cancel()
            if acquire in done:
                try:
                    self.metrics.budget_wait_s += acquire.result()
                except WouldWait as exc:
                    if not await self._plan_again(op, key, exc):
                        patience = None  # no other way: wait for this one
                    continue
                return key
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError, WouldWait):
                await acquire
            return None if (stop is not None and stop in done) else False

    async def _plan_again(self, op: CardOp, key: str, exc: WouldWait) -> bool:
        """The budget cannot grant ``op`` on ``key`` soon: have the sink plan it another way, and keep the card's
        final reserved where the new plan will make it. False when the sink has no other way."""
        assert self._replan is not None and self._budget is not None
        if not self._replan(op):
            return False
        log.info("card.replanned", platform=self._platform, op=op, key=key, free_in_s=round(exc.free_in_s, 1))
        if self._final_keys:
            self._budget.unreserve(self._final_keys.pop(), self.owner)
            await self.reserve_final()
        return True


class BudgetPacer:
    """The core's :class:`~botgateway.sink.CallPacer`: a sink's own calls, paced by the shared budget.

    Throttles pause the named bucket for every card (for ``Retry-After``, else
    ``backoff``) before the next try; other errors are raised at once. A call
    made with ``reserved=True`` spends the owner's reservation once it lands;
    one that fails leaves it for the sink to :meth:`release`.
    """

    def __init__(self, budget: RateBudget | None, *, backoff: Backoff = PACER_BACKOFF) -> None:
        self._budget = budget
        self._backoff = backoff

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` free beyond the reservations (unpaced: unlimited)."""
        return float("inf") if self._budget is None else self._budget.spare(key, limit)

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner`` (see :class:`~botgateway.sink.CallPacer`)."""
        if self._budget is not None:
            self._budget.reserve(key, limit, owner)

    def release(self, key: str, owner: str) -> None:
        """Give back the calls of ``key`` that ``owner`` still holds."""
        if self._budget is not None:
            self._budget.release(key, owner)

    async def call(
        self,
        key: str,
        limit: RateLimit,
        fn: Callable[[], Awaitable[_T]],
        *,
        owner: str,
        priority: bool = False,
        attempts: int = 1,
        reserved: bool = False,
    ) -> _T:
        """Make ``fn()`` once a token of ``key`` is free (see :class:`~botgateway.sink.CallPacer`)."""
        for attempt in range(max(attempts, 1)):
            if self._budget is not None:
                await self._budget.acquire(key, limit, owner, priority=priority or reserved)
            try:
                result = await fn()
            except CardGone:
                if reserved and self._budget is not None:
                    self._budget.unreserve(key, owner)  # nothing left to act on: the call is not needed
                raise
            except RateLimited as exc:
                pause = exc.retry_after if exc.retry_after and exc.retry_after > 0 else self._backoff.delay(attempt)
                if self._budget is not None:
                    self._budget.pause(key, pause)
                log.info("card.throttled", key=key, retry_after=exc.retry_after, attempt=attempt + 1)
                if attempt + 1 >= attempts:
                    raise
                if self._budget is None:
                    await asyncio.sleep(min(pause, PACER_MAX_SLEEP_S))
                continue
            finally:
                if self._budget is not None:
                    self._budget.landed(key)
            if reserved and self._budget is not None:
                self._budget.unreserve(key, owner)
            return result
        raise AssertionError("unreachable")


def _remaining(deadline: float | None) -> float:
    return _NO_DEADLINE_S if deadline is None else max(deadline - time.monotonic(), 0.0)
