"""CardStreamer, BufferPolicy and RateBudget against the fake card API over HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable

import pytest

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.budget import RateBudget, RateLimit
from botgateway.cards.buffer_policy import BufferPolicy, PhaseRule
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.config import BufferPolicyConfig, PhasePolicy
from botgateway.events import (
    AnswerDelta,
    RoundStarted,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnResult,
)
from botgateway.sink import CardTarget
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.card_api import FakeCardAPI, HttpCardSink
from tests.fakes.gateway import RecordingSink
from tests.parked import parked

FAST = RateLimit(rate_per_s=1000.0, burst=100)
"""A budget that never gets in the way (for tests about something else)."""

LONG_ANSWER = " ".join(f"word{i:03d}" for i in range(110)) + "."  # ~880 characters


def streamer(
    sink: HttpCardSink,
    *,
    turn: str = "t1",
    policy: BufferPolicy | None = None,
    budget: RateBudget | None = None,
    state: CardState | None = None,
    deadline: float = 5.0,
    store: SqliteStore | None = None,
    unpaced: bool = False,
    late_close_s: float = 10.0,
    background: BackgroundTasks | None = None,
) -> CardStreamer:
    return CardStreamer(
        sink,
        CardTarget(platform="fake", chat_id="chat-1", turn_id=turn, user_id="u1"),
        policy=policy or BufferPolicy.from_config(),
        budget=None if unpaced else (budget or RateBudget()),
        state=state or CardState(model_label="demo model"),
        timing=StreamerTiming(
            final_deadline_s=deadline,
            backoff=Backoff(base_s=0.02, max_s=0.2),
            late_close_s=late_close_s,
            late_backoff=Backoff(base_s=0.02, max_s=0.1),
        ),
        store=store,
        background=background,
    )


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Yield to the loop until ``predicate`` holds (no timed sleeps)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0)


# --- BufferPolicy ---------------------------------------------------------------


def test_policy_from_config_defaults_are_the_reference_policy() -> None:
    policy = BufferPolicy.from_config(BufferPolicyConfig())
    assert policy.tool == PhaseRule(min_chars=5, min_interval_s=0.1, max_wait_s=0.5)
    assert policy.answer.min_chars == 20 and policy.answer.min_interval_s == 0.3
    custom = BufferPolicy.from_config(BufferPolicyConfig(answer=PhasePolicy(min_chars=50, min_interval_s=1.0, max_wait_s=2.0)))
    assert custom.rule("answer") == PhaseRule(50, 1.0, 2.0)
    assert BufferPolicy.final_only().live is False


# --- acceptance: a stalled stream still shows what it has -----------------------


async def test_stream_stalled_after_three_characters_shows_them_within_max_wait() -> None:
    policy = BufferPolicy.from_config()  # answer: 20 chars / 300 ms, max_wait 1 s
    async with FakeCardAPI(latency_s=0.01) as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, policy=policy)
        await card.start()
        stall_over = asyncio.Event()

        async def model() -> None:
            await card.feed(RoundStarted(round=1, max_rounds=8))
            await card.feed(AnswerDelta(text="Hel"))
            await stall_over.wait()  # the stream stalls here until the test has seen "Hel" on the card
            await card.feed(AnswerDelta(text="lo there."))
            await card.feed(TurnDone(result=TurnResult(answer="Hello there.")))

        task = asyncio.create_task(model())
        # Only the max_wait timer (1 s) can show them while the stream stalls; the stall lasts 5 s
        # at most, room a busy machine does not eat, and the characters must reach the card before it ends.
        await api.wait_for(lambda a: any(c.answer == "Hel" for c in a.calls_of("update")), timeout=5.0)
        assert not stall_over.is_set()
        stall_over.set()
        await task
        metrics = await card.finish()
    assert api.cards_for("t1")[0].answer == "Hello there."
    assert metrics.first_token_to_visible_s is not None and metrics.first_token_to_visible_s < 5.0


async def test_max_wait_timer_flushes_pending_text_mid_answer() -> None:
    # min_chars is never reached by the trailing 3 characters: only the max_wait timer can show them.
    policy = BufferPolicy.from_config(
        BufferPolicyConfig(answer=PhasePolicy(min_chars=20, min_interval_s=0.05, max_wait_s=0.4))
    )
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, policy=policy)
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(AnswerDelta(text="The first twenty-five chars"))
        await api.wait_for(lambda a: any(c.answer == "The first twenty-five chars" for c in a.calls_of("update")))
        fed_at = time.monotonic()
        await card.feed(AnswerDelta(text=" ok"))
        await api.wait_for(lambda a: any(c.answer.endswith(" ok") for c in a.calls_of("update")))
        seen = next(c for c in api.calls_of("update") if c.answer.endswith(" ok"))
        assert seen.arrived_at - fed_at >= 0.3  # it was the timer, not the char threshold
        await card.feed(TurnDone(result=TurnResult(answer="The first twenty-five chars ok")))
        await card.finish()


async def test_tool_status_lines_show_promptly_and_phase_change_flushes() -> None:
    # max_wait of 10 s everywhere: only the tool rule (5 chars / 100 ms) and phase changes can flush.
    slow = PhasePolicy(min_chars=10_000, min_interval_s=0.1, max_wait_s=10.0)
    policy = BufferPolicy.from_config(
        BufferPolicyConfig(thinking=slow, answer=slow, tool=PhasePolicy(min_chars=5, min_interval_s=0.1, max_wait_s=10.0))
    )
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, policy=policy)
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(ThoughtDelta(text="need the inventory"))
        await card.feed(ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}))
        await api.wait_for(lambda a: any("🔧 inventory_lookup ip=10.0.1.100" in c.text for c in a.calls_of("update")), timeout=5.0)
        await card.feed(ToolCallFinished(call_id="c1", name="inventory_lookup", ok=True, summary="1 host found", duration_s=0.8))
        await api.wait_for(lambda a: any("✅ inventory_lookup · 0.8 s · 1 host found" in c.text for c in a.calls_of("update")), timeout=5.0)
        await card.feed(RoundStarted(round=2, max_rounds=8))
        await card.feed(AnswerDelta(text="web-01"))  # tool → answer: a phase change flushes at once
        await api.wait_for(lambda a: any(c.answer == "web-01" for c in a.calls_of("update")), timeout=5.0)
        await card.feed(TurnDone(result=TurnResult(answer="web-01")))
        await card.finish()


# --- one update in flight, latest wins ------------------------------------------


async def test_latest_wins_while_an_update_is_in_flight() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        gate = api.hold("update")
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(AnswerDelta(text="w0 "))
        await asyncio.wait_for(gate.arrived.wait(), 5)
        text = "w0 "
        for i in range(1, 60):
            await card.feed(AnswerDelta(text=f"w{i} "))
            text += f"w{i} "
        # Still one update in flight: nothing else was sent while it is slow.
        assert len(api.calls_of("update")) == 1
        gate.release()
        await api.wait_for(lambda a: len([c for c in a.calls_of("update") if c.ok]) >= 2)
        assert api.calls_of("update")[1].answer == text  # the next update carries the newest text
        await card.feed(TurnDone(result=TurnResult(answer=text)))
        metrics = await card.finish()
    assert len(api.calls_of("update")) <= 3 < metrics.events
    assert metrics.coalesced > 0
    assert api.cards_for("t1")[0].answer == text


# --- acceptance: throttled final updates still land -------------------------------


async def test_final_update_throttled_three_times_still_lands_complete() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("finalize", 429, times=3, retry_after=0.05)
        card = streamer(sink)
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        for piece in chunks(LONG_ANSWER[:300], 7):
            await card.feed(AnswerDelta(text=piece))
        await card.feed(TurnDone(result=TurnResult(answer=LONG_ANSWER[:300])))
        metrics = await card.finish()
    finals = api.calls_of("finalize")
    assert [c.status for c in finals] == [429, 429, 429, 200]
    # Retry-After was honoured: no attempt came back before the platform allowed it.
    gaps = [b.arrived_at - a.arrived_at for a, b in itertools.pairwise(finals)]
    assert min(gaps) >= 0.045
    shown = api.cards_for("t1")[0]
    assert shown.finalized and shown.answer == LONG_ANSWER[:300] and shown.snapshot["status"] == "done"
    assert metrics.throttles == 3 and metrics.retries >= 3
    assert metrics.delivered and not metrics.fallback_used and api.messages == []


async def test_throttled_create_pauses_the_bucket_and_the_card_still_streams() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("create", 429, times=2, retry_after=0.1)
        budget = RateBudget()
        card = streamer(sink, budget=budget)
        await card.start()
        creates = api.calls_of("create")
        assert [c.status for c in creates] == [429, 429, 200]
        assert creates[2].arrived_at - creates[1].arrived_at >= 0.09  # paused, not hammered
        await card.feed(AnswerDelta(text="still here"))
        await card.feed(TurnDone(result=TurnResult(answer="still here")))
        metrics = await card.finish()
    assert api.cards_for("t1")[0].answer == "still here" and metrics.throttles == 2


async def test_dingtalk_style_403_qps_limit_counts_as_a_throttle() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("update", 403, times=1, body={"code": "Forbidden.AccessDenied.QpsLimitForApi"})
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        await card.feed(AnswerDelta(text="first"))
        await api.wait_for(lambda a: any(c.status == 403 for c in a.calls))
        await card.feed(AnswerDelta(text=" second"))
        await api.wait_for(lambda a: any(c.ok and c.answer == "first second" for c in a.calls_of("update")))
        await card.feed(TurnDone(result=TurnResult(answer="first second")))
        metrics = await card.finish()
    assert metrics.throttles == 1 and api.cards_for("t1")[0].answer == "first second"


async def test_transient_errors_are_retried_with_backoff() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("create", 502, times=1)
        api.fail("update", 500, times=2)
        api.fail("finalize", 503, times=2)
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        for piece in chunks("a transient failure is retried", 5):
            await card.feed(AnswerDelta(text=piece))
        await card.feed(TurnDone(result=TurnResult(answer="a transient failure is retried")))
        metrics = await card.finish()
    assert api.cards_for("t1")[0].answer == "a transient failure is retried"
    assert api.cards_for("t1")[0].finalized
    assert metrics.retries >= 3 and not metrics.fallback_used


async def test_final_deadline_passes_then_fallback_message_delivers() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("finalize", 500, times=10_000)
        card = streamer(sink, deadline=1.5)  # room for two failing attempts on a busy machine
        await card.start()
        await card.feed(AnswerDelta(text="the answer"))
        await card.feed(TurnDone(result=TurnResult(answer="the answer is 42")))
        metrics = await card.finish()
        await card.aclose()  # the card itself is never finalized here: stop trying
    assert len(api.calls_of("finalize")) >= 2  # retried, not given up at once
    assert [m.answer for m in api.messages] == ["the answer is 42"]
    assert "the answer is 42" in api.messages[0].text
    assert metrics.fallback_used and metrics.delivered


async def test_card_gone_stops_live_updates_and_falls_back_at_the_end() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        assert card.handle is not None
        api.expire(card.handle.card_id)
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(AnswerDelta(text="The answer "))
        await api.wait_for(lambda a: any(c.status == 404 for c in a.calls_of("update")))
        for piece in chunks("is 42, and here is why.", 3):
            await card.feed(AnswerDelta(text=piece))
        await card.feed(TurnDone(result=TurnResult(answer="The answer is 42, and here is why.")))
        metrics = await card.finish()
    assert len(api.calls_of("update")) == 1  # no more live updates once the card is gone
    assert api.calls_of("finalize") == []
    assert len(api.messages) == 1
    assert api.messages[0].answer == "The answer is 42, and here is why."
    assert api.messages[0].status == "done"
    assert metrics.fallback_used and metrics.delivered


# --- no card spins forever: closing the card after a fallback delivery -----------

NOTE = {"en": "The full answer was posted as a new message below.", "zh-CN": "完整回答已作为新消息发在下方"}


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_card_left_live_by_a_fallback_is_closed_later_with_a_note(tmp_path, locale: str) -> None:
    store = SqliteStore(tmp_path / "state.db")
    try:
        async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
            api.fail("finalize", 500, times=10_000)  # the platform cannot finalize cards for a while
            budget = RateBudget()
            card = streamer(sink, deadline=0.3, store=store, state=CardState(locale=locale), budget=budget)
            await card.start()
            card_id = card.handle.card_id
            key = sink.rate_key("finalize", card.target)[0]
            assert budget.reserved(key) == 1  # the open card keeps a call for its final
            await card.feed(RoundStarted(round=1, max_rounds=8))
            await card.feed(AnswerDelta(text="the answer"))
            await api.wait_for(lambda a: any(c.answer == "the answer" for c in a.calls_of("update")))
            await card.feed(TurnDone(result=TurnResult(answer="the answer is 42")))
            metrics = await card.finish()
            # The answer arrived, as a new message…
            assert [m.answer for m in api.messages] == ["the answer is 42"]
            assert metrics.fallback_used and metrics.delivered
            # …while the card still shows its live state and stays on record, being closed in the background,
            # on the call it reserved (kept until closing ends).
            assert card.closing and not api.cards[card_id].finalized
            assert budget.reserved(key) == 1
            tried = len(api.calls_of("finalize"))
            await api.wait_for(lambda a: len(a.calls_of("finalize")) >= tried + 2)  # late attempts, failing
            assert not api.cards[card_id].finalized
            assert [c.card_id for c in await store.open_cards()] == [card_id]
            api.clear_failures("finalize")  # the platform recovers
            assert await card.wait_closed(timeout=5)
            assert not card.closing and budget.reserved(key) == 0
        shown = api.cards[card_id]
        assert shown.finalized and shown.status == "done" and shown.answer == ""
        assert NOTE[locale] in shown.text and "▌" not in shown.text
        assert shown.seq > api.calls_of("update")[-1].body["snapshot"]["seq"]
        assert api.messages[0].visible_at <= shown.finalized_at
        assert await store.open_cards() == []  # removed only now that the card is final
    finally:
        await store.close()


async def test_card_that_cannot_be_closed_stays_on_record_for_start_up_recovery(tmp_path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    try:
        async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
            api.fail("finalize", 503, times=10_000)
            card = streamer(sink, deadline=0.2, store=store, late_close_s=2.0)  # room for three failing attempts on a busy machine
            await card.start()
            await card.feed(AnswerDelta(text="ok"))
            await card.feed(TurnDone(result=TurnResult(answer="ok")))
            await card.finish()
            assert await card.wait_closed(timeout=5) is False  # gave up after late_close_s
            tried = len(api.calls_of("finalize"))
        assert tried >= 3 and api.messages[0].answer == "ok"
        assert [c.turn_id for c in await store.open_cards()] == ["t1"]
    finally:
        await store.close()


async def test_closing_after_a_lost_fallback_puts_the_answer_on_the_card(tmp_path) -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        api.fail("finalize", 500, times=10_000)
        api.fail("fallback", 500, times=10_000)
        card = streamer(sink, deadline=0.2)
        await card.start()
        await card.feed(AnswerDelta(text="the answer"))
        await card.feed(TurnDone(result=TurnResult(answer="the answer is 42")))
        metrics = await card.finish()
        assert not metrics.delivered and api.messages == []
        api.clear_failures()
        assert await card.wait_closed(timeout=5)
    shown = api.cards_for("t1")[0]
    assert shown.finalized and shown.answer == "the answer is 42" and shown.status == "done"


async def test_shutdown_cancels_background_closing_and_keeps_the_record(tmp_path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    background = BackgroundTasks()
    try:
        async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
            api.fail("finalize", 500, times=10_000)
            card = streamer(sink, deadline=0.2, store=store, late_close_s=600, background=background)
            await card.start()
            await card.feed(TurnDone(result=TurnResult(answer="bye")))
            await card.finish()
            assert card.closing and len(background) == 1
            await asyncio.wait_for(background.aclose(), 5)  # does not wait the 600 s out
            assert not card.closing and len(background) == 0
            assert await card.wait_closed() is False
            assert background.spawn(asyncio.sleep(0)) is None  # closed: starts nothing more
        assert len(await store.open_cards()) == 1  # start-up recovery closes it
    finally:
        await store.close()


class HoldingSqlite(SqliteStore):
    """A real SQLite store that can keep a write transaction open until told: every other write waits behind it."""

    async def hold_a_write(self, inside: asyncio.Event, release: asyncio.Event) -> None:
        async def work(db: object) -> None:
            inside.set()
            await release.wait()

        await self._transaction(work)


async def test_the_first_text_does_not_wait_for_the_open_card_record(tmp_path) -> None:
    store = HoldingSqlite(tmp_path / "state.db")
    await store.open()  # both connections: a read never waits for the write held below
    inside, release = asyncio.Event(), asyncio.Event()
    try:
        async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
            holding = asyncio.create_task(store.hold_a_write(inside, release))
            await inside.wait()  # the Store is busy: its writes queue (a burst of dedupe claims, say)
            card = streamer(sink, store=store)
            await card.start(wait=False)
            await card.feed(RoundStarted(round=1, max_rounds=8))
            await card.feed(AnswerDelta(text="the first words"))
            await api.wait_for(lambda a: any(c.answer == "the first words" for c in a.calls_of("update")))
            assert await store.open_cards() == []  # the record is still waiting for the Store (reads do not)
            release.set()
            await holding
            async with asyncio.timeout(5):
                while not await store.open_cards():  # written behind the card, once the Store is free
                    await asyncio.sleep(0)
            await card.feed(TurnDone(result=TurnResult(answer="the first words, and the rest")))
            await card.finish()
            assert api.cards_for("t1")[0].finalized
        assert await store.open_cards() == []  # removed once the card was final
    finally:
        release.set()
        await store.close()


async def test_the_first_text_goes_out_at_the_workers_next_turn_of_the_event_loop() -> None:
    """On a busy loop every turn is long: the first text is sent as soon as the card's worker runs, not a turn
    later; the updates after it still let the feeders run first (they carry what came meanwhile)."""
    sink = RecordingSink()
    card = streamer(sink)  # type: ignore[arg-type]
    await card.start()
    await card.feed(RoundStarted(round=1, max_rounds=8))
    await card.feed(AnswerDelta(text="the first words"))
    await asyncio.sleep(0)  # one turn: the worker wakes and sends
    assert [c.snapshot.answer for c in sink.calls if c.op == "update"] == ["the first words"]
    await card.feed(TurnDone(result=TurnResult(answer="the first words")))
    await card.finish()
    assert sink.ops("t1") == ["create", "update", "finalize"]


# --- continuation parts ------------------------------------------------------------


async def test_long_answer_continues_in_new_cards_with_nothing_lost(tmp_path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    try:
        async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST, max_chars=200) as sink:
            state = CardState()
            card = streamer(sink, policy=BufferPolicy.every_chunk(), state=state, store=store)
            await card.start()
            open_cards = await store.open_cards("fake")
            assert [c.card_id for c in open_cards] == [card.handle.card_id]
            assert open_cards[0].target["turn_id"] == "t1"
            await card.feed(RoundStarted(round=1, max_rounds=8))
            await card.feed(ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}))
            await card.feed(ToolCallFinished(call_id="c1", name="inventory_lookup", ok=True, summary="1 host found", duration_s=0.5))
            await card.feed(RoundStarted(round=2, max_rounds=8))
            for piece in chunks(LONG_ANSWER, 9):
                await card.feed(AnswerDelta(text=piece))
            await api.wait_for(lambda a: len(a.calls_of("create")) >= 3)  # rolled over while streaming
            await card.feed(TurnDone(result=TurnResult(answer=LONG_ANSWER)))
            metrics = await card.finish()
        assert await store.open_cards() == []
    finally:
        await store.close()
    parts = api.cards_for("t1")
    assert [p.part for p in parts] == list(range(1, len(parts) + 1))
    assert len(parts) >= 5 and metrics.parts == len(parts)
    assert all(p.finalized for p in parts)
    assert "".join(p.answer for p in parts) == LONG_ANSWER
    assert all(len(p.answer) <= 200 for p in parts)
    assert all(p.answer.endswith(" ") for p in parts[:-1])  # cut between words
    assert all(p.snapshot["continued"] for p in parts[:-1]) and not parts[-1].snapshot["continued"]
    assert parts[0].snapshot["blocks"][0]["name"] == "inventory_lookup"
    assert parts[-1].snapshot["footer"] and not parts[0].snapshot["footer"]
    assert not metrics.fallback_used


async def test_final_only_long_answer_is_split_at_the_end() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST, max_chars=300) as sink:
        card = streamer(sink, policy=BufferPolicy.final_only())
        await card.start()
        assert api.calls == []  # no streaming: nothing is sent before the end
        await card.feed(AnswerDelta(text=LONG_ANSWER[:100]))
        await card.feed(TurnDone(result=TurnResult(answer=LONG_ANSWER)))
        metrics = await card.finish()
    assert api.calls_of("update") == []
    assert api.delivered_answer("t1") == LONG_ANSWER
    assert metrics.parts == len(api.cards_for("t1")) >= 3


async def test_too_long_answer_from_the_platform_splits_smaller() -> None:
    # The sink claims 2,000 characters but the platform refuses bodies over 400.
    async with FakeCardAPI(max_text=400) as api, HttpCardSink(api.base_url, rate=FAST, max_chars=2000) as sink:
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        for piece in chunks(LONG_ANSWER, 40):
            await card.feed(AnswerDelta(text=piece))
        await card.feed(TurnDone(result=TurnResult(answer=LONG_ANSWER)))
        metrics = await card.finish()
    assert any(c.status == 413 for c in api.calls)
    assert api.delivered_answer("t1") == LONG_ANSWER
    assert metrics.delivered and metrics.parts >= 3


# --- stop, queue, idempotent finish -----------------------------------------------


async def test_finish_after_cancellation_shows_stopped_with_partial_answer() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        state = CardState()
        card = streamer(sink, policy=BufferPolicy.every_chunk(), state=state)
        await card.start()

        async def turn() -> None:
            await card.feed(RoundStarted(round=1, max_rounds=8))
            await card.feed(AnswerDelta(text="partial answer"))
            await asyncio.Event().wait()  # the model hangs until stopped

        task = asyncio.create_task(turn())
        await api.wait_for(lambda a: any(c.answer == "partial answer" for c in a.calls_of("update")))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        state.mark_stopped()
        # A cancelled finish() does not stop the delivery of the final card.
        first = await parked(card.finish())  # waiting for the final card to be delivered
        first.cancel()
        await api.wait_for(lambda a: any(c.finalized for c in a.cards.values()))
        metrics = await card.finish()
        again = await card.finish()
    shown = api.cards_for("t1")[0]
    assert shown.snapshot["status"] == "stopped" and shown.answer == "partial answer"
    assert "⏹ Stopped." in shown.text and "▌" not in shown.text
    assert again is metrics and len(api.calls_of("finalize")) == 1


async def test_finish_without_a_final_event_marks_the_card_failed() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink)
        await card.start()
        await card.feed(AnswerDelta(text="half"))
        await card.finish()
    shown = api.cards_for("t1")[0]
    assert shown.finalized and shown.snapshot["status"] == "failed" and shown.answer == "half"


async def test_queued_card_then_refresh_when_the_turn_starts() -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        state = CardState(locale="zh-CN")
        state.mark_queued(1)
        card = streamer(sink, state=state)
        await card.start()
        created = api.calls_of("create")[0]
        assert created.body["snapshot"]["status"] == "queued" and "正在等待上一个问题完成" in created.text
        state.mark_started()
        await card.refresh()
        await api.wait_for(lambda a: any(c.body["snapshot"]["status"] == "working" for c in a.calls_of("update")))
        await card.feed(TurnDone(result=TurnResult(answer="好的")))
        await card.finish()
    assert api.cards_for("t1")[0].answer == "好的"


# --- the shared rate budget ----------------------------------------------------------


async def test_budget_serves_owners_round_robin() -> None:
    budget = RateBudget()
    limit = RateLimit(rate_per_s=40.0, burst=1)
    order: list[str] = []

    async def take(owner: str) -> None:
        await budget.acquire("k", limit, owner)
        order.append(owner)

    await budget.acquire("k", limit, "warm-up")  # empty the bucket
    chatty = [asyncio.create_task(take("chatty")) for _ in range(8)]
    await until(lambda: budget.waiting("k") == 8)
    quiet = asyncio.create_task(take("quiet"))
    await until(lambda: budget.waiting("k") == 9)
    await asyncio.gather(*chatty, quiet)
    # FIFO alone would serve "quiet" ninth; round-robin serves it second.
    assert order.index("quiet") <= 1
    assert budget.granted("k") == 10


async def test_budget_serves_priority_calls_before_live_updates() -> None:
    budget = RateBudget()
    limit = RateLimit(rate_per_s=40.0, burst=1)
    order: list[str] = []

    async def take(owner: str, priority: bool) -> None:
        await budget.acquire("k", limit, owner, priority=priority)
        order.append(owner)

    await budget.acquire("k", limit, "warm-up")
    live = [asyncio.create_task(take(f"live{i}", False)) for i in range(4)]
    await until(lambda: budget.waiting("k") == 4)
    final = asyncio.create_task(take("final", True))
    await asyncio.gather(*live, final)
    assert order[0] == "final"


async def test_budget_pause_holds_every_owner_and_cancel_leaves_the_line() -> None:
    budget = RateBudget()
    limit = RateLimit(rate_per_s=100.0, burst=5)
    assert await budget.acquire("k", limit, "a") == 0.0
    budget.pause("k", 0.2)
    assert budget.paused_for("k") > 0.1
    waiter = asyncio.create_task(budget.acquire("k", limit, "b"))
    gone = asyncio.create_task(budget.acquire("k", limit, "c"))
    await until(lambda: budget.waiting("k") == 2)
    gone.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await gone
    assert budget.waiting("k") == 1
    waited = await asyncio.wait_for(waiter, 10)
    assert waited >= 0.15  # the pause was honoured
    assert budget.granted("k") == 2


async def test_budget_dispatcher_ends_when_its_last_waiter_leaves_a_long_pause() -> None:
    budget = RateBudget()
    limit = RateLimit(rate_per_s=1.0, burst=1)
    await budget.acquire("slow", limit, "a")
    budget.pause("slow", 60.0)  # a Slack Retry-After: nobody should sit out this minute
    waiter = asyncio.create_task(budget.acquire("slow", limit, "b"))
    await until(lambda: budget.waiting("slow") == 1)

    def dispatchers() -> list[asyncio.Task[object]]:
        return [t for t in asyncio.all_tasks() if t.get_name() == "rate-budget:slow" and not t.done()]

    running = dispatchers()
    assert running
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    _, stuck = await asyncio.wait(running, timeout=10.0)
    assert not stuck and not dispatchers()  # not stuck for the rest of the pause
    assert budget.waiting("slow") == 0 and budget.granted("slow") == 1


async def test_budget_is_fair_between_two_cards_on_one_key() -> None:
    # A card streaming on every chunk and a quiet card share a slow bucket: the quiet card still gets through.
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=RateLimit(10.0, 1)) as sink:
        budget = RateBudget()
        chatty = streamer(sink, turn="chatty", policy=BufferPolicy.every_chunk(), budget=budget)
        quiet = streamer(sink, turn="quiet", policy=BufferPolicy.every_chunk(), budget=budget)
        await chatty.start()
        await quiet.start()
        stop = asyncio.Event()

        async def flood() -> None:
            i = 0
            while not stop.is_set():
                await chatty.feed(AnswerDelta(text=f"c{i} "))
                i += 1
                await asyncio.sleep(0.005)  # the model's token rate

        task = asyncio.create_task(flood())
        await api.wait_for(lambda a: len(a.calls_of("update")) >= 2)
        await quiet.feed(AnswerDelta(text="quiet one"))
        await api.wait_for(lambda a: any(c.answer == "quiet one" for c in a.calls_of("update")), timeout=10.0)
        await quiet.feed(TurnDone(result=TurnResult(answer="quiet one")))
        await asyncio.wait_for(quiet.finish(), 10.0)
        stop.set()
        await task
        await chatty.feed(TurnDone(result=TurnResult(answer="done")))
        await chatty.finish()
    assert api.cards_for("quiet")[0].answer == "quiet one"
    # Both cards used the bucket; the chatty one could not take it all.
    by_turn = [c.body["target"]["turn_id"] for c in api.calls if c.op in ("update", "finalize")]
    assert by_turn.count("quiet") >= 2 and by_turn.count("chatty") >= 2


def _run_turns(api: FakeCardAPI, sink: HttpCardSink, *, n: int, policy: BufferPolicy, unpaced: bool, pace_s: float):
    budget = RateBudget()

    async def one(i: int):
        answer = " ".join(f"t{i}w{k}" for k in range(50)) + "."
        card = streamer(sink, turn=f"t{i}", policy=policy, budget=budget, unpaced=unpaced, deadline=10.0)
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=4))
        for piece in chunks(answer, 8):
            await card.feed(AnswerDelta(text=piece))
            await asyncio.sleep(pace_s)  # the model's token rate
        await card.feed(TurnDone(result=TurnResult(answer=answer)))
        return answer, await card.finish()

    return asyncio.gather(*(one(i) for i in range(n)))


async def test_many_cards_at_20_qps_never_get_throttled_and_all_answers_land() -> None:
    async with FakeCardAPI(rate_per_s=20, burst=20, latency_s=0.01, jitter_s=0.02) as api:
        async with HttpCardSink(api.base_url, rate=RateLimit(rate_per_s=18.0, burst=4)) as sink:
            results = await _run_turns(api, sink, n=24, policy=BufferPolicy.from_config(), unpaced=False, pace_s=0.04)
    assert api.rate_limited == 0
    for i, (answer, metrics) in enumerate(results):
        assert api.delivered_answer(f"t{i}") == answer
        assert metrics.delivered and not metrics.fallback_used and metrics.throttles == 0
    # Within our own declared budget (18/s, burst 4), give or take network jitter.
    assert api.max_in_window(1.0, bucket="update") <= 18 + 4 + 2
    # Every card streamed: live updates go least-served first, so the shared budget starved none of them
    # (though a first live update is not urgent: it never goes before another card's final).
    assert all(m.api_calls.get("update", 0) >= 1 for _, m in results)
    assert all(m.first_token_to_visible_s is not None for _, m in results)


async def test_unpaced_updates_on_every_chunk_get_throttled_by_the_same_fake() -> None:
    # The contrast: without the budget the same traffic hits 429s (and still delivers, by retrying after them).
    async with FakeCardAPI(rate_per_s=20, burst=20, latency_s=0.01) as api:
        async with HttpCardSink(api.base_url, rate=RateLimit(rate_per_s=18.0, burst=4)) as sink:
            results = await _run_turns(api, sink, n=24, policy=BufferPolicy.every_chunk(), unpaced=True, pace_s=0.02)
    assert api.rate_limited > 0
    assert sum(m.throttles for _, m in results) > 0
    for i, (answer, _) in enumerate(results):
        assert api.delivered_answer(f"t{i}") == answer


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_metrics_are_reported(locale: str) -> None:
    async with FakeCardAPI() as api, HttpCardSink(api.base_url, rate=FAST) as sink:
        card = streamer(sink, state=CardState(locale=locale))
        await card.start()
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(ThoughtDelta(text="hmm"))
        await card.feed(AnswerDelta(text="yes"))
        await card.feed(TurnDone(result=TurnResult(answer="yes")))
        metrics = await card.finish()
    assert metrics.api_calls["create"] == 1 and metrics.api_calls["finalize"] == 1
    assert metrics.first_token_to_visible_s is not None
    assert metrics.final_delivery_s is not None and metrics.parts == 1 and metrics.delivered
    assert metrics.to_dict()["total_calls"] == metrics.total_calls == len(api.calls)


async def test_a_live_update_refused_as_too_long_aims_below_what_was_sent_not_what_streamed_in_meanwhile() -> None:
    # The platform refuses bodies over 400 characters; the sink claims 2,000.
    async with FakeCardAPI(max_text=400) as api, HttpCardSink(api.base_url, rate=FAST, max_chars=2000) as sink:
        card = streamer(sink, policy=BufferPolicy.every_chunk())
        await card.start()
        gate = api.hold("update")
        await card.feed(RoundStarted(round=1, max_rounds=8))
        await card.feed(AnswerDelta(text=LONG_ANSWER[:600]))
        await asyncio.wait_for(gate.arrived.wait(), 5)
        # While the 600-character update is in flight, the rest of the answer streams in.
        await card.feed(AnswerDelta(text=LONG_ANSWER[600:]))
        gate.release()
        await api.wait_for(lambda a: any(c.status == 413 for c in a.calls))
        # The card rolls over into part 2 while the turn still streams.
        await api.wait_for(lambda a: len([c for c in a.calls_of("create") if c.ok]) >= 2)
        await card.feed(TurnDone(result=TurnResult(answer=LONG_ANSWER)))
        metrics = await card.finish()
    assert metrics.delivered
    assert api.delivered_answer("t1") == LONG_ANSWER  # every character reached the user, in order
    # The 600 characters refused aim the part at 0.75 × 600 = 450: cut cleanly at 448, refused once more (over
    # 400), then 336 fits. Aiming below the whole answer (880) instead would cost two more refused calls.
    refused = [(c.op, c.answer_len) for c in api.calls if c.status == 413]
    assert refused == [("update", 600), ("finalize", 448)], refused
    assert [(c.op, c.answer_len) for c in api.calls if c.status == 200] == [
        ("create", 0), ("finalize", 336), ("create", 336), ("finalize", 336), ("create", 208), ("finalize", 208),
    ]
    assert len(api.calls) == 8
