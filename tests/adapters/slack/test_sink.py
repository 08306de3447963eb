"""The Slack card sink against the fake Slack: edit mode, native streams, fallbacks and error mapping.

The real slack_sdk ``AsyncWebClient`` talks to the fake over loopback.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.limits import window_limit
from adapters.slack.render import STOP_ACTION_ID, card_text
from adapters.slack.sink import SlackCardSink
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import SlackConfig
from botgateway.sink import CardGone, CardTarget, PermanentError, RateLimited, TooLong, TransientError
from botgateway.snapshot import CardSnapshot, Narration, ToolLine
from tests.fakes.slack import BOT_TOKEN, FakeSlack, Window


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _config(fake: FakeSlack, **overrides: Any) -> SlackConfig:
    return SlackConfig(bot_token=SecretStr(BOT_TOKEN), api_base_url=fake.api_url, **overrides)


def _sink(fake: FakeSlack, *, token: str = BOT_TOKEN, clock: Clock | None = None, pacer: BudgetPacer | None = None,
          **overrides: Any) -> SlackCardSink:
    client = AsyncWebClient(token=token, base_url=fake.api_url, timeout=5)
    kwargs = {"clock": clock} if clock is not None else {}
    return SlackCardSink(client, _config(fake, **overrides), pacer=pacer, **kwargs)


def _target(channel: str = "C1", thread: str | None = "100.000001", turn: str = "turn-1", team: str = "T0001") -> CardTarget:
    return CardTarget(platform="slack", chat_id=channel, thread_id=thread, turn_id=turn, user_id="U1",
                      user_name="alice", is_group=True, workspace_id=team)


def snap(status: str = "streaming", answer: str = "", blocks: tuple = (), **kw: Any) -> CardSnapshot:
    return CardSnapshot(status=status, answer=answer, blocks=blocks, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


# --- edit mode -------------------------------------------------------------------------


async def test_edit_mode_posts_placeholder_then_edits_and_finalizes_without_stop_button(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    target = _target()
    handle = await sink.create(target, snap("working"))
    [post] = fake.calls_of("chat.postMessage")
    assert post.args["thread_ts"] == "100.000001"
    message = fake.messages[("C1", handle.card_id)]
    [button] = message.buttons()
    assert button["action_id"] == STOP_ACTION_ID and button["value"] == "turn-1"
    assert "Thinking" in message.markdown()

    await sink.update(handle, snap("streaming", "Hello wor"))
    assert message.markdown().startswith("Hello wor") and message.buttons()
    final = snap("done", "Hello world.", footer="round 1/4 · 1.0 s")
    await sink.finalize(handle, final)
    assert message.markdown().startswith("Hello world.")
    assert "round 1/4" in message.markdown()
    assert message.buttons() == []  # the Stop button goes away with the live card
    assert message.text == card_text(final)
    assert [c.method for c in fake.calls] == ["chat.postMessage", "chat.update", "chat.update"]


async def test_edit_mode_defuses_broadcast_mentions_and_escapes_text(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("done", "ping <!channel> & <b>"))
    message = fake.messages[("C1", handle.card_id)]
    assert "<!channel>" not in message.markdown() and "<b>" not in message.markdown()  # a tag is text, as a link is
    # escaped for the text field (the tag's zero-width space after its "<" too)
    assert "<!channel>" not in message.text and "&amp;" in message.text and "&lt;\u200bb&gt;" in message.text


async def test_live_text_past_the_byte_limit_is_too_long(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit", max_live_bytes=600)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "a" * 590))
    with pytest.raises(TooLong):
        await sink.update(handle, snap("streaming", "服" * 250))  # 250 characters, 750 bytes
    assert len(fake.calls_of("chat.update")) == 1


async def test_fallback_posts_the_whole_answer_as_new_thread_messages(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    short = "web-1 is running."
    await sink.fallback(_target(thread="50.000001"), snap("done", short))
    [one] = fake.thread("C1", "50.000001")
    assert one.markdown() == short and one.buttons() == []
    answer = " ".join(f"word{i}" for i in range(2500))  # past Slack's 12,000 characters per block
    await sink.fallback(_target(), snap("done", answer))
    posted = fake.thread("C1", "100.000001")
    assert len(posted) == 2
    assert all(m.buttons() == [] for m in posted)
    joined = "".join(m.markdown() for m in posted)
    assert joined.replace(" ", "") == answer.replace(" ", "")


# --- error mapping ------------------------------------------------------------------------


async def test_http_429_maps_to_rate_limited_with_retry_after(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.update", "ratelimited", status=429, retry_after=7)
    with pytest.raises(RateLimited) as info:
        await sink.update(handle, snap("streaming", "x"))
    assert info.value.retry_after == 7.0


@pytest.mark.parametrize("header", [float("inf"), -3.0])
async def test_an_unusable_retry_after_is_not_trusted(fake: FakeSlack, header: float) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.update", "ratelimited", status=429, retry_after=header)  # a broken proxy's header
    with pytest.raises(RateLimited) as info:
        await sink.update(handle, snap("streaming", "x"))
    assert info.value.retry_after is None  # the streamer's own backoff applies, not a pause forever


async def test_ratelimited_body_maps_to_rate_limited(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.update", "ratelimited")
    with pytest.raises(RateLimited) as info:
        await sink.update(handle, snap("streaming", "x"))
    assert info.value.retry_after is None


async def test_fake_window_limits_answer_throttles_the_sink_understands(fake: FakeSlack) -> None:
    fake.limits["chat.update"] = Window(2, 60.0)
    fake.limit_style = "body"
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "a"))
    await sink.update(handle, snap("streaming", "ab"))
    with pytest.raises(RateLimited):
        await sink.update(handle, snap("streaming", "abc"))
    fake.limit_style = "http429"
    with pytest.raises(RateLimited) as info:
        await sink.update(handle, snap("streaming", "abcd"))
    assert info.value.retry_after is not None and info.value.retry_after >= 1
    assert len(fake.throttled("chat.update")) == 2


@pytest.mark.parametrize(
    ("error", "status", "expected"),
    [
        ("message_not_found", 200, CardGone),
        ("cant_update_message", 200, CardGone),
        ("msg_too_long", 200, TooLong),
        ("missing_scope", 200, PermanentError),
        ("internal_error", 500, TransientError),
        ("service_unavailable", 503, TransientError),
    ],
)
async def test_slack_errors_map_to_typed_sink_errors(fake: FakeSlack, error: str, status: int, expected: type) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.update", error, status=status)
    with pytest.raises(expected):
        await sink.update(handle, snap("streaming", "x"))


async def test_html_error_page_and_dead_server_are_transient(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.update", status=502, body="<html>bad gateway</html>")
    with pytest.raises(TransientError):
        await sink.update(handle, snap("streaming", "x"))
    await fake.stop()
    with pytest.raises(TransientError):
        await sink.update(handle, snap("streaming", "xy"))


async def test_rejected_token_is_permanent_and_never_echoed(fake: FakeSlack) -> None:
    sink = _sink(fake, token="xoxb-wrong-secret-value", streaming="edit")
    with pytest.raises(PermanentError) as info:
        await sink.create(_target(), snap("working"))
    assert "xoxb" not in str(info.value) and "invalid_auth" in str(info.value)


async def test_unknown_message_is_card_gone(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit")
    handle = await sink.create(_target(), snap("working"))
    fake.messages.clear()  # deleted in Slack
    with pytest.raises(CardGone):
        await sink.finalize(handle, snap("done", "x"))


# --- native streams ----------------------------------------------------------------------


def _tool(call_id: str, status: str, summary: str = "") -> ToolLine:
    return ToolLine(call_id=call_id, name="find_server", args_preview="ip=10.0.1.100", status=status,  # type: ignore[arg-type]
                    duration_s=None if status == "running" else 0.4, summary=summary)


async def test_native_stream_appends_deltas_and_task_updates(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    target = _target()
    handle = await sink.create(target, snap("working"))
    [start] = fake.calls_of("chat.startStream")
    assert start.args["recipient_user_id"] == "U1" and start.args["recipient_team_id"] == "T0001"
    assert sink.rate_key("update", target)[0] == "slack:T0001:stream"

    narration = Narration(round=1, text="Let me check.")
    await sink.update(handle, snap("working", blocks=(narration, _tool("c1", "running"))))
    await sink.update(handle, snap("working", blocks=(narration, _tool("c1", "done", "1 match"))))
    await sink.update(handle, snap("streaming", "It is ", blocks=(narration, _tool("c1", "done", "1 match"))))
    await sink.update(handle, snap("streaming", "It is ", blocks=(narration, _tool("c1", "done", "1 match"))))  # nothing new
    final = snap("done", "It is web-1.", blocks=(narration, _tool("c1", "done", "1 match")), footer="round 2/4")
    await sink.finalize(handle, final)

    message = fake.messages[("C1", handle.card_id)]
    assert not message.streaming
    assert message.text == "Let me check.\n\nIt is web-1."
    assert message.tasks["c1"]["status"] == "complete" and message.tasks["c1"]["output"] == "1 match"
    statuses = [c["status"] for c in message.chunks if c.get("type") == "task_update"]
    assert statuses == ["in_progress", "complete"]
    assert len(fake.calls_of("chat.appendStream")) == 3  # the unchanged snapshot made no call
    assert any("round 2/4" in str(b) for b in message.stop_blocks)
    # each version extends the previous one: progressive, never rewritten
    for before, after in itertools.pairwise(message.versions):
        assert after.startswith(before)
    assert fake.calls_of("chat.update") == []


async def test_native_failure_note_is_appended_when_stopping(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "partial"))
    await sink.finalize(handle, snap("failed", "partial", error="⚠️ The model could not be reached."))
    message = fake.messages[("C1", handle.card_id)]
    assert message.text == "partial\n\n⚠️ The model could not be reached."


async def test_native_stream_error_falls_back_to_edit_mode_for_that_message(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    target = _target()
    handle = await sink.create(target, snap("working"))
    await sink.update(handle, snap("streaming", "Hello"))
    fake.fail("chat.appendStream", "internal_error", status=500)
    await sink.update(handle, snap("streaming", "Hello wor"))  # the stream breaks: same message, edited
    message = fake.messages[("C1", handle.card_id)]
    assert not message.streaming
    assert message.markdown().startswith("Hello wor")
    assert sink.rate_key("update", target)[0] == "slack:T0001:chat.update"
    await sink.update(handle, snap("streaming", "Hello world"))
    await sink.finalize(handle, snap("done", "Hello world!"))
    assert message.markdown().startswith("Hello world!")
    assert message.buttons() == []
    assert [c.method for c in fake.calls[-2:]] == ["chat.update", "chat.update"]
    # another card in the same workspace still streams natively (the failure was this message's)
    other = await sink.create(_target(thread="200.000001", turn="turn-2"), snap("working"))
    assert fake.messages[("C1", other.card_id)].stream


async def test_native_text_that_cannot_be_appended_switches_to_edit(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "The answer is 4"))
    await sink.finalize(handle, snap("done", "The answer is 5."))  # authoritative final text differs
    message = fake.messages[("C1", handle.card_id)]
    assert message.markdown().startswith("The answer is 5.")


async def test_auto_mode_remembers_per_workspace_when_native_is_unavailable(fake: FakeSlack) -> None:
    fake.streaming_enabled = False
    sink = _sink(fake, streaming="auto")
    first = await sink.create(_target(turn="t1"), snap("working"))
    assert fake.messages[("C1", first.card_id)].stream is False
    second = await sink.create(_target(turn="t2", thread="300.000001"), snap("working"))
    assert fake.messages[("C1", second.card_id)].stream is False
    assert len(fake.calls_of("chat.startStream")) == 1  # learned once, then straight to edit mode
    assert not sink.native_available("T0001")
    assert sink.native_available("T0002")
    assert sink.rate_key("update", _target(turn="t3"))[0] == "slack:T0001:chat.update"


async def test_native_needs_a_thread_and_queued_cards_use_edit(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    dm = await sink.create(_target(channel="D1", thread=None), snap("working"))
    queued = await sink.create(_target(turn="t9"), snap("queued", error="⏳ Waiting…"))
    assert fake.calls_of("chat.startStream") == []
    assert fake.messages[("D1", dm.card_id)].thread_ts is None
    assert "Waiting" in fake.messages[("C1", queued.card_id)].markdown()


async def test_native_stream_rolls_over_after_the_configured_age(fake: FakeSlack) -> None:
    clock = Clock()
    sink = _sink(fake, streaming="native", stream_rollover_s=240, clock=clock)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "part one, "))
    clock.now += 241
    await sink.update(handle, snap("streaming", "part one, part two, "))
    await sink.update(handle, snap("streaming", "part one, part two, three"))
    await sink.finalize(handle, snap("done", "part one, part two, three."))
    streams = [m for m in fake.thread("C1", "100.000001") if m.stream]
    assert len(streams) == 2
    assert all(not m.streaming for m in streams)
    assert streams[0].text == "part one, "
    assert streams[1].text == "part two, three."
    assert "".join(m.text for m in streams) == "part one, part two, three."


async def test_a_rollover_throttled_after_the_old_stream_stopped_resumes_in_a_new_stream(fake: FakeSlack) -> None:
    clock = Clock()
    sink = _sink(fake, streaming="native", stream_rollover_s=240, clock=clock)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "part one, "))
    clock.now += 241
    fake.fail("chat.startStream", "ratelimited", status=429, retry_after=1)  # the old stream is already stopped
    with pytest.raises(RateLimited):
        await sink.update(handle, snap("streaming", "part one, part two, "))
    await sink.update(handle, snap("streaming", "part one, part two, "))  # the streamer's retry
    await sink.finalize(handle, snap("done", "part one, part two, three."))
    streams = [m for m in fake.thread("C1", "100.000001") if m.stream]
    assert [m.text for m in streams] == ["part one, ", "part two, three."]
    assert not any(m.streaming for m in streams)
    assert fake.calls_of("chat.update") == []  # still a stream, not an edited message
    assert [c.error for c in fake.calls_of("chat.stopStream")].count("message_not_in_streaming_state") == 0


async def test_a_final_right_after_a_throttled_rollover_still_streams_the_rest(fake: FakeSlack) -> None:
    clock = Clock()
    sink = _sink(fake, streaming="native", stream_rollover_s=240, clock=clock)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "part one, "))
    clock.now += 241
    fake.fail("chat.startStream", "ratelimited", status=429, retry_after=1)
    with pytest.raises(RateLimited):
        await sink.update(handle, snap("streaming", "part one, part two, "))
    await sink.finalize(handle, snap("done", "part one, part two."))
    streams = [m for m in fake.thread("C1", "100.000001") if m.stream]
    assert [m.text for m in streams] == ["part one, ", "part two."]
    assert not any(m.streaming for m in streams) and fake.calls_of("chat.update") == []


async def test_native_throttle_propagates_and_the_retry_sends_the_text_once(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_target(), snap("working"))
    fake.fail("chat.appendStream", "ratelimited", status=429, retry_after=2)
    with pytest.raises(RateLimited):
        await sink.update(handle, snap("streaming", "abc"))
    await sink.update(handle, snap("streaming", "abcdef"))
    await sink.finalize(handle, snap("done", "abcdef"))
    assert fake.messages[("C1", handle.card_id)].text == "abcdef"


# --- budgets --------------------------------------------------------------------------------


def test_window_limit_never_exceeds_the_window_count() -> None:
    for calls, window in [(50, 60.0), (20, 2.0), (100, 60.0), (2, 1.0), (3, 10.0)]:
        limit = window_limit(calls, window)
        # a window of the same length that never holds more than Slack's count (with room for skew)
        assert limit.window_s == window and 1 <= limit.burst <= calls


async def test_rate_keys_update_shared_per_workspace_post_per_channel(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit", update_rate_per_min=20, rate_window_s=2)
    a, b = _target(channel="C1", turn="a"), _target(channel="C2", turn="b")
    key_a, limit = sink.rate_key("update", a)
    assert key_a == sink.rate_key("finalize", b)[0] == "slack:T0001:chat.update"
    assert limit.window_s == 2 and limit.burst <= 20
    assert sink.rate_key("create", a)[0] != sink.rate_key("create", b)[0]
    assert sink.rate_key("update", _target(team="T0002"))[0] != key_a


def _budgeted(fake: FakeSlack, budget: RateBudget, clock: Clock | None = None, **overrides: Any) -> SlackCardSink:
    """A sink whose own calls the core's pacer pays for from ``budget``, as in ``botgateway run``."""
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    kwargs = {"clock": clock} if clock is not None else {}
    return SlackCardSink(client, _config(fake, stop_button=False, **overrides), pacer=BudgetPacer(budget), **kwargs)


