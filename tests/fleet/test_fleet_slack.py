"""Three real gateway processes behave like one bot: one Slack budget, one turn per conversation, stops and crashes.

The replicas share one Redis prefix and serve one workspace of the fake Slack,
which enforces Slack's published tiers (per-minute windows, 429 past them).
The test stands in for the load balancer: it sends each event to the replica
it chooses.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.slack import FakeSlack, Message, Window
from tests.fakes.stores import purge_prefix, unique_prefix
from tests.fleet.harness import Replica, fleet_config, free_port, post_event, slack_section, start_replica
from tests.fleet.model import answer_of, respond
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(300)

SLACK_TIERS = {
    "chat.update": Window(50, 60.0),
    "chat.delete": Window(50, 60.0),
    "chat.startStream": Window(20, 60.0),
    "chat.stopStream": Window(20, 60.0),
    "chat.appendStream": Window(100, 60.0),
    "chat.postMessage": Window(3, 3.0, "channel"),
}
"""Slack's published limits for one workspace."""

@dataclass
class Fleet:
    """The fake Slack, the model, and the running replicas."""

    fake: FakeSlack
    llm: ScriptedLLMServer
    replicas: list[Replica]
    http: aiohttp.ClientSession

    async def ask(self, replica: Replica, text: str, *, channel: str, user: str, thread_ts: str | None = None) -> str:
        """@-mention the bot through ``replica``; returns the mention's ts (the answer's thread)."""
        event = self.fake.mention(text, user=user, channel=channel, thread_ts=thread_ts)
        await post_event(self.http, self.fake, replica, event)
        return str(event["ts"])

    async def say(self, replica: Replica, text: str, *, channel: str, user: str, thread_ts: str) -> None:
        """A plain thread message through ``replica`` (a follow-up, or a stop word)."""
        event = self.fake.message(text, user=user, channel=channel, thread_ts=thread_ts)
        await post_event(self.http, self.fake, replica, event)

    def bot_messages(self, channel: str, thread_ts: str) -> list[Message]:
        """The bot's messages in the thread (the fake keeps only the bot's)."""
        return self.fake.thread(channel, thread_ts)


def looks_live(message: Message) -> bool:
    """Still streaming, a cursor, a thinking placeholder or a Stop button."""
    text = message.markdown()
    return message.streaming or "▌" in text or bool(message.buttons()) or "Thinking" in text or "Working" in text


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    prefix = unique_prefix()
    fake = FakeSlack(limits=dict(SLACK_TIERS), limit_style="http429")
    await fake.start()
    llm = ScriptedLLMServer(responder=respond, max_recorded=None)
    llm_url = await llm.start()
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b", "replica-c"):
            config = fleet_config(name=name, prefix=prefix, llm_url=llm_url, http_port=free_port(),
                                  adapters={"slack": slack_section(fake, free_port())})
            replicas.append(await start_replica(tmp_path, config))
        await asyncio.gather(*(r.wait_ready() for r in replicas))
        async with aiohttp.ClientSession() as http:
            yield Fleet(fake=fake, llm=llm, replicas=replicas, http=http)
    finally:
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        await llm.stop()
        await fake.stop()
        await purge_prefix(prefix)


def _answered(fleet: Fleet, channel: str, thread_ts: str, number: int) -> bool:
    messages = fleet.bot_messages(channel, thread_ts)
    return any(answer_of(number) in m.markdown() for m in messages) and not any(map(looks_live, messages))


async def test_thirty_mentions_over_three_replicas_share_one_budget(fleet: Fleet) -> None:
    threads = await asyncio.gather(*(
        fleet.ask(fleet.replicas[i % 3], f"[q {i}] which hosts run in cn-hangzhou?", channel=f"C{i:03d}", user=f"U{i:03d}")
        for i in range(30)
    ))
    await fleet.fake.wait_for(lambda: all(_answered(fleet, f"C{i:03d}", ts, i) for i, ts in enumerate(threads)), timeout=180)
    assert fleet.fake.throttled() == [], {m: c for m, c in fleet.fake.method_counts().items() if c.get("throttled")}
    # Every replica answered some: the budget was shared, not one replica doing all the work.
    served = {r.name: sum(1 for line in r.log_lines() if line.get("event") == "gateway.turn_ended") for r in fleet.replicas}
    assert all(count > 0 for count in served.values()), served


