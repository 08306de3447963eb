"""CardCaller: one card call through the shared budget, classified; BudgetPacer: a sink's own calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget, RateLimit
from botgateway.cards.caller import BudgetPacer, CallOutcome, CardCaller
from botgateway.sink import CardGone, PermanentError, RateLimited, TooLong, TransientError

LIMIT = RateLimit(rate_per_s=1000.0, burst=100)
NEVER = Backoff(base_s=3600.0, jitter=(1.0, 1.0))
"""A backoff nobody may wait out inside a test: a call that sleeps it hangs the test."""


def scripted(*answers: BaseException | None) -> tuple[Callable[[], Awaitable[None]], list[int]]:
    """A call that raises the scripted errors in turn (``None``: succeeds); the list counts the calls."""
    made: list[int] = []

    async def call() -> None:
        made.append(1)
        answer = answers[min(len(made), len(answers)) - 1]
        if answer is not None:
            raise answer

    return call, made


def caller(budget: RateBudget | None, *, backoff: Backoff = Backoff(base_s=0.001, max_s=0.01)) -> CardCaller:
    return CardCaller(budget, lambda op: ("key", LIMIT), owner="card-1", platform="test", backoff=backoff)


async def test_transient_errors_are_retried_until_the_call_lands() -> None:
    call, made = scripted(TransientError("5xx"), TransientError("reset"), None)
    card = caller(RateBudget())
    async with asyncio.timeout(5):
        outcome = await card.call("finalize", call, deadline=asyncio.get_running_loop().time() + 3600)
    assert outcome is CallOutcome.OK and len(made) == 3
    assert card.metrics.retries == 2 and card.metrics.api_calls == {"finalize": 3}


@pytest.mark.parametrize(
    ("error", "outcome"),
    [(TooLong("big"), CallOutcome.TOO_LONG), (CardGone("gone"), CallOutcome.GONE),
     (PermanentError("scope"), CallOutcome.FAILED), (ValueError("a sink bug"), CallOutcome.FAILED)],
)
async def test_errors_that_retrying_cannot_fix_end_the_call_at_once(error: Exception, outcome: CallOutcome) -> None:
    call, made = scripted(error)
    async with asyncio.timeout(5):
        assert await caller(RateBudget(), backoff=NEVER).call("update", call, deadline=None) is outcome
    assert len(made) == 1


async def test_a_throttle_past_the_deadline_pauses_the_bucket_and_ends_the_call_at_once() -> None:
    budget = RateBudget()
    call, made = scripted(RateLimited(retry_after=600.0))
    card = caller(budget)
    async with asyncio.timeout(5):  # waiting the 600 s out would hang here
        outcome = await card.call("finalize", call, deadline=asyncio.get_running_loop().time() + 10)
    assert outcome is CallOutcome.TIMEOUT and len(made) == 1
    assert budget.paused_for("key") > 590  # every card of the key waits: the platform said so
    assert card.metrics.throttles == 1


async def test_attempts_cap_the_tries_without_waiting_after_the_last() -> None:
    call, made = scripted(TransientError("5xx"))
    async with asyncio.timeout(5):  # a backoff after the last try would hang here
        outcome = await caller(RateBudget(), backoff=NEVER).call("finalize", call, deadline=None, attempts=1)
    assert outcome is CallOutcome.TIMEOUT and len(made) == 1


async def test_without_retry_a_throttle_or_transient_error_comes_back_as_such() -> None:
    budget = RateBudget()
    throttled, _ = scripted(RateLimited(retry_after=0.5))
    transient, _ = scripted(TransientError("reset"))
    card = caller(budget, backoff=NEVER)
    assert await card.call("update", throttled, deadline=None, retry=False) is CallOutcome.THROTTLED
    assert budget.paused_for("key") > 0
    assert await card.call("update", transient, deadline=None, retry=False) is CallOutcome.RETRY


async def test_finish_interrupts_a_call_waiting_for_the_budget() -> None:
    budget = RateBudget()
    await budget.acquire("key", RateLimit(rate_per_s=0.001, burst=1), "someone")  # the bucket is now empty
    interrupt = asyncio.Event()
    call, made = scripted(None)
    card = CardCaller(budget, lambda op: ("key", RateLimit(rate_per_s=0.001, burst=1)), owner="c", platform="test")
    waiting = asyncio.create_task(card.call("update", call, deadline=None, interrupt=interrupt))
    async with asyncio.timeout(5):
        while budget.waiting("key") == 0:  # yield until the call stands in line
            await asyncio.sleep(0)
        interrupt.set()
        assert await waiting is CallOutcome.INTERRUPTED
    assert made == [] and budget.waiting("key") == 0


async def test_the_pacer_pauses_a_throttled_bucket_for_every_card_and_tries_again() -> None:
    budget = RateBudget()
    pacer = BudgetPacer(budget)
    answers: list[BaseException | None] = [RateLimited(retry_after=0.05), None]
    made: list[str] = []

    async def post() -> str:
        made.append("post")
        answer = answers[len(made) - 1]
        if answer is not None:
            raise answer
        return "ts-1"

    async with asyncio.timeout(5):
        assert await pacer.call("slack:T1:post:C1", LIMIT, post, owner="control", attempts=3) == "ts-1"
    assert made == ["post", "post"]
    assert budget.granted("slack:T1:post:C1") == 2


async def test_the_pacer_raises_the_last_throttle_when_the_tries_run_out() -> None:
    pacer = BudgetPacer(RateBudget())

    async def post() -> None:
        raise RateLimited(retry_after=0.01)

    with pytest.raises(RateLimited):
        async with asyncio.timeout(5):
            await pacer.call("k", LIMIT, post, owner="control", attempts=2)


async def test_calls_the_platform_answers_after_their_deadline_are_not_abandoned() -> None:
    # Many cards wait in line behind a throttle pause; each gets its token before the shared deadline, but
    # the platform's answers are read only after it (a busy event loop: 1,000 turns on one process). A call
    # abandoned there was still carried out: a card created that nobody closes, a final counted as lost.
    budget = RateBudget()
    limit = RateLimit(rate_per_s=50.0, burst=2)
    answered = asyncio.Event()
    carried_out: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.5
    # The answers come back after the deadline (timers fire in order, however busy the machine).
    loop.call_at(deadline + 0.25, answered.set)

    def create(owner: str) -> Callable[[], Awaitable[None]]:
        throttled = [owner == "card-0"]  # the first call is throttled: the bucket pauses for every card

        async def call() -> None:
            if throttled and throttled.pop():
                raise RateLimited(retry_after=0.1)
            carried_out.append(owner)  # the platform has it from here on
            await answered.wait()

        return call

    async def one(owner: str) -> tuple[str, CallOutcome]:
        card = CardCaller(budget, lambda op: ("key", limit), owner=owner, platform="test", call_timeout_s=60.0)
        return owner, await card.call("create", create(owner), deadline=deadline)

    async with asyncio.timeout(30):
        outcomes = dict(await asyncio.gather(*(one(f"card-{i}") for i in range(12))))
    assert carried_out  # the line moved before the deadline
    # Every call the platform carried out came back OK; a call that never got a token was never made.
    assert {owner for owner, outcome in outcomes.items() if outcome is CallOutcome.OK} == set(carried_out)
    assert budget.waiting("key") == 0