async def test_native_creates_draw_the_workspace_start_stream_budget(fake: FakeSlack) -> None:
    budget = RateBudget()
    sink = _budgeted(fake, budget, streaming="auto", start_stream_rate_per_min=20, rate_window_s=2, stream_starts_per_channel=False)
    a, b = _target(channel="C1", turn="a"), _target(channel="C2", turn="b")
    key, limit = sink.rate_key("create", a)
    assert key == sink.rate_key("create", b)[0] == "slack:T0001:chat.startStream"  # Tier 2, per workspace
    assert limit.window_s == 2 and limit.burst <= 20
    assert sink.rate_key("create", _target(thread=None))[0] == "slack:T0001:post:C1"  # no thread: a placeholder
    assert sink.rate_key("fallback", a)[0] == "slack:T0001:post:C1"
    # the streamer drew the token for a stream: the sink takes none itself
    await sink.create(a, snap("working"))
    assert budget.granted("slack:T0001:chat.startStream") == 0 and budget.granted("slack:T0001:post:C1") == 0

    # auto mode learns the workspace cannot stream: creates are budgeted as placeholders from then on
    fake.streaming_enabled = False
    c = _target(channel="C3", turn="c")
    assert sink.rate_key("create", c)[0] == "slack:T0001:chat.startStream"
    handle = await sink.create(c, snap("working"))
    assert not fake.messages[("C3", handle.card_id)].stream
    assert budget.granted("slack:T0001:post:C3") == 1  # the placeholder that replaced the refused stream paid for itself
    assert sink.rate_key("create", _target(channel="C4", turn="d"))[0] == "slack:T0001:post:C4"