async def test_a_stop_through_one_replica_stops_the_turn_on_another(fleet: Fleet) -> None:
    a, b = fleet.replicas[0], fleet.replicas[1]
    thread = await fleet.ask(a, "[slow 1] scan every region", channel="CSTOP", user="U1")
    await fleet.fake.wait_for(lambda: any("Still looking" in m.markdown() for m in fleet.bot_messages("CSTOP", thread)),
                              timeout=60)
    await fleet.say(b, "stop", channel="CSTOP", user="U1", thread_ts=thread)
    await fleet.fake.wait_for(lambda: fleet.bot_messages("CSTOP", thread)
                              and not any(map(looks_live, fleet.bot_messages("CSTOP", thread)))
                              and any("stop" in m.markdown().lower() for m in fleet.bot_messages("CSTOP", thread)),
                              timeout=30)
    await fleet.llm.wait_for_disconnects(1, timeout=30)  # the model stream was really ended, on replica A


async def test_two_questions_of_one_thread_on_two_replicas_run_one_after_the_other(fleet: Fleet) -> None:
    a, b = fleet.replicas[0], fleet.replicas[1]
    thread = await fleet.ask(a, "[q 100] what runs on 10.0.1.100?", channel="CSEQ", user="U1")
    await fleet.ask(b, "[q 101] and who owns it?", channel="CSEQ", user="U1", thread_ts=thread)
    await fleet.fake.wait_for(lambda: _answered(fleet, "CSEQ", thread, 100) and _answered(fleet, "CSEQ", thread, 101),
                              timeout=120)
    asked = [body for body in fleet.llm.requests if re.search(r"\[q 10[01]\]", str(body["messages"][-1].get("content")))]
    assert len(asked) == 2, [str(body["messages"][-1].get("content"))[:40] for body in asked]
    first = 100 if "[q 100]" in str(asked[0]["messages"][-1].get("content")) else 101
    # Whichever replica took the conversation second sent its question with the first answer in its history:
    # it ran after the first turn had ended and its commit was written.
    assert any(answer_of(first) in str(m.get("content")) for m in asked[1]["messages"] if m.get("role") == "assistant")


async def test_a_killed_replica_s_question_is_resumed_once_by_another(fleet: Fleet) -> None:
    c = fleet.replicas[2]
    thread = await fleet.ask(c, "[slow 2] scan every region", channel="CKILL", user="U2")
    await fleet.fake.wait_for(lambda: any("Still looking" in m.markdown() for m in fleet.bot_messages("CKILL", thread)),
                              timeout=60)
    [card] = fleet.bot_messages("CKILL", thread)
    c.signal(signal.SIGKILL)
    await c.process.wait()

    # Another replica runs the question again, once (it streams on: a slow question). Its answer comes complete in
    # a new message, the card left deleted then: until it is, the thread shows nothing new, nothing twice.
    def resumed() -> list[dict[str, object]]:
        return [line for r in fleet.replicas[:2] for line in r.log_lines() if line.get("event") == "gateway.resumed"]

    def asked() -> int:
        return sum("[slow 2]" in str(body["messages"][-1].get("content")) for body in fleet.llm.requests)

    async def resumed_once() -> None:
        while not resumed() or asked() < 2:
            await asyncio.sleep(0.05)  # the logs are files other processes write: nothing to await but their growth

    await asyncio.wait_for(resumed_once(), 60)
    assert asked() == 2 and len(resumed()) == 1, resumed()
    assert [m.ts for m in fleet.bot_messages("CKILL", thread)] == [card.ts] and fleet.fake.deleted == []
    # The others still answer.
    follow = await fleet.ask(fleet.replicas[0], "[q 7] still there?", channel="CAFTER", user="U3")
    await fleet.fake.wait_for(lambda: _answered(fleet, "CAFTER", follow, 7), timeout=60)
