"""Cards nobody asked for on Slack: the preamble above the card, channel targets, adopted threads.

Renderings are checked as data; the sink and the adapter run against the fake
Slack with the real slack_sdk client, the adapter with the real gateway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.render import MAX_MARKDOWN_CHARS, STOP_ACTION_ID, card_blocks, card_text
from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import SlackConfig
from botgateway.sink import CardHandle, CardTarget, ChannelCards, TooLong, target_from_dict, target_to_dict
from botgateway.snapshot import CardSnapshot, ToolLine
from botgateway.stores.base import StoredTurn
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.fakes.slack_env import Env, answer_of, replies, slack_env
from tools.demo.script import Script

ALERT = ("🔥 **FIRING** · critical · <!channel> ping <@U0ONCALL>\n\n"
         "- HighCPU on 10.0.1.100 ![g](http://evil.example/x?d=1)")
TOOL = ToolLine(call_id="c1", name="search_inventory_by_ip", args_preview="ip=10.0.1.100", status="done",
                duration_s=0.4, summary="1 instance found")


def _sink(fake: FakeSlack, *, pacer: BudgetPacer | None = None, **overrides: Any) -> SlackCardSink:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    return SlackCardSink(client, SlackConfig(bot_token=SecretStr(BOT_TOKEN), api_base_url=fake.api_url, **overrides),
                         pacer=pacer)


def _channel(channel: str = "C0OPS", turn: str = "alert-a-1") -> CardTarget:
    """What SlackAdapter.channel_target gives (plus the desk's turn id): a top-level message, no asker."""
    return CardTarget(platform="slack", chat_id=channel, turn_id=turn, is_group=True, workspace_id="T0001")


def _kinds(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["type"] for b in blocks]


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


# --- rendering ------------------------------------------------------------------------------


def test_the_preamble_is_its_own_block_above_a_divider_and_mentions_nobody() -> None:
    live = CardSnapshot(status="working", preamble=ALERT, blocks=(TOOL,))
    blocks = card_blocks(live, turn_id="alert-a-1", allowed=frozenset({"U0ONCALL"}))
    assert _kinds(blocks) == ["markdown", "divider", "markdown", "actions"]
    preamble, _, body, stop = blocks
    assert preamble["text"].startswith("🔥 **FIRING** · critical")
    # outside data: no broadcast, no ping even of a user the asker could name, no remote image
    assert "<!channel>" not in preamble["text"] and "<@U0ONCALL>" not in preamble["text"]
    assert "![g](" not in preamble["text"] and "http://evil.example/x?d=1" in preamble["text"]
    assert "search_inventory_by_ip" in body["text"] and "FIRING" not in body["text"]
    assert stop["elements"][0]["action_id"] == STOP_ACTION_ID
    text = card_text(live)
    assert text.startswith("🔥 **FIRING**") and "<!channel>" not in text and "<@U0ONCALL>" not in text
    assert text.index("FIRING") < text.index("search_inventory_by_ip")


def test_a_final_card_of_a_preamble_alone_is_that_block_alone() -> None:
    final = CardSnapshot(status="done", preamble=ALERT)
    [block] = card_blocks(final, turn_id="alert-a-1")
    assert block["type"] == "markdown" and block["text"].startswith("🔥 **FIRING**")
    assert "Thinking" not in card_text(final) and "▌" not in card_text(final)
    assert card_text(final).startswith("🔥 **FIRING**")


# --- the sink ----------------------------------------------------------------------------------


async def test_a_channel_card_is_one_top_level_message_edited_in_place_never_a_stream(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_channel(), CardSnapshot(status="done", preamble=ALERT))
    assert handle.data == {"mode": "edit", "channel": "C0OPS", "ts": handle.card_id}
    message = fake.messages[("C0OPS", handle.card_id)]
    assert message.thread_ts is None and _kinds(message.blocks) == ["markdown"]

    live = CardSnapshot(status="streaming", preamble=ALERT, blocks=(TOOL,), answer="10.0.1.100 is prod-db-01")
    handle = await sink.update(handle, live)
    assert _kinds(message.blocks) == ["markdown", "divider", "markdown", "actions"]
    assert "prod-db-01" in message.blocks[2]["text"]
    resolved = "✅ **RESOLVED**\n\n- HighCPU on 10.0.1.100"
    await sink.finalize(handle, dataclasses.replace(live, status="done", preamble=resolved))
    assert message.blocks[0]["text"].startswith("✅ **RESOLVED**") and message.buttons() == []
    assert fake.calls_of("chat.startStream") == [] and len(fake.calls_of("chat.postMessage")) == 1


async def test_a_card_with_a_preamble_in_a_thread_is_edited_not_streamed(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    target = dataclasses.replace(_channel(), thread_id="100.000001")
    await sink.create(target, CardSnapshot(status="working", preamble=ALERT))
    assert fake.calls_of("chat.startStream") == []  # a stream could not take the preamble back when it changes
    [message] = fake.thread("C0OPS", "100.000001")
    assert message.blocks[0]["text"].startswith("🔥 **FIRING**")


async def test_a_restored_handle_is_updated_and_finalized_by_a_new_process(fake: FakeSlack) -> None:
    first = _sink(fake)
    posted = await first.create(_channel(), CardSnapshot(status="done", preamble=ALERT))
    ts = posted.card_id

    # A restart: a new sink, the handle as the Store kept it.
    stored = {"card_id": ts, "target": target_to_dict(_channel()),
              "data": {"mode": "edit", "channel": "C0OPS", "ts": ts}}
    restored = CardHandle(card_id=stored["card_id"], target=target_from_dict(stored["target"]), data=stored["data"])
    later = _sink(fake)
    handle = await later.update(restored, CardSnapshot(status="working", preamble=ALERT, blocks=(TOOL,)))
    message = fake.messages[("C0OPS", ts)]
    assert "search_inventory_by_ip" in message.blocks[2]["text"] and message.buttons()
    await later.finalize(handle, CardSnapshot(status="done", preamble="✅ **RESOLVED**", blocks=(TOOL,), answer="Fine."))
    assert message.blocks[0]["text"] == "✅ **RESOLVED**" and "Fine." in message.blocks[2]["text"]
    assert message.buttons() == []
    assert len(fake.calls_of("chat.postMessage")) == 1 and len(fake.calls_of("chat.update")) == 2


async def test_the_preamble_counts_toward_slacks_markdown_limit(fake: FakeSlack) -> None:
    sink = _sink(fake, max_live_bytes=20_000)
    answer = "x" * 9_500
    handle = await sink.create(_channel(), CardSnapshot(status="streaming", answer=answer))  # fits alone
    long_preamble = "\n".join(f"- alert {i:03d} on host-{i:03d} is firing" for i in range(200))
    with pytest.raises(TooLong):  # 3,000 of preamble + 9,500 of answer: Slack would refuse the message
        await sink.update(handle, CardSnapshot(status="streaming", answer=answer, preamble=long_preamble))
    assert len(fake.calls_of("chat.update")) == 0


async def test_a_fallback_with_a_preamble_heads_the_first_message_and_keeps_under_the_limit(fake: FakeSlack) -> None:
    sink = _sink(fake)
    answer = " ".join(f"word{i}" for i in range(2_200))  # about 14,000 characters: two messages
    await sink.fallback(_channel(), CardSnapshot(status="done", preamble=ALERT, answer=answer))
    first, second = fake.channel_messages("C0OPS")
    assert _kinds(first.blocks) == ["markdown", "divider", "markdown"] and _kinds(second.blocks) == ["markdown"]
    assert first.blocks[0]["text"].startswith("🔥 **FIRING**") and "FIRING" not in second.markdown()
    assert first.text.startswith("🔥 **FIRING**") and "FIRING" not in second.text
    for message in (first, second):
        assert sum(len(b["text"]) for b in message.blocks if b["type"] == "markdown") <= MAX_MARKDOWN_CHARS
    assert (first.blocks[2]["text"] + second.markdown()).replace(" ", "") == answer.replace(" ", "")


async def test_a_card_with_a_preamble_gets_its_message_even_when_answers_are_deferred(fake: FakeSlack) -> None:
    budget = RateBudget()
    sink = _sink(fake, pacer=BudgetPacer(budget))
    key, limit = sink.rate_key("update", _channel(turn="plain"))
    for _ in range(int(budget.spare(key, limit))):  # every chat.update is kept for open cards' finals:
        budget.reserve(key, limit, "open-cards")  # a new answer comes in one message at its end

    plain = await sink.create(_channel(turn="plain"), CardSnapshot(status="working"))
    assert plain.data["mode"] == "deferred" and fake.calls_of("chat.postMessage") == []
    alert = await sink.create(_channel(turn="alert"), CardSnapshot(status="working", preamble=ALERT))
    assert alert.data["mode"] == "edit"  # it lives on: later notifications edit this message
    assert fake.messages[("C0OPS", alert.card_id)].blocks[0]["text"].startswith("🔥 **FIRING**")


# --- the adapter ---------------------------------------------------------------------------------


@pytest.fixture
async def env(tmp_path: Any) -> AsyncIterator[Env]:
    async for e in slack_env(tmp_path):
        yield e


async def test_the_adapter_posts_channel_cards_and_a_reply_in_their_thread_is_a_question(env: Env) -> None:
    adapter = env.adapter
    assert isinstance(adapter, ChannelCards) and adapter.edits_in_place is True
    target = adapter.channel_target("C0OPS", locale="zh-CN")
    assert target == CardTarget(platform="slack", chat_id="C0OPS", is_group=True, locale="zh-CN",
                                workspace_id=env.fake.team_id)
    handle = await adapter.sink.create(dataclasses.replace(target, turn_id="alert-a-1"),
                                       CardSnapshot(status="done", preamble=ALERT, locale="zh-CN"))
    # before the card is adopted, a reply in its thread is chatter
    early = await env.push(env.fake.message("who owns it?", channel="C0OPS", thread_ts=handle.card_id))
    assert (early.outcome, early.reason) == ("ignored", "not a thread the bot answers in")

    conversation = await adapter.adopt_thread(handle)
    assert conversation == f"slack:{env.fake.team_id}:C0OPS:{handle.card_id}"
    # what the alert desk keeps in that conversation: the alert and its investigation
    investigation = ({"role": "user", "content": "Investigate HighCPU on 10.0.1.100"},
                     {"role": "assistant", "content": "10.0.1.100 is prod-db-01, running."})
    await env.store.append_turn(conversation, StoredTurn(turn_id="inv-1", messages=investigation, created_at=1.0))

    env.llm.enqueue(Script.text("prod-db-01 belongs to the dba-team."))
    delivery = await env.push(env.fake.message("who owns it?", channel="C0OPS", thread_ts=handle.card_id))
    outcome = await env.done(delivery)  # no mention needed
    assert outcome.answer == "prod-db-01 belongs to the dba-team."
    [answer] = replies(env, "C0OPS", handle.card_id)
    assert answer_of(answer.markdown()).endswith("prod-db-01 belongs to the dba-team.")
    # the reply continued the conversation adopt_thread named: the model saw the investigation
    assert env.llm.requests[0]["messages"][-3:] == [*investigation, {"role": "user", "content": "who owns it?"}]


async def test_an_adopted_thread_is_known_to_another_process_at_once(tmp_path: Any) -> None:
    async for first in slack_env(tmp_path):
        handle = await first.adapter.sink.create(first.adapter.channel_target("C0OPS", locale="en"),
                                                 CardSnapshot(status="done", preamble=ALERT))
        await first.adapter.adopt_thread(handle)
        async for second in slack_env(tmp_path, fake=first.fake):  # another process of the fleet, same Store
            second.llm.enqueue(Script.text("It is prod-db-01."))
            delivery = await second.push(second.fake.message("which host?", channel="C0OPS", thread_ts=handle.card_id))
            assert (await second.done(delivery)).answer == "It is prod-db-01."


async def test_no_conversation_for_a_deferred_card_or_per_person_conversations(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, session_scope="user"):
        target = env.adapter.channel_target("C0OPS", locale="en")
        deferred = CardHandle(card_id="deferred-t-1", target=target, data={"mode": "deferred"})
        assert await env.adapter.adopt_thread(deferred) is None
        handle = await env.adapter.sink.create(target, CardSnapshot(status="done", preamble=ALERT))
        assert await env.adapter.adopt_thread(handle) is None  # each replier has a conversation of their own
        env.llm.enqueue(Script.text("Yes."))
        delivery = await env.push(env.fake.message("still firing?", channel="C0OPS", thread_ts=handle.card_id))
        assert (await env.done(delivery)).answer == "Yes."  # the thread is adopted all the same
