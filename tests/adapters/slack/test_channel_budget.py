"""Thirty people ask in one Slack channel at once: the channel's message slots go in the order they asked.

A channel takes about one new message a second, with short bursts; stream
starts count too. The fake Slack enforces that per channel (429 with
``Retry-After`` past it), the real adapter, gateway, streamer and sink run
against it, and the budget and the fake share a clock the test moves: the
channel's next slots come only when the test says, so which answers were
ready when their slot came is known, not raced.

Askers 1–3 get the burst's slots while their answers are still being written
(the model holds them back): their cards start live. Everyone else's answer is
ready before their slot comes: each must go out as one finished message, no
placeholder first. Every asker gets a reaction at once, before any slot past
the burst.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from adapters.slack import SlackAdapter
from adapters.slack.adapter import Delivery
from adapters.slack.limits import SlackBuckets
from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import ConfigError, GatewayConfig, SlackConfig, parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import conversation_key
from botgateway.model import LLMClient
from botgateway.sink import CardTarget
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolRegistry
from tests.fakes.slack import BOT_TOKEN, FakeSlack, Message, Window
from tests.fakes.slack_env import answer_of, slack_config
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

ASKERS = 30
BURST = 3
RATE = 30.0
"""Messages a second per channel, scaled down from Slack's one: the test's clock is virtual, so only the shape counts."""
LIVE = (1, 2, 3)
"""Askers whose answers the model holds back until their live cards exist."""
STEP_S = BURST / RATE
"""One window of the channel's budget, on the shared clock."""


class Clock:
    """The clock the budget and the fake Slack share; it moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer(k: int) -> str:
    return f"web-{k} is host number {k}, in rack {k % 7}, and it is healthy."


def asker(k: int) -> str:
    return f"U{k:03d}"


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 15.0) -> None:
    """Wait until ``await check()`` holds, yielding to the loop between checks; fail after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.02)


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        return check()
    return checked


