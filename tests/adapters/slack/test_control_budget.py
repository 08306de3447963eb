"""A Stop control's delete is planned like a final: reserved when the control opens, spent by a priority call.

The real slack_sdk client against the fake Slack; the budget runs on a clock the
test holds still, so a spent window stays spent (no timing in the assertions).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.limits import SlackBuckets
from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import SlackConfig
from botgateway.sink import CardTarget
from botgateway.snapshot import CardSnapshot
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.parked import parked
from tests.watched_ledger import WatchedLedger

DELETE = "slack:T0001:chat.delete"
THREAD = "100.000001"


class Clock:
    """A clock the test moves by hand (here: never)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def _sink(fake: FakeSlack, budget: RateBudget) -> tuple[SlackCardSink, SlackBuckets]:
    config = SlackConfig(bot_token=SecretStr(BOT_TOKEN), api_base_url=fake.api_url, streaming="native")
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    return SlackCardSink(client, config, pacer=BudgetPacer(budget)), SlackBuckets.from_config(config)


def _target(turn: str = "turn-1", channel: str = "C1") -> CardTarget:
    return CardTarget(platform="slack", chat_id=channel, thread_id=THREAD, turn_id=turn, user_id="U1",
                      is_group=True, workspace_id="T0001")


def _controls(fake: FakeSlack, channel: str = "C1") -> list[Any]:
    return [m for m in fake.thread(channel, THREAD) if not m.stream and m.buttons()]


def snap(status: str, answer: str = "") -> CardSnapshot:
    return CardSnapshot(status=status, answer=answer)  # type: ignore[arg-type]


async def test_a_flood_of_live_calls_cannot_starve_a_controls_delete(fake: FakeSlack) -> None:
    clock = Clock()
    ledger = WatchedLedger(clock=clock)
    budget = RateBudget(clock=clock, ledger=ledger)
    sink, buckets = _sink(fake, budget)
    key, limit = buckets.delete_bucket(_target())
    assert key == DELETE and limit.burst == 50  # Tier 3, each call counted from its answer
    handle = await sink.create(_target(), snap("working"))
    assert budget.reserved(DELETE) == 1  # the delete is planned as soon as the control is
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    [control] = _controls(fake)

    async def other_call() -> None:
        return None

    # Other cards' calls on chat.delete, none of them urgent: they may spend all but the reserved call.
    flood = [await parked(BudgetPacer(budget).call(DELETE, limit, other_call, owner=f"live-{i}")) for i in range(60)]
    await ledger.refused(1)  # the 50th was asked for, and refused: the last call is the delete's
    assert sum(task.done() for task in flood) == 49 and budget.waiting(DELETE) == 11

    await sink.finalize(handle, snap("done", "Answered."))
    assert [m.ts for m in fake.deleted] == [control.ts]  # at once: the clock never moved, the window never slid
    assert budget.reserved(DELETE) == 0 and budget.available(DELETE, limit) == 0
    await ledger.refused(2)  # woken as the reservation was spent, the dispatcher asked again
    assert budget.waiting(DELETE) == 11  # the delete took its own call, nobody else's
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)
    await sink.aclose()


async def test_the_reservation_is_given_back_however_the_control_goes(fake: FakeSlack) -> None:
    budget = RateBudget(clock=Clock())
    sink, buckets = _sink(fake, budget)
    # Deleted.
    first = await sink.create(_target("t1", "C1"), snap("working"))
    await fake.wait_for(lambda: len(_controls(fake, "C1")) == 1)
    # Never posted: Slack paused the channel's posts before the control's turn came.
    post_key, post_limit = buckets.post_bucket(_target("t2", "C2"))
    await budget.acquire(post_key, post_limit, "another-card")
    budget.pause(post_key, 60)
    second = await sink.create(_target("t2", "C2"), snap("working"))
    assert budget.reserved(DELETE) == 2
    await sink.finalize(first, snap("done", "One."))
    await sink.finalize(second, snap("done", "Two."))
    assert len(fake.deleted) == 1 and budget.reserved(DELETE) == 0
    # Failed for good: the post is refused, so there is nothing to delete.
    fake.fail("chat.postMessage", "restricted_action")
    third = await sink.create(_target("t3", "C3"), snap("working"))
    await fake.wait_for(lambda: len(fake.calls_of("chat.postMessage")) == 2)
    await sink.finalize(third, snap("done", "Three."))
    # Slack will not delete it: the control loses its button in a chat.update instead.
    fourth = await sink.create(_target("t4", "C4"), snap("working"))
    await fake.wait_for(lambda: len(_controls(fake, "C4")) == 1)
    fake.fail("chat.delete", "cant_delete_message")
    await sink.finalize(fourth, snap("done", "Four."))
    assert _controls(fake, "C4") == [] and len(fake.deleted) == 1
    assert budget.reserved(DELETE) == 0
    await sink.aclose()
