"""The Slack adapter end to end: triggers, dedupe, the assistant pane, Stop, errors, HTTP mode and start-up.

Real slack-bolt / slack-sdk against the fake Slack (Socket Mode envelopes over a
real websocket, acks checked), the real gateway and tool loop, the scripted
model server, SQLite in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from adapters.slack import SlackAdapter, SlackStartError
from adapters.slack.channel_line import ChannelLines
from adapters.slack.render import STOP_ACTION_ID
from botgateway.fleet.lines import RedisLines
from botgateway.sink import CardTarget
from botgateway.stores.redis_connect import redis_client
from botgateway.stores.sqlite import SqliteStore
from tests.adapters.log_lines import captured_log
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.fakes.slack_env import ANSWER, Env, answer_of, controls, replies, slack_config, slack_env
from tests.fakes.stores import REDIS_URL
from tests.parked import parked
from tools.demo.script import Script


@pytest.fixture
async def env(tmp_path: Any) -> AsyncIterator[Env]:
    async for e in slack_env(tmp_path):
        yield e


# --- triggers -----------------------------------------------------------------------------


async def test_mention_is_answered_in_its_thread_progressively_with_exact_final_text(env: Env) -> None:
    env.llm.enqueue(Script.text(ANSWER, chunk_size=4, delay_s=0.01))
    event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
    delivery = await env.push(event)
    outcome = await env.done(delivery)
    assert outcome.outcome == "done"

    [reply] = replies(env, "C1", event["ts"])
    assert reply.markdown().startswith("@alice\n\n")  # who asked, by display name
    assert answer_of(reply.markdown()) == ANSWER
    assert reply.buttons() == []
    placeholder, *live = [answer_of(v) for v in reply.versions]
    assert "Thinking" in placeholder
    assert len(live) >= 4, live  # several live updates, then the final one
    for before, after in itertools.pairwise(live):
        # each update extends the last (the last live one, rendered when sent, may already hold it all)
        assert after.startswith(before) and (len(after) > len(before) or after == ANSWER)
    assert live[-1] == ANSWER
    assert len(env.fake.calls_of("chat.update")) >= 3
    assert len(env.fake.calls_of("auth.test")) == 1  # identity checked once at start, not per event
    # the question reached the model without the mention
    assert env.llm.requests[0]["messages"][-1] == {"role": "user", "content": "which server is 10.0.1.100?"}


async def test_ack_comes_before_any_slack_call_even_when_slack_is_slow(env: Env) -> None:
    env.fake.latency_s = 4.0  # every Web API answer now takes 4 s
    env.llm.enqueue(Script.text("slow but fine"))
    event = env.fake.mention("anyone there?", channel="C1")
    envelope = await env.fake.push(env.fake.event_payload(event))
    await env.fake.wait_ack(envelope, timeout=3.0)  # acked before a single Slack call could answer
    delivery = await env.next_delivery()
    env.fake.latency_s = 0.0
    outcome = await env.done(delivery)
    assert outcome.answer == "slow but fine"


async def test_direct_message_is_answered_in_the_dm(env: Env) -> None:
    env.llm.enqueue(Script.text("Hi! web-1 is fine."))
    delivery = await env.push(env.fake.message("is web-1 ok?", channel="D1", channel_type="im"))
    outcome = await env.done(delivery)
    assert outcome.answer == "Hi! web-1 is fine."
    [reply] = env.fake.channel_messages("D1")
    assert reply.thread_ts is None  # a plain DM is answered in the DM, not in a thread
    assert answer_of(reply.markdown()) == "Hi! web-1 is fine."


async def test_thread_follow_up_without_mention_uses_history(env: Env) -> None:
    env.llm.enqueue(Script.text("10.0.1.100 is web-1."), Script.text("It runs Ubuntu 22.04."))
    first = env.fake.mention("which server is 10.0.1.100?", channel="C1")
    await env.done(await env.push(first))

    follow = env.fake.message("and which OS does it run?", channel="C1", thread_ts=first["ts"])
    outcome = await env.done(await env.push(follow))
    assert outcome.answer == "It runs Ubuntu 22.04."
    messages = env.llm.requests[1]["messages"]
    assert {"role": "user", "content": "which server is 10.0.1.100?"} in messages
    assert any(m["role"] == "assistant" and m.get("content") == "10.0.1.100 is web-1." for m in messages)
    assert messages[-1] == {"role": "user", "content": "and which OS does it run?"}
    assert [answer_of(m.markdown()) for m in replies(env, "C1", first["ts"])] == [
        "10.0.1.100 is web-1.", "It runs Ubuntu 22.04."]

    # a thread the bot never answered in, and a message to someone else, are left alone
    other = await env.push(env.fake.message("unrelated chatter", channel="C1", thread_ts="999.000001"))
    assert (other.outcome, other.reason) == ("ignored", "not a thread the bot answers in")
    aside = await env.push(env.fake.message("<@U777> can you check?", channel="C1", thread_ts=first["ts"]))
    assert (aside.outcome, aside.reason) == ("ignored", "addressed to someone else")
    assert len(env.llm.requests) == 2


async def test_follow_up_in_a_bot_thread_is_recognized_after_a_restart(tmp_path: Any) -> None:
    # the first process answered in the thread; a new adapter finds the thread's history in the Store
    async for env in slack_env(tmp_path):
        env.llm.enqueue(Script.text("first answer"))
        first = env.fake.mention("question one", channel="C1", ts="500.000001")
        await env.done(await env.push(first))
    async for env in slack_env(tmp_path):
        env.llm.enqueue(Script.text("second answer"))
        follow = env.fake.message("question two", channel="C1", thread_ts="500.000001")
        outcome = await env.done(await env.push(follow))
        assert outcome.answer == "second answer"
        assert {"role": "user", "content": "question one"} in env.llm.requests[0]["messages"]


async def test_retried_event_and_the_mention_echo_start_one_turn(env: Env) -> None:
    env.llm.enqueue(Script.text("only once", delay_s=0.01))
    event = env.fake.mention("hello?", channel="C1")
    first = await env.push(event, event_id="Ev0001")
    retried = await env.push(event, event_id="Ev0001", retry_attempt=1)  # Slack redelivers (new envelope)
    assert (retried.outcome, retried.reason) == ("duplicate", "retried delivery")  # caught by its event id
    # the same message also arrives as a plain ``message`` event, with its own event id
    echo = env.fake.message(event["text"], channel="C1", ts=event["ts"])
    echo_delivery = await env.push(echo, event_id="Ev0002")
    assert echo_delivery.outcome == "ignored"
    # and a redelivery of the mention under a new event id is caught by channel + ts
    again = await env.push(event, event_id="Ev0003")
    assert (again.outcome, again.reason) == ("duplicate", "same channel and ts")
    await env.done(first)
    assert len(env.llm.requests) == 1
    assert len(replies(env, "C1", event["ts"])) == 1


async def test_own_messages_edits_deletions_and_other_bots_are_ignored_but_acked(env: Env) -> None:
    fake = env.fake
    events = [
        fake.message("my own answer", user=fake.bot_user_id, channel="D1", channel_type="im"),
        fake.message("bot post", channel="D1", channel_type="im", bot_id=fake.bot_id, user=None),
        fake.message("other bot", channel="D1", channel_type="im", bot_id="B999", subtype="bot_message"),
        fake.message("", channel="D1", channel_type="im", subtype="message_changed",
                     message={"text": "edited", "user": "U1"}),
        fake.message("", channel="D1", channel_type="im", subtype="message_deleted", deleted_ts="1.2"),
        {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": fake.new_ts(), "channel": "C1",
         "bot_id": "B999"},
        {"type": "reaction_added", "user": "U1", "reaction": "eyes", "item": {"type": "message", "channel": "C1", "ts": "1.1"}},
    ]
    outcomes = [await env.push(e) for e in events]
    assert [(o.outcome, o.reason) for o in outcomes] == [
        ("ignored", "from a bot"),
        ("ignored", "from a bot"),
        ("ignored", "subtype bot_message"),
        ("ignored", "subtype message_changed"),
        ("ignored", "subtype message_deleted"),
        ("ignored", "from a bot"),
        ("ignored", "event not used"),
    ]
    assert env.llm.requests == []
    assert fake.calls_of("chat.postMessage") == []


async def test_other_bots_are_answered_when_ignore_bots_is_off(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, ignore_bots=False):
        env.llm.enqueue(Script.text("hello, fellow bot"))
        own = await env.push(env.fake.message("mine", channel="D1", channel_type="im", bot_id=env.fake.bot_id))
        assert own.outcome == "ignored"  # our own messages never
        other = env.fake.message("status?", channel="D1", channel_type="im", bot_id="B999", user="U999")
        outcome = await env.done(await env.push(other))
        assert outcome.answer == "hello, fellow bot"


async def test_assistant_pane_gets_suggested_prompts_and_a_status_while_working(env: Env) -> None:
    fake = env.fake
    started = {"type": "assistant_thread_started",
               "assistant_thread": {"user_id": "U1", "channel_id": "D9", "thread_ts": "700.000001", "context": {}},
               "event_ts": "700.000002"}
    delivery = await env.push(started)
    assert delivery.outcome == "handled"
    [prompts] = fake.calls_of("assistant.threads.setSuggestedPrompts")
    assert prompts.args["prompts"] == env.config.adapters.slack.suggested_prompts
    assert prompts.args["thread_ts"] == "700.000001"

    env.llm.enqueue(Script.text("Two servers are stopped.", delay_s=0.01))
    outcome = await env.done(await env.push(
        fake.message("List the stopped servers", channel="D9", channel_type="im", thread_ts="700.000001")))
    assert outcome.answer == "Two servers are stopped."
    [reply] = replies(env, "D9", "700.000001")
    assert answer_of(reply.markdown()) == "Two servers are stopped."
    await fake.wait_for(lambda: len(fake.calls_of("assistant.threads.setStatus")) == 2)
    statuses = [c.args["status"] for c in fake.calls_of("assistant.threads.setStatus")]
    assert statuses == ["is thinking…", ""]
    # each assistant thread is its own conversation
    env.llm.enqueue(Script.text("fresh"))
    await env.done(await env.push(fake.message("new topic", channel="D9", channel_type="im", thread_ts="800.000001")))
    assert {"role": "user", "content": "List the stopped servers"} not in env.llm.requests[-1]["messages"]


# --- stop, errors, throttling ------------------------------------------------------------------


async def test_stop_button_cancels_the_turn_for_the_asker_only(env: Env) -> None:
    fake = env.fake
    env.llm.enqueue(Script.text("x " * 400, chunk_size=2, delay_s=0.02))
    event = fake.mention("write a long report", channel="C1", user="U1")
    delivery = await env.push(event)
    await fake.wait_for(lambda: any(m.buttons() for m in replies(env, "C1", event["ts"])))
    [message] = replies(env, "C1", event["ts"])
    [button] = message.buttons()
    assert button["value"] == delivery.submission.turn_id  # type: ignore[union-attr]

    press = fake.block_action(user="U2", channel="C1", message_ts=message.ts, action_id=STOP_ACTION_ID,
                              value=button["value"], thread_ts=event["ts"])
    envelope = await fake.push(press, type="interactive")
    await fake.wait_ack(envelope)
    refused = await env.next_delivery()
    assert (refused.outcome, refused.reason) == ("ignored", "not_yours")
    [note] = fake.ephemerals
    assert note["user"] == "U2" and "Only the person who asked" in note["text"]
    assert not delivery.submission.done.done()  # type: ignore[union-attr]

    envelope = await fake.push(fake.block_action(user="U1", channel="C1", message_ts=message.ts,
                                                 action_id=STOP_ACTION_ID, value=button["value"]), type="interactive")
    await fake.wait_ack(envelope)
    assert (await env.next_delivery()).reason == "stopped"
    outcome = await env.done(delivery)
    assert outcome.outcome == "stopped"
    assert "Stopped" in message.markdown() and message.buttons() == []
    assert len(answer_of(message.markdown())) < 800  # cut short
    # pressing again after the end says so in plain words
    envelope = await fake.push(fake.block_action(user="U1", channel="C1", message_ts=message.ts,
                                                 action_id=STOP_ACTION_ID, value=button["value"]), type="interactive")
    await fake.wait_ack(envelope)
    assert (await env.next_delivery()).reason == "already_done"
    assert "already finished" in fake.ephemerals[-1]["text"]


async def test_stop_control_of_a_native_stream_cancels_the_turn_for_the_asker_only(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="auto"):  # the default: native streaming where available
        fake = env.fake
        env.llm.enqueue(Script.text("z " * 400, chunk_size=2, delay_s=0.02))
        event = fake.mention("write a long report", channel="C1", user="U1")
        delivery = await env.push(event)
        await fake.wait_for(lambda: len(controls(env, "C1", event["ts"])) == 1)
        [control] = controls(env, "C1", event["ts"])
        [stream] = [m for m in replies(env, "C1", event["ts"]) if m.stream]
        assert stream.streaming and stream.buttons() == []
        assert "Working on it" in str(control.blocks)
        [button] = control.buttons()
        assert button["action_id"] == STOP_ACTION_ID
        assert button["value"] == delivery.submission.turn_id  # type: ignore[union-attr]

        # someone else presses it: refused privately, the answer goes on
        envelope = await fake.push(fake.block_action(user="U2", channel="C1", message_ts=control.ts,
                                                     action_id=STOP_ACTION_ID, value=button["value"],
                                                     thread_ts=event["ts"]), type="interactive")
        await fake.wait_ack(envelope)
        refused = await env.next_delivery()
        assert (refused.outcome, refused.reason) == ("ignored", "not_yours")
        [note] = fake.ephemerals
        assert note["user"] == "U2" and note["thread_ts"] == event["ts"] and "Only the person who asked" in note["text"]
        assert not delivery.submission.done.done() and stream.streaming  # type: ignore[union-attr]

        # the asker presses it: the turn is cancelled and the stream ends as stopped
        envelope = await fake.push(fake.block_action(user="U1", channel="C1", message_ts=control.ts,
                                                     action_id=STOP_ACTION_ID, value=button["value"],
                                                     thread_ts=event["ts"]), type="interactive")
        await fake.wait_ack(envelope)
        assert (await env.next_delivery()).reason == "stopped"
        outcome = await env.done(delivery)
        assert outcome.outcome == "stopped"
        assert not stream.streaming and stream.text.rstrip().endswith("⏹ Stopped.")
        assert len(stream.text) < 800  # cut short
        assert controls(env, "C1", event["ts"]) == [] and [m.ts for m in fake.deleted] == [control.ts]
        assert fake.calls_of("chat.update") == []  # the stream was never turned into an edited message


async def test_typing_stop_in_the_thread_stops_a_native_stream(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="native"):
        fake = env.fake
        env.llm.enqueue(Script.text("y " * 400, chunk_size=2, delay_s=0.02))
        event = fake.mention("write a long report", channel="C1", user="U1")
        delivery = await env.push(event)
        await fake.wait_for(lambda: any(m.text for m in replies(env, "C1", event["ts"])))
        stop = await env.push(fake.message("stop", channel="C1", user="U1", thread_ts=event["ts"]))
        assert stop.outcome == "submitted" and stop.submission is not None and stop.submission.status == "stopped"
        outcome = await env.done(delivery)
        assert outcome.outcome == "stopped"
        [stream] = replies(env, "C1", event["ts"])
        assert not stream.streaming and stream.text.rstrip().endswith("⏹ Stopped.")
        assert len(env.llm.requests) == 1  # "stop" never reached the model


async def test_refusal_and_failed_tool_are_explained_in_the_thread(tmp_path: Any) -> None:
    async def only_u1(message: Any) -> str | None:
        return None if message.ctx.user_id == "U1" else "only the on-call team may ask here"

    async for env in slack_env(tmp_path, access=only_u1):
        fake = env.fake
        refused = fake.mention("give me root", channel="C1", user="U2")
        delivery = await env.push(refused)
        assert delivery.submission is not None and delivery.submission.status == "refused"
        await asyncio.wait_for(delivery.submission.done, 10)  # type: ignore[arg-type]
        [note] = replies(env, "C1", refused["ts"])
        assert "only the on-call team may ask here" in note.markdown() and note.buttons() == []

        env.llm.enqueue(Script.tool_calls([("c1", "inventory_lookup", {"region": "dc9"})]),
                        Script.text("I could not reach the dc9 inventory."))
        event = fake.mention("hosts in dc9?", channel="C1", user="U1")
        await env.done(await env.push(event))
        [card] = replies(env, "C1", event["ts"])
        assert "❌ inventory_lookup" in card.markdown()
        assert "not reachable" in card.markdown() and "Traceback" not in card.markdown()


async def test_in_a_fleet_a_question_holds_its_place_in_its_channels_line_from_when_it_is_taken(
    tmp_path: Any, redis_prefix: str,
) -> None:
    """A busy replica may take a second to start a turn: meanwhile the question it took already holds its place in
    the fleet's line of its channel, so another replica's answer to a question asked after it waits. Its card takes
    the place over; a question that makes no card (refused) leaves the line at once."""
    starting = asyncio.Event()

    async def slow_start(message: Any) -> str | None:
        if message.ctx.user_id == "U2":
            return "only the on-call team may ask here"
        await starting.wait()  # the turn is still starting
        return None

    clients = [redis_client(REDIS_URL, socket_timeout=2.0) for _ in range(2)]
    # Announcements held for a minute: a refused question's must be withdrawn, not merely expire.
    here, elsewhere = (RedisLines(client, redis_prefix, announced_ttl_s=60.0) for client in clients)
    try:
        async for env in slack_env(tmp_path, access=slow_start, lines=here):
            line = f"{env.fake.team_id}:C1"
            env.llm.enqueue(Script.text(ANSWER))
            event = env.fake.mention("which server is 10.0.1.100?", channel="C1", user="U1")
            pushed = asyncio.create_task(env.push(event))
            async with asyncio.timeout(10):
                while not await here.size(line):  # taken: announced before its turn starts
                    await asyncio.sleep(0)
            seconds, fraction = str(event["ts"]).split(".")
            after = f"{seconds}.{int(fraction) + 1:06d}"
            other = ChannelLines(fleet=elsewhere).line_up(CardTarget(
                platform="slack", chat_id="C1", thread_id=after, turn_id="t-other", user_id="U3", is_group=True,
                workspace_id=env.fake.team_id, extra={"ts": after}))
            waiting = await parked(other.turn())
            async with asyncio.timeout(10):
                while (await elsewhere.first(line, other.member))[:2] != (False, 1):
                    await asyncio.sleep(0)
            assert not waiting.done()  # behind a question whose card does not exist yet

            starting.set()
            await env.done(await pushed)
            await asyncio.wait_for(waiting, 10)  # the answer's card took its slot, then the line moved on
            other.leave()
            [reply] = replies(env, "C1", event["ts"])
            assert answer_of(reply.markdown()) == ANSWER

            refused = env.fake.mention("give me root", channel="C1", user="U2")
            delivery = await env.push(refused)
            assert delivery.submission is not None and delivery.submission.status == "refused"
            async with asyncio.timeout(10):
                while await here.size(line):  # withdrawn, not held for seconds
                    await asyncio.sleep(0)
    finally:
        for lines in (here, elsewhere):
            await lines.aclose()
        for client in clients:
            await client.aclose()


async def test_model_failure_is_shown_in_plain_words(env: Env) -> None:
    env.llm.enqueue(Script.error(503, "upstream overloaded"))
    event = env.fake.mention("anything?", channel="C1")
    outcome = await env.done(await env.push(event))
    assert outcome.outcome.startswith("failed")
    [message] = replies(env, "C1", event["ts"])
    shown = message.markdown() + message.text
    assert "model could not be reached" in shown
    assert "Traceback" not in shown and "Error(" not in shown and BOT_TOKEN not in shown


# --- HTTP mode and start-up ------------------------------------------------------------------


async def test_http_mode_accepts_a_valid_signature_and_rejects_an_invalid_one(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, mode="http", http_port=0):
        fake = env.fake
        env.llm.enqueue(Script.text("over HTTP"))
        event = fake.mention("via events api", channel="C1")
        body = json.dumps(fake.event_payload(event, event_id="EvHTTP1"))
        async with aiohttp.ClientSession() as http:
            bad = dict(fake.sign(body, secret="not-the-secret"))
            async with http.post(env.adapter.http_url, data=body, headers=bad) as response:
                assert response.status == 401
            # A timestamp long past and one far ahead of our clock are both refused by our check, with its reason.
            for timestamp in (1_000_000_000, int(time.time()) + 3600):
                skewed = fake.sign(body, timestamp=timestamp)
                async with http.post(env.adapter.http_url, data=body, headers=skewed) as response:
                    assert response.status == 401 and "away from our clock" in await response.text()
            async with http.post(env.adapter.http_url, data=body, headers=fake.sign(body)) as response:
                assert response.status == 200
            delivery = await env.next_delivery()
            retry = {**fake.sign(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
            async with http.post(env.adapter.http_url, data=body, headers=retry) as response:
                assert response.status == 200
            retried = await env.next_delivery()
            assert (retried.outcome, retried.reason) == ("duplicate", "retried delivery")
            challenge = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"})
            async with http.post(env.adapter.http_url, data=challenge, headers=fake.sign(challenge)) as response:
                assert response.status == 200 and "c-123" in await response.text()
        outcome = await env.done(delivery)
        assert outcome.answer == "over HTTP"
        assert len(env.llm.requests) == 1  # the rejected requests never reached the model


class GatedClaims(SqliteStore):
    """A store whose claims of event deliveries wait until the test opens ``gate`` (``asked`` is set when one waits)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked = asyncio.Event()
        self.gate = asyncio.Event()

    async def claim(self, key: str, ttl_s: float) -> bool:
        if ":event:" in key:
            self.asked.set()
            await self.gate.wait()
        return await super().claim(key, ttl_s)