class Incident:
    """The fake Slack, the model and a gateway with the Slack adapter, on one virtual clock for the rate limits."""

    def __init__(self, tmp: Path, streaming: str) -> None:
        self.tmp = tmp
        self.clock = Clock()
        self.fake = FakeSlack(channel_limit=Window(BURST, BURST / RATE, "channel"), clock=self.clock)
        self.gates = {k: asyncio.Event() for k in LIVE}
        self.llm = ScriptedLLMServer(responder=self._respond)
        self.streaming = streaming
        self.budget = RateBudget(clock=self.clock)
        self.deliveries: asyncio.Queue[Delivery] = asyncio.Queue()
        self.completed: list[int] = []
        """Askers in the order their answer became complete on Slack."""
        self.threads: dict[str, int] = {}
        """Thread ts → asker."""

    async def _respond(self, body: dict[str, Any]) -> Script:
        question = str(body["messages"][-1]["content"])
        k = int(re.findall(r"question (\d+)", question)[-1])
        if k in self.gates:
            await self.gates[k].wait()
        return Script.text(answer(k), chunk_size=12)

    def _watch(self, msg: Message, change: str, at: float) -> None:
        k = self.threads.get(msg.thread_ts or "")
        if k is None or k in self.completed or msg.streaming:
            return
        shown = msg.text if msg.stream else answer_of(msg.markdown())
        if shown == answer(k):
            self.completed.append(k)

    async def run(self) -> AsyncIterator[Incident]:
        """Start everything, yield, and tear down in ``botgateway run``'s order."""
        await self.fake.start()
        llm_url = await self.llm.start()
        # A stream's Stop control is a message of its own, posted when no answer waits in the channel's line: the first
        # answer's could go before the second question arrives, so streams go without one here, to count slots exactly.
        config = slack_config(llm_url, self.fake, streaming=self.streaming, post_rate_per_s=RATE, post_burst=BURST,
                              stop_button=self.streaming != "native")
        self.store = SqliteStore(self.tmp / "slack.db")
        await self.store.open()
        self.memory = Memory(self.store, max_history_tokens=6000, keep_recent_turns=4)
        llm = LLMClient(config.llm, base_url=llm_url)
        loop = ToolLoop(llm, ToolRegistry([]), self.memory, max_rounds=2, system_prompt="sys")
        self.gateway = Gateway(loop=loop, store=self.store, budget=self.budget, config=config, model_label="test")
        self.adapter = SlackAdapter(config.adapters.slack, store=self.store, observer=self.deliveries.put_nowait,
                                    pacer=BudgetPacer(self.budget))
        self.fake.watch(self._watch)
        await self.adapter.start(self.gateway)
        try:
            yield self
        finally:
            for gate in self.gates.values():
                gate.set()
            await self.gateway.aclose()
            await self.adapter.stop()
            await llm.aclose()
            await self.memory.aclose()
            await self.store.close()
            await self.llm.stop()
            await self.fake.stop()

    async def ask_all(self) -> dict[int, str]:
        """Every asker mentions the bot in #incident at once; returns each one's message ts (their thread)."""
        events = {k: self.fake.mention(f"question {k}: is web-{k} healthy?", user=asker(k), channel="C1")
                  for k in range(1, ASKERS + 1)}
        self.threads = {e["ts"]: k for k, e in events.items()}
        envelopes = [await self.fake.push(self.fake.event_payload(e)) for e in events.values()]
        for envelope in envelopes:
            await self.fake.wait_ack(envelope, timeout=3.0)
        deliveries = [await asyncio.wait_for(self.deliveries.get(), 10) for _ in envelopes]
        assert [d.outcome for d in deliveries] == ["submitted"] * ASKERS
        return {k: e["ts"] for k, e in events.items()}

    async def all_ready(self, threads: list[str]) -> bool:
        """Whether the turns of all ``threads`` have their answers."""
        return all([await self.ready(ts) for ts in threads])

    async def ready(self, ts: str) -> bool:
        """Whether the turn of thread ``ts`` has its answer (its history is written when the turn completes)."""
        conversation = conversation_key("slack", "thread", workspace="T0001", chat="C1", thread=ts)
        return any(m.get("role") == "assistant" for m in await self.memory.history(conversation))


@pytest.fixture
async def incident(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Incident]:
    async for ready in Incident(tmp_path, request.param).run():
        yield ready


def _messages(fake: FakeSlack, ts: str) -> list[Message]:
    return fake.thread("C1", ts)


@pytest.mark.parametrize("incident", ["native", "edit"], indirect=True)
async def test_thirty_askers_in_one_channel_get_their_answers_in_order_each_finished_in_its_slot(
    incident: Incident,
) -> None:
    fake = incident.fake
    threads = await incident.ask_all()

    # Each asker gets a reaction at once: before any message slot past the burst came (the clock has not moved).
    await fake.wait_for(lambda: all(fake.reactions.get(("C1", ts)) == ["eyes"] for ts in threads.values()))
    assert len(fake.calls_of("reactions.add")) == ASKERS
    assert len(fake.channel_messages("C1")) <= BURST

    # The burst's slots open the cards of the first three askers, whose answers are still being written.
    await fake.wait_for(lambda: all(_messages(fake, threads[k]) for k in LIVE))
    queued = [threads[k] for k in range(BURST + 1, ASKERS + 1)]
    await until(lambda: incident.all_ready(queued))  # every other answer is ready long before its slot...
    assert all(not _messages(fake, threads[k]) for k in range(BURST + 1, ASKERS + 1))  # ...which has not come
    for k in LIVE:  # the first answers end on their live cards, on the workspace's budgets: no channel slot needed
        incident.gates[k].set()
        await fake.wait_for(lambda k=k: k in incident.completed)  # type: ignore[misc]

    # Each window of the channel's budget lets the next three answers out, finished, in the order they were asked.
    # A message counts until a window after Slack answered it: the clock moves once the answers came back.
    channel = SlackBuckets.from_config(SlackConfig()).post_bucket(_target())[0]
    while len(incident.completed) < ASKERS:
        done = len(incident.completed)
        await until(_async(lambda: incident.budget.in_flight(channel) == 0))
        incident.clock.now += STEP_S
        await fake.wait_for(lambda done=done: len(incident.completed) > done)  # type: ignore[misc]

    assert incident.completed == list(range(1, ASKERS + 1))
    assert len(fake.throttled()) <= 1  # at most one throttle in the channel (none, with the clock held)
    for k, ts in threads.items():
        [message] = _messages(fake, ts)  # one message per answer, the exact answer
        shown = message.text if message.stream else answer_of(message.markdown())
        assert shown == answer(k)
        if k not in LIVE:  # ready when its slot came: one finished message, never a placeholder edited afterwards
            assert not message.stream and message.versions == [message.markdown()]
            assert not any(c.args.get("ts") == message.ts for c in fake.calls if c.method != "chat.postMessage")
    made = fake.calls_of("chat.postMessage") + fake.calls_of("chat.startStream")
    assert len([c for c in made if c.ok]) == ASKERS  # one new message per answer
    assert fake.max_in_window("chat.postMessage", BURST / RATE) <= BURST