async def test_a_queued_card_pays_for_its_placeholder_and_retries_use_the_post_budget(fake: FakeSlack) -> None:
    budget = RateBudget()
    sink = _budgeted(fake, budget, streaming="native", stream_starts_per_channel=False)
    target = _target(turn="q")
    assert sink.rate_key("create", target)[0] == "slack:T0001:chat.startStream"  # budgeted as a stream…
    fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=0.2)
    with pytest.raises(TransientError):  # …so a throttled placeholder pauses the post bucket, not the stream one
        await sink.create(target, snap("queued", error="⏳ Waiting…"))
    assert budget.paused_for("slack:T0001:post:C1") > 0
    assert budget.paused_for("slack:T0001:chat.startStream") == 0
    # the streamer's retry is budgeted as what the card became
    assert sink.rate_key("create", target)[0] == "slack:T0001:post:C1"
    handle = await sink.create(target, snap("queued", error="⏳ Waiting…"))
    assert budget.granted("slack:T0001:post:C1") == 1  # drawn once by the sink, not again on the retry
    assert "Waiting" in fake.messages[("C1", handle.card_id)].markdown()
    assert fake.calls_of("chat.startStream") == []


async def test_rollover_draws_the_start_stream_budget_itself(fake: FakeSlack) -> None:
    budget = RateBudget()
    clock = Clock()
    sink = _budgeted(fake, budget, clock, streaming="native", stream_rollover_s=240, stream_starts_per_channel=False)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "part one, "))
    assert budget.granted("slack:T0001:chat.startStream") == 0
    clock.now += 241
    # the streamer pays an append for this update; the new stream needs a chat.startStream token
    assert sink.rate_key("update", _target())[0] == "slack:T0001:stream"
    await sink.update(handle, snap("streaming", "part one, part two, "))
    assert budget.granted("slack:T0001:chat.startStream") == 1
    await sink.finalize(handle, snap("done", "part one, part two, three."))
    streams = [m for m in fake.thread("C1", "100.000001") if m.stream]
    assert [m.text for m in streams] == ["part one, ", "part two, three."]


