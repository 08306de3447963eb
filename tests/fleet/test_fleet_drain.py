"""A replica that drains moves the questions waiting in it to the other replica, which answers them in the thread.

Two real ``botgateway run`` processes share one Redis prefix and one workspace
of the fake Slack (HTTP Events, Slack's tiers enforced); the test, standing in
for the load balancer, sends both questions of a thread to replica A, then
stops A with SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.slack import FakeSlack, Message
from tests.fakes.stores import purge_prefix, unique_prefix
from tests.fleet.harness import Replica, fleet_config, free_port, post_event, slack_section, start_replica
from tests.fleet.model import answer_of, respond
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(300)

DRAIN_S = 3
"""Replica A's ``gateway.drain_s``: its running answer streams for minutes, so the drain ends it."""


@dataclass
class Pair:
    """The fake Slack, the model, replicas A and B."""

    fake: FakeSlack
    llm: ScriptedLLMServer
    a: Replica
    b: Replica
    http: aiohttp.ClientSession

    async def ask(self, replica: Replica, text: str, *, thread_ts: str | None = None) -> str:
        """@-mention the bot in channel CDRAIN through ``replica``; returns the mention's ts."""
        event = self.fake.mention(text, user="U1", channel="CDRAIN", thread_ts=thread_ts)
        await post_event(self.http, self.fake, replica, event)
        return str(event["ts"])

    def thread(self, thread_ts: str) -> list[Message]:
        """The bot's messages in the thread."""
        return self.fake.thread("CDRAIN", thread_ts)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    prefix = unique_prefix()
    fake = FakeSlack(limit_style="http429")
    await fake.start()
    llm = ScriptedLLMServer(responder=respond, max_recorded=None)
    llm_url = await llm.start()
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b"):
            config = fleet_config(name=name, prefix=prefix, llm_url=llm_url, http_port=free_port(),
                                  adapters={"slack": slack_section(fake, free_port())},
                                  overrides={"gateway": {"drain_s": DRAIN_S, "replicas": 2}})
            replicas.append(await start_replica(tmp_path, config))
        await asyncio.gather(*(r.wait_ready() for r in replicas))
        async with aiohttp.ClientSession() as http:
            yield Pair(fake=fake, llm=llm, a=replicas[0], b=replicas[1], http=http)
    finally:
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        await llm.stop()
        await fake.stop()
        await purge_prefix(prefix)


def looks_live(message: Message) -> bool:
    """Still streaming, a cursor, a placeholder, a queue note or a Stop button."""
    text = message.markdown()
    return (message.streaming or "▌" in text or bool(message.buttons()) or "Thinking" in text or "Working" in text
            or "Waiting for the previous question" in text)


def _with(messages: list[Message], text: str) -> list[Message]:
    return [m for m in messages if text in m.markdown()]


async def test_a_question_waiting_in_a_draining_replica_is_answered_by_the_other_in_the_same_thread(pair: Pair) -> None:
    thread = await pair.ask(pair.a, "[slow 1] scan every region")
    await pair.fake.wait_for(lambda: bool(_with(pair.thread(thread), "Still looking")), timeout=60)
    await pair.ask(pair.a, "[q 2] and who owns it?", thread_ts=thread)
    await pair.fake.wait_for(lambda: bool(_with(pair.thread(thread), "Waiting for the previous question")), timeout=60)

    pair.a.signal(signal.SIGTERM)
    # The waiting question's card on A ends at once, saying another instance answers; B answers it in the thread,
    # once A's running answer has ended (the conversation's lease), which it does at drain_s with the restart note.
    await pair.fake.wait_for(lambda: bool(_with(pair.thread(thread), answer_of(2)))
                             and not any(map(looks_live, pair.thread(thread))), timeout=120)
    assert await asyncio.wait_for(pair.a.process.wait(), 60) == 0

    messages = pair.thread(thread)
    assert len(_with(messages, answer_of(2))) == 1
    assert len(_with(messages, "Moved to another instance")) == 1
    [first] = _with(messages, "Still looking")
    assert "Stopped because the bot is restarting" in first.markdown()
    asked = [body for body in pair.llm.requests if "[q 2]" in str(body["messages"][-1].get("content"))]
    assert len(asked) == 1  # answered once, by B
    a_log, b_log = pair.a.log_lines(), pair.b.log_lines()
    [moved] = [line for line in a_log if line.get("event") == "fleet.moved"]
    [taken] = [line for line in b_log if line.get("event") == "gateway.taken_over"]
    assert taken["turn_id"] == moved["turns"][0] and taken["moved_by"] == "replica-a"