# --- the budgets' shape and the plan --------------------------------------------------------------------


def _target(channel: str = "C1", turn: str = "t1") -> CardTarget:
    return CardTarget(platform="slack", chat_id=channel, thread_id="100.000001", turn_id=turn, user_id="U1",
                      is_group=True, workspace_id="T0001")


def test_a_channels_budget_is_a_short_burst_then_about_one_a_second() -> None:
    buckets = SlackBuckets.from_config(SlackConfig())
    key, limit = buckets.post_bucket(_target())
    assert key == "slack:T0001:post:C1"
    # Three at once, then counted on arrival: each message until a window (3 s) after Slack answered it.
    assert (limit.burst, limit.arrivals_per_s, limit.arrival_window_s) == (3, 3, pytest.approx(3.0))
    assert buckets.reaction_bucket(_target())[0] == "slack:T0001:reactions.add"
    faster = SlackBuckets.from_config(SlackConfig(post_rate_per_s=2, post_burst=4)).post
    assert (faster.burst, faster.arrivals_per_s, faster.arrival_window_s) == (4, 4, pytest.approx(2.0))


@pytest.mark.parametrize("per_channel", [True, False])
def test_stream_starts_draw_from_the_channel_unless_configured_otherwise(per_channel: bool) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    config = SlackConfig(bot_token=SecretStr(BOT_TOKEN), streaming="native", stream_starts_per_channel=per_channel)
    budget = RateBudget()
    sink = SlackCardSink(AsyncWebClient(token=BOT_TOKEN), config, pacer=BudgetPacer(budget))
    a, b = _target("C1", "a"), _target("C2", "b")
    keys = {sink.rate_key("create", a)[0], sink.rate_key("create", b)[0]}
    if per_channel:  # each channel's own message budget; the workspace's Tier 2 window the sink pays on the side
        assert keys == {"slack:T0001:post:C1", "slack:T0001:post:C2"}
    else:
        assert keys == {"slack:T0001:chat.startStream"}
    assert sink.rate_key("finalize", a)[0] == "slack:T0001:chat.stopStream"  # still a stream


def test_a_planned_stream_whose_workspace_window_was_spent_is_planned_as_an_edited_message_before_its_final() -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    budget = RateBudget(clock=Clock())
    config = SlackConfig(bot_token=SecretStr(BOT_TOKEN), streaming="native")
    sink = SlackCardSink(AsyncWebClient(token=BOT_TOKEN), config, pacer=BudgetPacer(budget))
    target = _target()
    assert sink.rate_key("create", target)[0] == "slack:T0001:post:C1"
    start_key, start = SlackBuckets.from_config(config).start_bucket(target)
    for n in range(start.burst):  # other answers spend the window meanwhile
        assert budget.try_acquire(start_key, start, f"other-{n}", priority=True)
    assert sink.rate_key("create", target)[0] == "slack:T0001:post:C1"  # the channel's slot all the same...
    assert sink.rate_key("finalize", target)[0] == "slack:T0001:chat.update"  # ...for a placeholder, edited at the end


