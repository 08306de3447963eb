"""A stream planned from a budget that was spent meanwhile starts as an edited message instead of waiting.

In a fleet a replica plans each answer from a view of the shared budget that
is a moment old: another replica may have spent the workspace's
``chat.startStream`` window since. Here the plan is made, then the window is
spent by other cards before the card asks for its call; the real streamer and
Slack sink, with the real slack_sdk client against the fake Slack, must
switch the card to a placeholder and edits at once, with its final reserved
where the new plan makes it. The budget's clock stands still: the spent
window can only slide if the test moves it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.limits import SlackBuckets
from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.caller import BudgetPacer
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer
from botgateway.config import SlackConfig
from botgateway.events import AnswerDelta, TurnDone, TurnResult
from botgateway.sink import CardTarget
from tests.fakes.slack import BOT_TOKEN, FakeSlack

THREAD = "100.000001"


class Clock:
    """A clock the test holds still."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


async def test_a_stream_whose_window_was_spent_after_the_plan_starts_as_an_edited_message(fake: FakeSlack) -> None:
    budget = RateBudget(clock=Clock())
    config = SlackConfig(bot_token=SecretStr(BOT_TOKEN), api_base_url=fake.api_url, streaming="native",
                         stop_button=False, stream_starts_per_channel=False)
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    sink = SlackCardSink(client, config, pacer=BudgetPacer(budget))
    buckets = SlackBuckets.from_config(config)
    target = CardTarget(platform="slack", chat_id="C1", thread_id=THREAD, turn_id="turn-1", user_id="U1",
                        is_group=True, workspace_id="T0001")
    start_key, start = buckets.start_bucket(target)
    stop_key, _ = buckets.stop_bucket(target)
    update_key, _ = buckets.update_bucket(target)

    assert sink.rate_key("create", target)[0] == start_key  # planned as a stream: the window had calls to spare
    for n in range(start.burst):  # ... which other cards spend before this one asks for its call
        assert budget.try_acquire(start_key, start, f"other-{n}", priority=True)

    streamer = CardStreamer(sink, target, policy=BufferPolicy.from_config(), budget=budget,
                            state=CardState(model_label="demo model"))
    await streamer.start()
    assert streamer.handle is not None and streamer.handle.data.get("mode") == "edit"
    # The card's final is now reserved where an edited message makes it: chat.update, not chat.stopStream.
    assert budget.reserved(update_key) == 1 and budget.reserved(stop_key) == 0
    await streamer.feed(AnswerDelta(text="All hosts in cn-hangzhou are running."))
    await streamer.feed(TurnDone(result=TurnResult(answer="All hosts in cn-hangzhou are running.")))
    metrics = await streamer.finish()

    assert not fake.calls_of("chat.startStream")  # it never waited for, nor spent, a stream
    [message] = fake.thread("C1", THREAD)
    assert "All hosts in cn-hangzhou are running." in message.markdown() and not message.stream
    assert not metrics.fallback_used and budget.reserved(update_key) == 0