async def test_a_throttled_rollover_pauses_the_start_stream_bucket_not_the_append_bucket(fake: FakeSlack) -> None:
    budget = RateBudget()
    clock = Clock()
    # a short window: the paused bucket restarts empty and refills at the window's pace
    sink = _budgeted(fake, budget, clock, streaming="native", stream_rollover_s=240, rate_window_s=2, stream_starts_per_channel=False)
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "part one, "))
    clock.now += 241
    fake.fail("chat.startStream", "ratelimited", status=429, retry_after=0.2)
    with pytest.raises(TransientError):
        await sink.update(handle, snap("streaming", "part one, part two, "))
    assert budget.paused_for("slack:T0001:chat.startStream") > 0
    assert budget.paused_for("slack:T0001:stream") == 0  # other answers keep streaming
    await sink.finalize(handle, snap("done", "part one, part two."))  # waits out the pause, then streams the rest
    streams = [m for m in fake.thread("C1", "100.000001") if m.stream]
    assert [m.text for m in streams] == ["part one, ", "part two."]
    assert budget.granted("slack:T0001:chat.startStream") == 2
    assert len(fake.throttled("chat.startStream")) == 1 and fake.calls_of("chat.update") == []


# --- recovery after a restart -------------------------------------------------------------------


async def test_recovered_cards_are_finalized_whether_streamed_or_edited(fake: FakeSlack) -> None:
    from botgateway.sink import CardHandle

    old = _sink(fake, streaming="native")
    streamed = await old.create(_target(turn="t1"), snap("working"))
    await old.update(streamed, snap("streaming", "half an ans"))
    edited = await old.create(_target(channel="D1", thread=None, turn="t2"), snap("streaming", "half"))

    new = _sink(fake, streaming="native")  # a new process knows only what the Store kept
    note = snap("failed", error="⚠️ Interrupted because the bot restarted. Please ask again.")
    for handle in (streamed, edited):
        await new.finalize(CardHandle(card_id=handle.card_id, target=handle.target), note)
    stream_msg = fake.messages[("C1", streamed.card_id)]
    assert not stream_msg.streaming and stream_msg.text.endswith("Please ask again.")
    edit_msg = fake.messages[("D1", edited.card_id)]
    assert "Please ask again." in edit_msg.markdown() and edit_msg.buttons() == []


