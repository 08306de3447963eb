"""Two replicas share a workspace's windows: one that finds a window spent or promised plans its answers another way.

A replica plans each answer's mode from its view of the fleet's budget, and
that view is a moment old: another replica may have spent the workspace's
Tier 2 ``chat.startStream`` window meanwhile, or promised its ``chat.update``
window to its own cards' finals. A stream would then wait most of a minute for
the window to slide, a final would take a call another card's final was
promised, and cards time out with their answers sent as fallback messages half
a minute late. Here replica A spends (or promises) the whole window first;
replica B, which has not looked at the window yet, then gets questions of its
own. Every answer must arrive on a card of its own or as the one message a
deferred answer is (none created late, none sent as a fallback), with Slack
never throttling.
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

TIER = 4
"""The tier of the window under test, small so a few answers spend it."""

PLANNED = 4
"""Calls of that window the fleet may plan (all of the tier: each counts from Slack's answer)."""

Pair = tuple[FakeSlack, list[Replica], aiohttp.ClientSession]


@pytest.fixture
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    """Two replicas in Slack mode ``auto`` (the stream windows at :data:`TIER`) or ``edit`` (``chat.update`` at it)."""
    streaming = request.param
    prefix = unique_prefix()
    streams, updates = (TIER, 50) if streaming == "auto" else (20, TIER)
    fake = FakeSlack(limits={
        "chat.startStream": Window(streams, 60.0), "chat.stopStream": Window(streams, 60.0),
        "chat.update": Window(updates, 60.0), "chat.appendStream": Window(100, 60.0),
        "chat.postMessage": Window(3, 3.0, "channel"),
    }, limit_style="http429")
    await fake.start()
    llm = ScriptedLLMServer(responder=respond, max_recorded=None)
    llm_url = await llm.start()
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b"):
            slack = {**slack_section(fake, free_port()), "streaming": streaming, "start_stream_rate_per_min": streams,
                     "stop_stream_rate_per_min": streams, "update_rate_per_min": updates}
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


async def _ask(pair: Pair, replica: Replica, number: int, kind: str = "q") -> tuple[str, str, int]:
    fake, _, http = pair
    channel = f"C{number:03d}"
    event = fake.mention(f"[{kind} {number}] which hosts run in cn-hangzhou?", user=f"U{number:03d}", channel=channel)
    await post_event(http, fake, replica, event)
    return channel, str(event["ts"]), number


def _complete(fake: FakeSlack, channel: str, thread: str, number: int) -> bool:
    messages = fake.thread(channel, thread)
    return (any(answer_of(number) in m.markdown() for m in messages)
            and not any(m.streaming or "▌" in m.markdown() or m.buttons() for m in messages))


@pytest.mark.parametrize("pair", ["auto"], indirect=True)
async def test_a_replica_that_finds_the_stream_window_spent_answers_on_edited_cards(pair: Pair) -> None:
    fake, (a, b), _ = pair
    first = await asyncio.gather(*(_ask(pair, a, n) for n in range(PLANNED)))
    await fake.wait_for(lambda: len([c for c in fake.calls_of("chat.startStream") if c.ok]) == PLANNED, timeout=60)
    second = await asyncio.gather(*(_ask(pair, b, n) for n in range(PLANNED, 2 * PLANNED)))
    asked = [*first, *second]
    await fake.wait_for(lambda: all(_complete(fake, *question) for question in asked), timeout=120)

    assert fake.throttled() == [], [(c.method, c.args.get("channel")) for c in fake.throttled()]
    # The window was A's alone: B started no stream, and its answers went out as edited cards, not late fallbacks.
    assert len([c for c in fake.calls_of("chat.startStream") if c.ok]) == PLANNED
    for channel, _, _ in second:
        assert [c for c in fake.calls_of("chat.update") if c.args.get("channel") == channel], channel
    events = [line.get("event") for line in b.log_lines()]
    assert "slack.answer_replanned" in events, events
    await _all_on_their_cards(a, b)


@pytest.mark.parametrize("pair", ["edit"], indirect=True)
async def test_a_replica_that_finds_the_update_window_promised_defers_its_answers(pair: Pair) -> None:
    fake, (a, b), http = pair
    slow = await asyncio.gather(*(_ask(pair, a, n, "slow") for n in range(PLANNED)))
    # A's four placeholders are up, so their finals' chat.update calls are promised (claimed before each card).
    await fake.wait_for(lambda: all(fake.thread(channel, ts) for channel, ts, _ in slow), timeout=60)
    quick = await asyncio.gather(*(_ask(pair, b, n) for n in range(PLANNED, 2 * PLANNED)))
    await fake.wait_for(lambda: all(_complete(fake, *question) for question in quick), timeout=120)
    # B's answers took none of the promised calls: each is one complete message, never edited.
    for channel, _, _ in quick:
        assert not [c for c in fake.calls_of("chat.update") if c.args.get("channel") == channel], channel
    replanned = [line for line in b.log_lines() if line.get("event") == "slack.answer_replanned"]
    assert {line.get("mode") for line in replanned} == {"deferred"}, replanned
    # A's cards still get their finals: stopped now, each edited once more with the call it was promised.
    for channel, ts, number in slow:
        event = fake.message("stop", user=f"U{number:03d}", channel=channel, thread_ts=ts)
        await post_event(http, fake, a, event)
    await fake.wait_for(lambda: all(fake.thread(c, ts) and not any(
        m.streaming or "▌" in m.markdown() or m.buttons() for m in fake.thread(c, ts)) for c, ts, _ in slow), timeout=120)
    assert fake.throttled() == [], [(c.method, c.args.get("channel")) for c in fake.throttled()]
    await _all_on_their_cards(a, b)


async def _all_on_their_cards(a: Replica, b: Replica) -> None:
    """Every answer of both replicas ended on its card (or as its deferred message): no fallback, no failed call."""
    for replica in (a, b):
        finished = await replica.wait_logged("card.finished", PLANNED)
        assert not any(line.get("fallback") for line in finished), (replica.name, finished)
        failed = [line for line in replica.log_lines() if line.get("event") in ("card.create_failed",
                                                                                 "card.finalize_failed")]
        assert failed == [], (replica.name, failed)
