"""Slack answers as they stream: native streams, edit mode, continuation messages and rate budgets.

Same setup as ``test_adapter.py``: real slack-bolt / slack-sdk against the
fake Slack, the real gateway, card streamer and tool loop, the scripted model.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.slack import FakeSlack, Window
from tests.fakes.slack_env import ANSWER, answer_of, controls, replies, slack_env
from tools.demo.script import Script

# --- streaming modes ------------------------------------------------------------------------


async def test_native_streaming_with_tool_calls_as_task_updates(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="auto"):
        env.llm.enqueue(
            Script.tool_calls([("c1", "find_server", {"query": "10.0.1.100"})], text="Looking it up."),
            Script.text(ANSWER, chunk_size=6, delay_s=0.01),
        )
        event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
        outcome = await env.done(await env.push(event))
        assert outcome.outcome == "done"
        [stream] = replies(env, "C1", event["ts"])
        assert stream.stream and not stream.streaming
        assert stream.text == "Looking it up.\n\n" + ANSWER
        assert stream.tasks["c1"]["status"] == "complete"
        statuses = [c["status"] for c in stream.chunks if c.get("type") == "task_update"]
        # The model request does not wait for the stream, so a quick call may be first shown complete.
        assert statuses[-1] == "complete" and set(statuses) <= {"in_progress", "complete"}
        assert len(env.fake.calls_of("chat.appendStream")) >= 3
        assert env.fake.calls_of("chat.update") == []


async def test_native_stream_shows_a_stop_control_while_live_and_removes_it_at_the_end(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="auto", post_rate_per_s=10):
        env.llm.enqueue(Script.text(ANSWER, chunk_size=6, delay_s=0.05))
        event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
        delivery = await env.push(event)
        await env.fake.wait_for(lambda: len(controls(env, "C1", event["ts"])) == 1)
        [control] = controls(env, "C1", event["ts"])
        assert control.buttons()[0]["value"] == delivery.submission.turn_id  # type: ignore[union-attr]
        assert not delivery.submission.done.done()  # type: ignore[union-attr]  # shown while the answer is live
        outcome = await env.done(delivery)
        assert outcome.outcome == "done"
        [stream] = replies(env, "C1", event["ts"])  # only the answer is left in the thread
        assert stream.stream and stream.text == ANSWER and stream.buttons() == []
        assert [m.ts for m in env.fake.deleted] == [control.ts]
        assert len(env.fake.calls_of("chat.postMessage")) == 1 and len(env.fake.calls_of("chat.delete")) == 1
        assert env.fake.calls_of("chat.update") == []
        # the stream's start and the control are the channel's two new messages, paid from its budget; the stream
        # also drew from the workspace's chat.startStream budget
        assert env.budget.granted("slack:T0001:post:C1") == 2
        assert env.budget.granted("slack:T0001:chat.startStream") == 1


async def test_native_stream_error_falls_back_to_editing_the_same_message(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, streaming="native"):
        env.fake.fail("chat.appendStream", "internal_error", status=500)
        env.llm.enqueue(Script.text(ANSWER, chunk_size=6, delay_s=0.01))
        event = env.fake.mention("which server is 10.0.1.100?", channel="C1")
        outcome = await env.done(await env.push(event))
        assert outcome.outcome == "done"
        [message] = replies(env, "C1", event["ts"])
        assert message.stream and not message.streaming
        assert answer_of(message.markdown()) == ANSWER
        assert len(env.fake.calls_of("chat.update")) >= 2  # edited from the failure on
        assert len(env.fake.calls_of("chat.appendStream")) == 1  # the failed one; no more stream calls


async def test_auto_mode_uses_edit_mode_where_streaming_is_unavailable(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, fake=FakeSlack(streaming_enabled=False), streaming="auto"):
        env.llm.enqueue(Script.text("first"), Script.text("second"))
        one = env.fake.mention("q1", channel="C1")
        two = env.fake.mention("q2", channel="C2")
        await env.done(await env.push(one))
        await env.done(await env.push(two))
        assert len(env.fake.calls_of("chat.startStream")) == 1  # remembered for the workspace
        assert [answer_of(m.markdown()) for m in replies(env, "C2", two["ts"])] == ["second"]


@pytest.mark.parametrize("streaming", ["edit", "native"])
async def test_long_answer_continues_in_a_new_thread_message(tmp_path: Any, streaming: str) -> None:
    long_answer = " ".join(f"line {i} of the report is fine." for i in range(40))  # ~1,200 characters
    async for env in slack_env(tmp_path, max_live_bytes=500, streaming=streaming):
        env.llm.enqueue(Script.text(long_answer, chunk_size=20, delay_s=0.005))
        event = env.fake.mention("report?", channel="C1")
        await env.done(await env.push(event))
        parts = replies(env, "C1", event["ts"])
        assert len(parts) >= 3
        # a part made once the answer was complete goes out finished, in one message, even in native mode
        assert all(p.stream == (streaming == "native") for p in parts[:-1])
        assert all(len(answer_of(p.markdown()).encode()) <= 700 for p in parts)
        words = " ".join(answer_of(p.markdown()) for p in parts).split()
        body = [w for w in words if not w.startswith("(") and not w.endswith(")") and w not in {"↓)", "↓"}]
        assert " ".join(w for w in body if w not in {"(continued", "in", "the", "next", "message", "part"}) == \
            " ".join(w for w in long_answer.split() if w not in {"in", "the", "next", "message", "part"})



async def test_throttled_chat_update_still_delivers_the_exact_final_text(tmp_path: Any) -> None:
    fake = FakeSlack(limits={"chat.update": Window(3, 1.0)}, limit_style="body")
    # the config claims more than the fake allows: the fake's ratelimited answers must be honoured
    async for env in slack_env(tmp_path, fake=fake, update_rate_per_min=600, rate_window_s=60):
        env.llm.enqueue(Script.text(ANSWER, chunk_size=3, delay_s=0.01))
        event = env.fake.mention("q", channel="C1")
        await env.done(await env.push(event))
        assert env.fake.throttled("chat.update")  # the fake did push back
        [message] = replies(env, "C1", event["ts"])
        assert answer_of(message.markdown()) == ANSWER and message.buttons() == []


async def test_http_429_on_every_live_update_still_delivers_the_final_answer(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, fake=FakeSlack(retry_after=1), update_rate_per_min=600):
        env.fake.fail("chat.update", "ratelimited", status=429, retry_after=1, times=2)
        env.llm.enqueue(Script.text(ANSWER, chunk_size=8, delay_s=0.01))
        event = env.fake.mention("q", channel="C1")
        await env.done(await env.push(event))
        assert len(env.fake.throttled("chat.update")) == 2
        [message] = replies(env, "C1", event["ts"])
        assert answer_of(message.markdown()) == ANSWER


async def test_five_concurrent_mentions_stay_within_the_chat_update_budget(tmp_path: Any) -> None:
    """Acceptance: all cards of a workspace share chat.update; the fake never has to refuse one."""
    fake = FakeSlack(limits={"chat.update": Window(20, 2.0)}, limit_style="http429")
    answers = {f"C{i}": f"Answer {i}: " + " ".join(f"host-{i}-{n} is running." for n in range(25)) for i in range(1, 6)}

    def respond(body: dict[str, Any]) -> Script:
        # one script per question, whatever order the turns reach the model in
        return Script.text(answers[body["messages"][-1]["content"]], chunk_size=4, delay_s=0.01)

    async for env in slack_env(tmp_path, fake=fake, responder=respond, update_rate_per_min=20, rate_window_s=2):
        events = {channel: env.fake.mention(channel, channel=channel) for channel in answers}
        outcomes = await env.answer_all(events.values())
        assert all(o.outcome == "done" for o in outcomes)
        for channel, event in events.items():
            [message] = replies(env, channel, event["ts"])
            assert answer_of(message.markdown()) == answers[channel]
        assert env.fake.throttled("chat.update") == []
        assert env.fake.max_in_window("chat.update", 2.0) <= 20
        # still progressive, just paced: every card showed live text between its placeholder and its final text
        assert all(len(replies(env, c, e["ts"])[0].versions) >= 3 for c, e in events.items())




async def test_a_spent_start_stream_budget_switches_new_answers_to_edit_mode_at_once(tmp_path: Any) -> None:
    """chat.startStream is Tier 2 (about 20 a minute per workspace): answers past it do not wait for it.

    Scaled down: the fake allows 4 starts per second and the bot plans 4 per 1 s window (each counted from its
    answer); 8 questions arrive in 8 channels at once. The first 4 stream natively; the others start at once in edit mode, on
    their channels' chat.postMessage budgets. Nobody waits for a start, and Slack never refuses one.
    """
    fake = FakeSlack(limits={"chat.startStream": Window(4, 1.0)}, limit_style="http429")
    channels = [f"C{i}" for i in range(1, 9)]
    answers = {c: f"Answer for {c}: " + " ".join(f"host-{c}-{n} is running." for n in range(8)) for c in channels}

    def respond(body: dict[str, Any]) -> Script:
        return Script.text(answers[body["messages"][-1]["content"]], chunk_size=6, delay_s=0.01)

    async for env in slack_env(tmp_path, fake=fake, responder=respond, streaming="native",
                               start_stream_rate_per_min=4, rate_window_s=1):
        events = {channel: env.fake.mention(channel, channel=channel) for channel in channels}
        outcomes = await env.answer_all(events.values())
        assert all(o.outcome == "done" for o in outcomes)
        streamed = edited = 0
        for channel, event in events.items():
            [message] = replies(env, channel, event["ts"])
            if message.stream:
                streamed += 1
                assert message.text == answers[channel] and not message.streaming
            else:
                edited += 1
                assert answer_of(message.markdown()) == answers[channel] and message.buttons() == []
        assert (streamed, edited) == (4, 4)
        assert env.fake.throttled("chat.startStream") == []  # the fake never had to refuse a start
        assert len(env.fake.calls_of("chat.startStream")) == 4


async def test_when_chat_update_is_reserved_for_finals_a_new_answer_comes_in_one_message(tmp_path: Any) -> None:
    """No chat.update to spare beyond the finals of open cards: the answer is deferred, not made to wait.

    Scaled down: one chat.update per 1 s window, and the first answer's card holds it for its final. The second answer posts no placeholder and no update: it arrives complete, in one message.
    """
    gate = asyncio.Event()

    async def respond(body: dict[str, Any]) -> Script:
        if body["messages"][-1]["content"] == "first":
            await gate.wait()  # the first answer stays open (its card holds its final) until the end
            return Script.text("The first answer.")
        return Script.text("The second answer, in full.", chunk_size=4, delay_s=0.01)

    async for env in slack_env(tmp_path, responder=respond, update_rate_per_min=1, rate_window_s=1):
        first = env.fake.mention("first", channel="C1")
        first_delivery = await env.push(first)
        await env.fake.wait_for(lambda: bool(replies(env, "C1", first["ts"])))  # the first card holds its final
        second = env.fake.mention("second", channel="C2")
        outcome = await env.done(await env.push(second))
        assert outcome.outcome == "done"
        [message] = replies(env, "C2", second["ts"])
        assert len(message.versions) == 1 and "The second answer, in full." in message.markdown()  # posted once, complete
        assert [c for c in env.fake.calls_of("chat.update") if c.args.get("channel") == "C2"] == []
        gate.set()
        assert (await env.done(first_delivery)).outcome == "done"
