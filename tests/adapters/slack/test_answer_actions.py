"""A final answer's Refresh and 👍 / 👎 on the fake Slack, pressed through Socket Mode like real presses.

Refresh asks the same question again in the thread as the presser, with the
cloud asked again (the real lookup tools against the fake Alibaba Cloud API,
whose answers are cached otherwise). Votes are stored once per user and answer
(a second press changes the vote); a 👎 opens a modal (``views.open`` with the
press's trigger) whose submission is the vote's reason, and ``botgateway
feedback`` lists them all with the model, tools and sources of the answer.
Only a typed question's answer has them: a report's card (a turn nobody typed) has none.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.render import (
    FEEDBACK_ACTION_ID,
    FEEDBACK_DOWN_ACTION_ID,
    FEEDBACK_REASON_ID,
    FEEDBACK_UP_ACTION_ID,
    FEEDBACK_VIEW_ID,
    REFRESH_ACTION_ID,
)
from adapters.slack.sink import SlackCardSink
from botgateway.answers import ANSWERABLE
from botgateway.cli.feedback import run_feedback
from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, MemoryConfig, SlackConfig, ToolsConfig
from botgateway.sink import CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.unprompted import Channels, UnpromptedTurn, gateway_principal
from tests.fakes.clouds import FakeAliyun, aliyun_instance
from tests.fakes.slack import ANSWER_BLOCK, BOT_TOKEN, FakeSlack, Message
from tests.fakes.slack_env import Env, replies, slack_env
from tools.catalog import build_toolset
from tools.demo.script import Script

IP = "172.16.1.10"
QUESTION = f"which server is {IP}?"


def respond(body: dict[str, Any]) -> Script:
    """Look the address up once per question (the history holds earlier questions' lookups), then answer."""
    messages = body["messages"]
    last_question = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    if not any(m.get("role") == "tool" for m in messages[last_question:]):
        return Script.tool_calls([("call_1", "search_ecs_by_ip", {"ip": IP})])
    return Script.text(f"{IP} is prod-api-01 in cn-hangzhou.")


@pytest.fixture
async def cloud() -> AsyncIterator[tuple[FakeAliyun, list[Any]]]:
    """The fake Alibaba Cloud and the real lookup tools on it, answers cached for an hour."""
    aliyun = FakeAliyun({"cn-hangzhou": [aliyun_instance("i-bp1aaaaaaaaaaaa01", "prod-api-01", IP)]})
    async with AsyncExitStack() as stack:
        stack.enter_context(aliyun)
        account = CloudAccount(name="prod", access_key_id="test-key-id", access_key_secret="s",  # type: ignore[arg-type]
                               regions=["cn-hangzhou"], endpoint=aliyun.endpoint)
        toolset = await build_toolset(ToolsConfig(
            inventory=InventoryConfig(enabled=False),
            aliyun=CloudProviderConfig(enabled=True, accounts=[account], cache_ttl_s=3600),
        ))
        stack.push_async_callback(toolset.aclose)
        yield aliyun, list(toolset.tools)


async def ask(env: Env, text: str, *, user: str = "U1", thread_ts: str | None = None) -> tuple[dict[str, Any], Any]:
    """``user`` asks ``text`` (in ``thread_ts``); returns the event and the final outcome."""
    event = env.fake.mention(text, channel="C1", user=user, thread_ts=thread_ts)
    return event, await env.done(await env.push(event))


async def press(env: Env, message: Message, user: str, action_id: str, value: str, *, thread_ts: str,
                action_type: str = "button") -> Any:
    """Press a button of ``message`` as ``user``; the adapter's :class:`Delivery` of the press."""
    payload = env.fake.block_action(user=user, channel="C1", message_ts=message.ts, action_id=action_id, value=value,
                                    thread_ts=thread_ts, action_type=action_type, block_id=ANSWER_BLOCK)
    await env.fake.wait_ack(await env.fake.push(payload, type="interactive"))
    delivery = await env.next_delivery()
    assert delivery.event_type == "block_actions"
    return delivery


def card_of(env: Env, thread_ts: str, turn_id: str) -> Message:
    """The card of ``turn_id`` in the thread: the message whose answer buttons name that turn."""
    [card] = [m for m in replies(env, "C1", thread_ts)
              if m.answer_buttons().get(REFRESH_ACTION_ID, {}).get("value") == turn_id]
    return card


async def test_refresh_asks_the_same_question_again_as_the_presser_and_the_cloud_is_asked_again(
    tmp_path: Path, cloud: tuple[FakeAliyun, list[Any]]
) -> None:
    aliyun, tools = cloud
    async for env in slack_env(tmp_path, responder=respond, tools=tools):
        event, first = await ask(env, QUESTION)
        asked = len(aliyun.calls())  # one search: DescribeInstances by private, public and elastic address
        assert first.outcome == "done" and asked > 0
        card = card_of(env, event["ts"], first.turn_id)
        buttons = card.answer_buttons()
        assert set(buttons) == {REFRESH_ACTION_ID, FEEDBACK_UP_ACTION_ID, FEEDBACK_DOWN_ACTION_ID}
        assert card.buttons() == []  # no Stop button on a finished answer

        # The same question again in the thread is answered from the cache: the cloud is not asked.
        _, cached = await ask(env, QUESTION, thread_ts=event["ts"])
        assert cached.outcome == "done" and len(aliyun.calls()) == asked

        refresh = buttons[REFRESH_ACTION_ID]["value"]
        delivery = await press(env, card, "U2", REFRESH_ACTION_ID, refresh, thread_ts=event["ts"])
        assert delivery.outcome == "submitted" and delivery.submission.status == "started"
        refreshed = await env.done(delivery)
        assert refreshed.outcome == "done" and len(aliyun.calls()) == 2 * asked  # the cloud was asked again
        assert refreshed.turn_id not in (first.turn_id, cached.turn_id)
        new_card = card_of(env, event["ts"], refreshed.turn_id)  # a new card, in the same thread
        assert new_card.ts != card.ts and "prod-api-01" in new_card.markdown()
        [record] = [r for r in await env.store.audit_records() if r.turn_id == refreshed.turn_id]
        assert record.principal == "slack:U2" and record.question == QUESTION and record.channel == "C1"
        assert env.llm.requests[-2]["messages"][-1] == {"role": "user", "content": QUESTION}


async def test_a_refresh_pressed_by_someone_who_may_not_ask_there_is_refused(tmp_path: Path) -> None:
    access = {"default_role": "none", "roles": {"oncall": {"members": ["slack:U1"], "tools": ["*"]}}}
    async for env in slack_env(tmp_path, access_config=access):
        env.llm.enqueue(Script.text("web-1 is fine."))
        event, first = await ask(env, "is web-1 fine?")
        card = card_of(env, event["ts"], first.turn_id)
        requests = len(env.llm.requests)
        delivery = await press(env, card, "U2", REFRESH_ACTION_ID, first.turn_id, thread_ts=event["ts"])
        assert delivery.submission.status == "refused" and "no role" in delivery.submission.message
        assert len(env.llm.requests) == requests  # nothing was asked


async def test_a_refresh_pressed_by_someone_whose_workspace_the_press_does_not_name_is_refused(tmp_path: Path) -> None:
    async for env in slack_env(tmp_path):  # the default policy: anyone of the workspace, no one from outside
        env.llm.enqueue(Script.text("web-1 is fine."))
        event, first = await ask(env, "is web-1 fine?")
        card = card_of(env, event["ts"], first.turn_id)
        payload = env.fake.block_action(user="U1", channel="C1", message_ts=card.ts, action_id=REFRESH_ACTION_ID,
                                        value=first.turn_id, thread_ts=event["ts"], block_id=ANSWER_BLOCK)
        del payload["user"]["team_id"]  # the presser's own workspace is not named: not shown to be one of ours
        await env.fake.wait_ack(await env.fake.push(payload, type="interactive"))
        delivery = await env.next_delivery()
        assert delivery.submission.status == "refused" and "another organisation" in delivery.submission.message
        assert env.llm.request_count == 1  # only the first answer's


async def test_votes_are_kept_once_per_user_and_a_thumbs_down_reason_comes_from_the_modal(
    tmp_path: Path, cloud: tuple[FakeAliyun, list[Any]]
) -> None:
    _, tools = cloud
    async for env in slack_env(tmp_path, responder=respond, tools=tools):
        event, first = await ask(env, QUESTION)
        card = card_of(env, event["ts"], first.turn_id)
        up, down = (card.answer_buttons()[a]["value"] for a in (FEEDBACK_UP_ACTION_ID, FEEDBACK_DOWN_ACTION_ID))

        assert (await press(env, card, "U1", FEEDBACK_UP_ACTION_ID, up, thread_ts=event["ts"])).reason == "feedback:up"
        assert env.fake.ephemerals[-1]["user"] == "U1" and "Thanks" in env.fake.ephemerals[-1]["text"]
        await press(env, card, "U2", FEEDBACK_UP_ACTION_ID, up, thread_ts=event["ts"])
        # U1 changes their mind: 👎 opens the modal for a reason, and replaces their 👍
        pressed = await press(env, card, "U1", FEEDBACK_DOWN_ACTION_ID, down, thread_ts=event["ts"])
        assert pressed.reason == "feedback:down"
        [modal] = env.fake.views
        assert modal["callback_id"] == FEEDBACK_VIEW_ID and modal["private_metadata"] == first.turn_id
        votes = {r.voter: r.vote for r in await env.store.feedback_records()}
        assert votes == {"slack:U1": "down", "slack:U2": "up"}

        submitted = env.fake.view_submission(modal, user="U1", values={
            FEEDBACK_REASON_ID: {FEEDBACK_REASON_ID: "it is a staging host now"}})
        await env.fake.wait_ack(await env.fake.push(submitted, type="interactive"))
        assert (await env.next_delivery()).reason == "feedback:reason"

        out = io.StringIO()
        config = env.config.model_copy(update={"memory": MemoryConfig(sqlite_path=str(tmp_path / "slack.db"))})
        assert await run_feedback(config, since=None, vote="", fmt="jsonl", limit=100, out=out) == 0
        rows = {row["voter"]: row for row in map(json.loads, out.getvalue().splitlines())}
        assert set(rows) == {"slack:U1", "slack:U2"}
        assert rows["slack:U1"]["vote"] == "down" and rows["slack:U1"]["reason"] == "it is a staging host now"
        assert rows["slack:U2"]["vote"] == "up" and rows["slack:U2"]["reason"] == ""
        assert rows["slack:U1"]["question"] == QUESTION and rows["slack:U1"]["asker"] == "slack:U1"
        assert rows["slack:U1"]["model"] == "m" and rows["slack:U1"]["tools"] == ["search_ecs_by_ip"]
        assert rows["slack:U1"]["sources"] == ["Alibaba Cloud prod/cn-hangzhou (DescribeInstances)"]

        # 👍 again: the vote changes back and drops the reason it had
        await press(env, card, "U1", FEEDBACK_UP_ACTION_ID, up, thread_ts=event["ts"])
        changed = await env.store.feedback_vote(first.turn_id, "slack:U1")
        assert changed is not None and changed.vote == "up" and changed.reason == ""
        assert len(await env.store.feedback_records()) == 2


async def test_a_streamed_answer_carries_slacks_feedback_buttons_and_refresh_when_it_stops(tmp_path: Path) -> None:
    async for env in slack_env(tmp_path, streaming="auto"):
        env.llm.enqueue(Script.text("web-1 is fine."))
        event, first = await ask(env, "is web-1 fine?")
        [stream] = [m for m in replies(env, "C1", event["ts"]) if m.stream]
        assert not stream.streaming and stream.buttons() == []
        controls = stream.answer_buttons()
        feedback = controls[FEEDBACK_ACTION_ID]
        assert feedback["type"] == "feedback_buttons"
        assert [b["value"] for b in (feedback["positive_button"], feedback["negative_button"])] == [
            f"up:{first.turn_id}", f"down:{first.turn_id}"]
        assert controls[REFRESH_ACTION_ID]["value"] == first.turn_id
        assert any(b["type"] == "context_actions" for b in stream.stop_blocks)

        delivery = await press(env, stream, "U2", FEEDBACK_ACTION_ID, f"down:{first.turn_id}", thread_ts=event["ts"],
                               action_type="feedback_buttons")
        assert delivery.reason == "feedback:down" and len(env.fake.views) == 1
        [vote] = await env.store.feedback_records()
        assert (vote.turn_id, vote.voter, vote.vote) == (first.turn_id, "slack:U2", "down")
        assert vote.question == "is web-1 fine?"


async def test_a_failed_or_stopped_answer_offers_no_refresh_or_feedback(tmp_path: Path) -> None:
    async for env in slack_env(tmp_path):
        env.llm.enqueue(Script.error(400, "the request is too long"))
        event, failed = await ask(env, "is web-1 fine?")
        assert failed.outcome.startswith("failed")
        assert all(not m.answer_buttons() for m in replies(env, "C1", event["ts"]))


async def test_an_answer_posted_as_new_messages_carries_its_buttons_on_the_last_one() -> None:
    async with FakeSlack() as fake:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
        sink = SlackCardSink(client, SlackConfig(bot_token=SecretStr(BOT_TOKEN), api_base_url=fake.api_url))
        target = CardTarget(platform="slack", chat_id="C1", thread_id="50.000001", turn_id="turn-1", user_id="U1",
                            is_group=True, workspace_id="T0001", extra={ANSWERABLE: True})
        answer = " ".join(f"word{i}" for i in range(2500))  # past Slack's 12,000 characters per block: two messages
        await sink.fallback(target, CardSnapshot(status="done", answer=answer))
        first, last = fake.thread("C1", "50.000001")
        assert first.answer_buttons() == {} and last.answer_buttons()[REFRESH_ACTION_ID]["value"] == "turn-1"
        # a note is no answer: no turn, no buttons
        await sink.fallback(dataclasses.replace(target, turn_id="", thread_id="60.000001"),
                            CardSnapshot(status="done", answer="Started a new conversation."))
        [note] = fake.thread("C1", "60.000001")
        assert note.answer_buttons() == {}
        # a turn nobody typed (not marked as a question's) has a turn, and no buttons
        await sink.fallback(dataclasses.replace(target, extra={}, thread_id="70.000001"),
                            CardSnapshot(status="done", answer="All up."))
        [report] = fake.thread("C1", "70.000001")
        assert report.answer_buttons() == {}


async def test_a_report_card_offers_no_refresh_or_feedback(tmp_path: Path) -> None:
    async for env in slack_env(tmp_path):
        channels = Channels(env.gateway, {"slack": env.adapter}, {"slack": env.adapter.sink}, {})
        env.llm.enqueue(Script.text("All 12 servers in prod are running."))
        report = UnpromptedTurn(principal=gateway_principal("schedule", "daily"), role="viewer",
                                question="List the stopped servers in prod", conversation_id="schedule:daily:1",
                                target=channels.target("slack", "C1", locale="en"))
        submission = await channels.ask(report)
        assert submission.status == "started" and submission.done is not None
        assert (await submission.done).outcome == "done"
        [card] = env.fake.channel_messages("C1")
        assert "12 servers" in card.markdown() and card.answer_buttons() == {}

        # a question typed in the report's thread is answered with them
        env.llm.enqueue(Script.text("None is stopped."))
        _, answer = await ask(env, "any stopped?", thread_ts=card.ts)
        assert answer.outcome == "done" and card_of(env, card.ts, answer.turn_id).answer_buttons()