async def test_the_line_lets_one_card_of_a_channel_go_at_a_time_in_arrival_order() -> None:
    from adapters.slack.channel_line import ChannelLines

    lines = ChannelLines()
    first, second, third = (lines.line_up(_target("C1", f"t{n}")) for n in range(3))
    other = lines.line_up(_target("C2", "o"))
    await asyncio.wait_for(first.turn(), 1)
    await asyncio.wait_for(other.turn(), 1)  # another channel has its own line
    assert (first.ahead, second.ahead, third.ahead) == (0, 1, 2)
    waiting = asyncio.ensure_future(third.turn())
    second.leave()  # an answer that ended without a message gives its place up
    await asyncio.sleep(0)
    assert not waiting.done() and third.ahead == 1
    lines.made(_target("C1", "t0"))  # the head's message is being made: the next one goes
    await asyncio.wait_for(waiting, 1)
    assert lines.waiting("T0001", "C1") == 1
    third.leave()
    third.leave()
    assert lines.waiting("T0001", "C1") == 0


async def test_the_line_keeps_the_order_the_questions_were_asked_in_whichever_turn_lines_up_first() -> None:
    from adapters.slack.channel_line import ChannelLines

    def asked(turn: str, ts: str) -> CardTarget:
        return dataclasses.replace(_target("C1", turn), extra={"ts": ts})

    lines = ChannelLines()
    waiting = lines.line_up(asked("t0", "1700000000.000400"))  # the head, its turn not come yet...
    head = lines.line_up(asked("t1", "1700000000.000300"))  # ...steps back behind a question asked before it
    assert head.head.is_set() and not waiting.head.is_set() and waiting.ahead == 1
    await asyncio.wait_for(head.turn(), 1)  # its turn came: it goes for its slot, nobody goes ahead of it now
    third = lines.line_up(asked("t3", "1700000000.000200"))
    second = lines.line_up(asked("t2", "1700000000.000100"))
    unknown = lines.line_up(_target("C1", "t4"))  # no ts: after every question that has one
    fourth = lines.line_up(asked("t5", "1700000001.5"))
    assert (head.ahead, second.ahead, third.ahead, waiting.ahead, fourth.ahead, unknown.ahead) == (0, 1, 2, 3, 4, 5)
    head.leave()
    await asyncio.wait_for(second.turn(), 1)
    assert not third.head.is_set()


# --- configuration ---------------------------------------------------------------------------------------


def test_the_slack_channel_keys_and_their_defaults() -> None:
    slack = parse_config({}, env={}).adapters.slack
    assert (slack.post_rate_per_s, slack.post_burst, slack.stream_starts_per_channel, slack.ack_reaction) == \
        (1.0, 3, True, "eyes")
    set_ = parse_config({"adapters": {"slack": {"post_burst": 5, "stream_starts_per_channel": False,
                                                  "ack_reaction": ""}}}, env={}).adapters.slack
    assert (set_.post_burst, set_.stream_starts_per_channel, set_.ack_reaction) == (5, False, "")
    for bad in ({"post_burst": 0}, {"ack_reaction": ":eyes:"}, {"stream_starts_per_channel": "sometimes"}):
        with pytest.raises(ConfigError):
            parse_config({"adapters": {"slack": bad}}, env={})


def test_the_default_turn_slots_carry_a_burst_of_a_hundred() -> None:
    assert GatewayConfig().max_concurrent_turns == 128
    assert parse_config({}, env={}).gateway.max_concurrent_turns == 128
