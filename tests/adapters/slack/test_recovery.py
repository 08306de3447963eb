"""What a killed process leaves in Slack, and how the next one cleans it up.

Same setup as ``test_adapter.py``. A "kill -9" is a gateway and adapter whose
state is dropped without ``aclose``: their cards and Stop controls stay on
record in the Store, and a new process's :class:`~botgateway.cards.recovery.Recovery`
finalizes them through a fresh :class:`~adapters.slack.sink.SlackCardSink`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.recovery import Recovery
from tests.fakes.slack import BOT_TOKEN
from tests.fakes.slack_env import controls, replies, slack_env
from tests.polling import until_read
from tools.demo.script import Script


def _restarted_sink(env: Any) -> SlackCardSink:
    """The Slack sink of a new process: it knows only what the Store kept."""
    client = AsyncWebClient(token=BOT_TOKEN, base_url=env.fake.api_url, timeout=5)
    return SlackCardSink(client, env.config.adapters.slack)


async def test_recovery_takes_away_the_stop_control_a_killed_process_left(tmp_path: Any) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()  # the turn stays mid-answer: its process is "killed" while it runs
        return Script.text("never shown")

    async for env in slack_env(tmp_path, streaming="auto", post_rate_per_s=10, responder=responder):
        try:
            event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
            await env.push(event)
            await env.fake.wait_for(lambda: len(controls(env, "C1", event["ts"])) == 1)
            [control] = controls(env, "C1", event["ts"])
            # The control is on record as soon as it is posted, owned like the card.
            cards = await until_read(env.store.open_cards, lambda cards: control.ts in {c.card_id for c in cards})
            assert {card.owner for card in cards} == {env.gateway.instance_id}

            recovery = Recovery(env.store, RateBudget(), env.config.gateway, instance_id="restarted",
                                is_running=lambda turn_id: False)
            assert await recovery.recover_open_cards({"slack": _restarted_sink(env)}) == 2
            assert controls(env, "C1", event["ts"]) == []
            assert control.ts in [m.ts for m in env.fake.deleted]
            [stream] = replies(env, "C1", event["ts"])  # only the answer is left in the thread
            assert stream.stream and not stream.streaming and stream.text.endswith("Please ask again.")
            assert await env.store.open_cards() == []
        finally:
            gate.set()


async def test_a_control_taken_away_at_the_end_of_its_answer_leaves_no_record(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="auto", post_rate_per_s=10):
        env.llm.enqueue(Script.text("web-1 it is", chunk_size=4, delay_s=0.05))
        event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
        delivery = await env.push(event)
        await env.fake.wait_for(lambda: len(controls(env, "C1", event["ts"])) == 1)
        [control] = controls(env, "C1", event["ts"])
        assert (await env.done(delivery)).outcome == "done"
        await env.fake.wait_for(lambda: control.ts in [m.ts for m in env.fake.deleted])
        await until_read(env.store.open_cards, lambda cards: cards == [])


async def test_a_left_control_slack_will_not_delete_becomes_a_note_without_its_button(tmp_path: Any) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("never shown")

    async for env in slack_env(tmp_path, streaming="auto", post_rate_per_s=10, responder=responder):
        try:
            event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
            await env.push(event)
            await env.fake.wait_for(lambda: len(controls(env, "C1", event["ts"])) == 1)
            [control] = controls(env, "C1", event["ts"])
            await until_read(env.store.open_cards, lambda cards: control.ts in {c.card_id for c in cards})
            env.fake.fail("chat.delete", "cant_delete_message")
            recovery = Recovery(env.store, RateBudget(), env.config.gateway, instance_id="restarted",
                                is_running=lambda turn_id: False)
            assert await recovery.recover_open_cards({"slack": _restarted_sink(env)}) == 2
            assert control.buttons() == [] and "has finished" in str(control.blocks)
            assert await env.store.open_cards() == []
        finally:
            gate.set()