# --- rendering ---------------------------------------------------------------------------------


def test_stream_pieces_put_narration_tasks_and_answer_in_time_order() -> None:
    from adapters.slack.render import stream_pieces

    snapshot = snap("streaming", "Answer <!here>", part=2,
                    blocks=(Narration(round=1, text="Checking."), _tool("c1", "failed", "timed out")))
    kinds = [(kind, piece if kind == "text" else piece["status"]) for kind, piece in stream_pieces(snapshot)]
    assert kinds == [("text", "(continued, part 2)\n\n"), ("text", "Checking.\n\n"), ("task", "error"),
                     ("text", "Answer @\u200bhere")]


async def test_chinese_cards_get_a_chinese_stop_button(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="edit", locale="zh-CN")
    target = CardTarget(platform="slack", chat_id="C1", thread_id="1.1", turn_id="t", user_id="U1",
                        workspace_id="T0001", locale="zh-CN")
    handle = await sink.create(target, snap("working", locale="zh-CN"))
    message = fake.messages[("C1", handle.card_id)]
    assert message.buttons()[0]["text"]["text"] == "停止"
    assert "思考中" in message.markdown()


# --- the Stop control of native streams ---------------------------------------------------------


def _controls(fake: FakeSlack, channel: str = "C1", thread: str = "100.000001") -> list[Any]:
    return [m for m in fake.thread(channel, thread) if not m.stream and m.buttons()]


