"""Two replicas share a workspace's ``chat.startStream`` window: one that finds it spent starts its answers as edits.

A replica plans each answer's mode from its view of the fleet's budget, and
that view is a moment old: another replica may have spent the workspace's
Tier 2 window meanwhile. Such a stream would wait most of a minute for the
window to slide, so the card time out and its answer arrive as a fallback
message half a minute late. Here replica A spends the whole window first;
replica B, which has not looked at the window yet, then gets questions of its
own. Every answer must arrive on a card of its own (none created late, none
sent as a fallback), with Slack never throttling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.slack import FakeSlack, Window
from tests.fakes.stores import purge_prefix, unique_prefix
from tests.fleet.harness import Replica, fleet_config, free_port, post_event, slack_section, start_replica
from tests.fleet.model import answer_of, respond
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(300)

STREAMS_PER_MIN = 5
"""The workspace's ``chat.startStream``/``chat.stopStream`` tier, small so a few answers spend it (90 % is planned: 4)."""

PLANNED = 4
"""Streams the fleet may start in the window (90 % of the tier)."""


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[FakeSlack, list[Replica], aiohttp.ClientSession]]:
    prefix = unique_prefix()
    fake = FakeSlack(limits={
        "chat.startStream": Window(STREAMS_PER_MIN, 60.0), "chat.stopStream": Window(STREAMS_PER_MIN, 60.0),
        "chat.update": Window(50, 60.0), "chat.appendStream": Window(100, 60.0),
        "chat.postMessage": Window(3, 3.0, "channel"),
    }, limit_style="http429")
    await fake.start()
    llm = ScriptedLLMServer(responder=respond, max_recorded=None)
    llm_url = await llm.start()
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b"):
            slack = {**slack_section(fake, free_port()), "streaming": "auto",
                     "start_stream_rate_per_min": STREAMS_PER_MIN, "stop_stream_rate_per_min": STREAMS_PER_MIN}
            config = fleet_config(name=name, prefix=prefix, llm_url=llm_url, http_port=free_port(),
                                  adapters={"slack": slack}, overrides={"gateway": {"replicas": 2}})
            replicas.append(await start_replica(tmp_path, config))
        await asyncio.gather(*(r.wait_ready() for r in replicas))
        async with aiohttp.ClientSession() as http:
            yield fake, replicas, http
    finally:
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        await llm.stop()
        await fake.stop()
        await purge_prefix(prefix)


def _complete(fake: FakeSlack, channel: str, thread: str, number: int) -> bool:
    messages = fake.thread(channel, thread)
    return (any(answer_of(number) in m.markdown() for m in messages)
            and not any(m.streaming or "▌" in m.markdown() or m.buttons() for m in messages))


async def test_a_replica_that_finds_the_stream_window_spent_answers_on_edited_cards(
    pair: tuple[FakeSlack, list[Replica], aiohttp.ClientSession],
) -> None:
    fake, (a, b), http = pair

    async def ask(replica: Replica, number: int) -> tuple[str, str, int]:
        channel = f"C{number:03d}"
        event = fake.mention(f"[q {number}] which hosts run in cn-hangzhou?", user=f"U{number:03d}", channel=channel)
        await post_event(http, fake, replica, event)
        return channel, str(event["ts"]), number

    first = await asyncio.gather(*(ask(a, n) for n in range(PLANNED)))
    await fake.wait_for(lambda: len([c for c in fake.calls_of("chat.startStream") if c.ok]) == PLANNED, timeout=60)
    second = await asyncio.gather(*(ask(b, n) for n in range(PLANNED, 2 * PLANNED)))
    asked = [*first, *second]
    await fake.wait_for(lambda: all(_complete(fake, *question) for question in asked), timeout=120)

    assert fake.throttled() == [], [(c.method, c.args.get("channel")) for c in fake.throttled()]
    # The window was A's alone: B started no stream, and its answers went out as edited cards, not late fallbacks.
    assert len([c for c in fake.calls_of("chat.startStream") if c.ok]) == PLANNED
    for channel, thread, _ in second:
        assert [c for c in fake.calls_of("chat.update") if c.args.get("channel") == channel], channel
    events = [line.get("event") for line in b.log_lines()]
    assert "slack.answer_replanned" in events, events
    for replica in (a, b):
        finished = await replica.wait_logged("card.finished", PLANNED)
        assert not any(line.get("fallback") for line in finished), (replica.name, finished)
        failed = [line for line in replica.log_lines() if line.get("event") == "card.create_failed"]
        assert failed == [], (replica.name, failed)