async def test_http_mode_claims_an_event_before_slack_gets_its_200_and_drops_a_retry_before_bolt(tmp_path: Any) -> None:
    # A fleet behind a load balancer: the process that acknowledged a delivery is the one that answers it, so a retry
    # reaching another process finds it taken; and a retry costs one look-up there, not bolt's whole dispatch.
    store = GatedClaims(tmp_path / "gated.db")
    async for env in slack_env(tmp_path, mode="http", http_port=0, store=store):
        fake = env.fake
        env.llm.enqueue(Script.text("claimed first"))
        body = json.dumps(fake.event_payload(fake.mention("who answers?", channel="C1"), event_id="EvGATE1"))
        async with aiohttp.ClientSession() as http:
            async def post(headers: dict[str, str]) -> int:
                async with http.post(env.adapter.http_url, data=body, headers=headers) as response:
                    return response.status

            first = await parked(post(fake.sign(body)))
            await asyncio.wait_for(store.asked.wait(), 10)
            await asyncio.wait({first}, timeout=0.3)
            assert not first.done()  # no acknowledgement while the claim is unanswered
            assert env.deliveries.empty() and not env.llm.requests  # nor has bolt's listener run
            store.gate.set()
            assert await asyncio.wait_for(first, 10) == 200
            delivery = await env.next_delivery()
            assert delivery.outcome == "submitted"
            retry = {**fake.sign(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
            assert await post(retry) == 200
            retried = await env.next_delivery()
            assert (retried.event_type, retried.outcome, retried.reason) == ("app_mention", "duplicate", "retried delivery")
        assert (await env.done(delivery)).answer == "claimed first"
        assert len(env.llm.requests) == 1


async def test_http_mode_refuses_junk_with_a_4xx_and_one_warning_each_never_a_traceback(tmp_path: Any) -> None:
    form = "application/x-www-form-urlencoded"
    signed_junk: list[tuple[str, bytes, str]] = [
        ("bad JSON", b'{"type": "event_callback", ', "application/json"),
        ("a JSON list", b'[{"type": "event_callback"}]', "application/json"),
        ("JSON null", b"null", "application/json"),
        ("a number", b"42", "application/json"),
        ("not UTF-8", b'{"type": "\xff\xfe"}', "application/json"),
        ("bad JSON in payload=", b"payload=%7B%22type%22%3A", form),
        ("a list in payload=", b"payload=%5B1%2C2%5D", form),
        ("odd fields", b'{"type": "event_callback", "authorizations": "x", "event": "y"}', "application/json"),
        ("an event that is a string", b'{"type": "event_callback", "team_id": "T0001", "event": "y"}', "application/json"),
        ("an event without a type", b'{"type": "event_callback", "team_id": "T0001", "event": {"type": 5}}', "application/json"),
        ("too deep", b"[" * 100_000 + b"]" * 100_000, "application/json"),
    ]
    with captured_log() as log:
        async for env in slack_env(tmp_path, mode="http", http_port=0):
            fake = env.fake
            env.llm.enqueue(Script.text("still fine"))
            body = json.dumps(fake.event_payload(fake.mention("hi", channel="C1"), event_id="EvJunk1"))
            unsigned = [
                {"X-Slack-Request-Timestamp": "yesterday", "X-Slack-Signature": "v0=00"},
                {"X-Slack-Request-Timestamp": "1e9", "X-Slack-Signature": "v0=00"},
                {"X-Slack-Request-Timestamp": "", "X-Slack-Signature": ""},
                {},
            ]
            async with aiohttp.ClientSession() as http:
                for headers in unsigned:
                    mark = log.mark()
                    async with http.post(env.adapter.http_url, data=body, headers=headers) as response:
                        assert response.status == 401, headers
                        assert "Traceback" not in await response.text()
                    [warning] = log.problems(mark)
                    assert warning["level"] == "warning" and "exception" not in warning, warning
                for what, raw, content_type in signed_junk:
                    mark = log.mark()
                    headers = {**fake.sign(raw), "Content-Type": content_type}
                    async with http.post(env.adapter.http_url, data=raw, headers=headers) as response:
                        assert response.status == 400, what
                        text = await response.text()
                        assert "Traceback" not in text and SIGNING_SECRET not in text
                    [warning] = log.problems(mark)
                    assert warning["level"] == "warning" and "exception" not in warning, (what, warning)
                # a good request still goes through after all that
                async with http.post(env.adapter.http_url, data=body, headers=fake.sign(body)) as response:
                    assert response.status == 200
                assert (await env.done(await env.next_delivery())).answer == "still fine"
            assert env.deliveries.empty()
        assert all("Traceback" not in str(line) for line in log.since())
        assert all(SIGNING_SECRET not in str(line) for line in log.since())


async def test_start_reports_bad_tokens_in_plain_words(tmp_path: Any) -> None:
    async with FakeSlack() as fake:
        store = SqliteStore(tmp_path / "s.db")
        await store.open()
        try:
            config = slack_config("http://127.0.0.1:9/v1", fake, bot_token="xoxb-wrong")
            with pytest.raises(SlackStartError, match="bot token was rejected") as info:
                await SlackAdapter(config.adapters.slack, store=store).start(None)  # type: ignore[arg-type]
            assert "xoxb-wrong" not in str(info.value)
            # config files with an empty token are refused by check-config already; the adapter still says so
            # itself for configs built in code (model_copy skips validation)
            no_app_token = slack_config("http://127.0.0.1:9/v1", fake).adapters.slack.model_copy(
                update={"app_token": SecretStr("")})
            with pytest.raises(SlackStartError, match="xapp-"):
                await SlackAdapter(no_app_token, store=store).start(None)  # type: ignore[arg-type]
            config = slack_config("http://127.0.0.1:9/v1", fake, app_token="xapp-wrong")
            with pytest.raises(SlackStartError, match="app-level token was rejected"):
                await SlackAdapter(config.adapters.slack, store=store).start(None)  # type: ignore[arg-type]
            fake.socket_enabled = False
            config = slack_config("http://127.0.0.1:9/v1", fake)
            with pytest.raises(SlackStartError, match="Socket Mode connection"):
                await SlackAdapter(config.adapters.slack, store=store, connect_timeout_s=0.5).start(None)  # type: ignore[arg-type]
            config = slack_config("http://127.0.0.1:9/v1", fake, mode="http")
            no_secret = config.adapters.slack.model_copy(update={"signing_secret": SecretStr("")})
            with pytest.raises(SlackStartError, match="signing_secret"):
                await SlackAdapter(no_secret, store=store, http_port=0).start(None)  # type: ignore[arg-type]
            busy = SlackAdapter(config.adapters.slack.model_copy(update={"signing_secret": SecretStr("s")}),
                                store=store, http_port=0)
            await busy.start(None)  # type: ignore[arg-type]
            try:
                port = int(busy.http_url.split(":")[2].split("/")[0])
                clash = SlackAdapter(busy.config, store=store, http_port=port)
                with pytest.raises(SlackStartError, match="cannot listen"):
                    await clash.start(None)  # type: ignore[arg-type]
            finally:
                await busy.stop()
        finally:
            await store.close()


async def test_run_builds_the_adapter_from_the_runtime(tmp_path: Any) -> None:
    from types import SimpleNamespace

    from botgateway.budget import RateBudget
    from botgateway.cli.run import build_adapter

    async with FakeSlack() as fake:
        store = SqliteStore(tmp_path / "s.db")
        await store.open()
        try:
            config = slack_config("http://127.0.0.1:9/v1", fake)
            runtime = SimpleNamespace(store=store, budget=RateBudget(), config=config, worker_index=None, lines=None)
            adapter = build_adapter("slack", config.adapters.slack, runtime)  # type: ignore[arg-type]
            assert adapter.name == "slack" and adapter.sink.platform == "slack"
            assert adapter.sink.max_chars == config.adapters.slack.max_live_bytes
        finally:
            await store.close()