async def test_native_stream_gets_a_stop_control_drawn_from_the_post_budget_and_deleted_at_the_end(fake: FakeSlack) -> None:
    budget = RateBudget()
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    sink = SlackCardSink(client, _config(fake, streaming="native"), pacer=BudgetPacer(budget))
    target = _target()
    handle = await sink.create(target, snap("working"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    [control] = _controls(fake)
    stream = fake.messages[("C1", handle.card_id)]
    assert stream.streaming and stream.buttons() == []  # a live stream cannot carry the button itself
    [button] = control.buttons()
    assert (button["action_id"], button["value"]) == (STOP_ACTION_ID, "turn-1")
    assert "Working on it" in str(control.blocks) and control.thread_ts == "100.000001"
    assert budget.granted("slack:T0001:post:C1") == 1  # the channel's chat.postMessage bucket paid for it

    await sink.update(handle, snap("streaming", "Hello"))
    await sink.finalize(handle, snap("done", "Hello."))
    assert _controls(fake) == [] and [m.ts for m in fake.deleted] == [control.ts]
    assert stream.text == "Hello." and not stream.streaming
    assert fake.calls_of("chat.update") == []
    await sink.aclose()


async def test_a_control_still_waiting_for_the_post_budget_is_never_posted(fake: FakeSlack) -> None:
    budget = RateBudget()
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, timeout=5)
    sink = SlackCardSink(client, _config(fake, streaming="native"), pacer=BudgetPacer(budget))
    key, limit = sink.rate_key("fallback", _target())  # the channel's chat.postMessage bucket
    await budget.acquire(key, limit, "another-card")  # another card in the channel took the token…
    budget.pause(key, 60)  # …and Slack asked us to slow down there
    handle = await sink.create(_target(), snap("working"))
    await sink.update(handle, snap("streaming", "Quick"))
    await sink.finalize(handle, snap("done", "Quick answer."))
    assert budget.waiting("slack:T0001:post:C1") == 0  # the control gave up its place in line
    assert fake.calls_of("chat.postMessage") == [] and fake.calls_of("chat.delete") == []
    assert fake.messages[("C1", handle.card_id)].text == "Quick answer."
    await sink.aclose()


async def test_failing_to_post_the_control_does_not_stop_the_stream(fake: FakeSlack) -> None:
    fake.fail("chat.postMessage", "restricted_action")
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_target(), snap("working"))
    await fake.wait_for(lambda: len(fake.calls_of("chat.postMessage")) == 1)
    await sink.update(handle, snap("streaming", "Still "))
    await sink.finalize(handle, snap("done", "Still streaming."))
    assert fake.messages[("C1", handle.card_id)].text == "Still streaming."
    assert _controls(fake) == [] and fake.calls_of("chat.delete") == []
    await sink.aclose()


async def test_throttled_control_post_is_retried(fake: FakeSlack) -> None:
    fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=0.05)
    budget = RateBudget()
    sink = _sink(fake, streaming="native", post_rate_per_s=20, pacer=BudgetPacer(budget))
    await sink.create(_target(), snap("working"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    assert len(fake.throttled("chat.postMessage")) == 1
    assert budget.granted("slack:T0001:post:C1") == 2  # the pacer paid for the retry too
    await sink.aclose()
    assert _controls(fake) == []  # a card that never ended loses its control when the adapter stops


async def test_one_control_serves_every_part_of_a_long_answer(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    target = _target()
    first = await sink.create(target, snap("working"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    await sink.finalize(first, snap("done", "part one", continued=True))
    assert len(_controls(fake)) == 1  # the answer goes on in the next part
    second = await sink.create(target, snap("streaming", "part two", part=2))
    await sink.finalize(second, snap("done", "part two.", part=2))
    assert len(fake.calls_of("chat.postMessage")) == 1
    assert _controls(fake) == [] and len(fake.deleted) == 1


async def test_stream_turning_into_an_edited_message_drops_the_control_for_its_own_button(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    handle = await sink.create(_target(), snap("working"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    fake.fail("chat.appendStream", "internal_error", status=500)
    await sink.update(handle, snap("streaming", "Hello"))
    message = fake.messages[("C1", handle.card_id)]
    assert [b["value"] for b in message.buttons()] == ["turn-1"]  # the edited card has the button now
    assert _controls(fake) == [] and len(fake.deleted) == 1
    await sink.finalize(handle, snap("done", "Hello!"))
    assert message.buttons() == []


async def test_control_that_cannot_be_deleted_loses_its_button(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native", locale="zh-CN")
    target = CardTarget(platform="slack", chat_id="C1", thread_id="100.000001", turn_id="t", user_id="U1",
                        workspace_id="T0001", locale="zh-CN")
    handle = await sink.create(target, snap("working", locale="zh-CN"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    [control] = _controls(fake)
    assert control.buttons()[0]["text"]["text"] == "停止" and "正在处理" in str(control.blocks)
    fake.fail("chat.delete", "cant_delete_message")
    await sink.finalize(handle, snap("done", "好的。", locale="zh-CN"))
    assert control.buttons() == [] and "已经结束" in str(control.blocks)
    assert fake.deleted == []


async def test_fallback_takes_the_control_away(fake: FakeSlack) -> None:
    sink = _sink(fake, streaming="native")
    target = _target()
    await sink.create(target, snap("working"))
    await fake.wait_for(lambda: len(_controls(fake)) == 1)
    fake.messages = {k: m for k, m in fake.messages.items() if not m.stream}  # the stream vanished
    await sink.fallback(target, snap("done", "The answer, posted plainly."))
    assert _controls(fake) == [] and len(fake.deleted) == 1
    assert any(m.markdown() == "The answer, posted plainly." for m in fake.thread("C1", "100.000001"))
