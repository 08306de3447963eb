"""CardState: the fold of turn events into what the card shows."""

from __future__ import annotations

from botgateway.cards.state import CardState
from botgateway.events import (
    AnswerDelta,
    RoundStarted,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnFailed,
    TurnResult,
    Usage,
    UsageReported,
)
from botgateway.snapshot import Narration, ToolLine


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tool_round(state: CardState) -> None:
    for event in (
        RoundStarted(round=1, max_rounds=8),
        ThoughtDelta(text="The user wants the host behind an IP. "),
        AnswerDelta(text="Let me look that up."),
        ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}),
        ToolCallStarted(call_id="c2", name="aws_find", arguments={"ip": "10.0.1.100", "region": "us-east-1", "filters": {"a": 1}}),
    ):
        state.apply(event)


def test_round_text_becomes_narration_when_the_round_calls_a_tool() -> None:
    state = CardState()
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(AnswerDelta(text="Let me look "))
    state.apply(AnswerDelta(text="that up."))
    # Until a tool call arrives the text is shown as the (streaming) answer.
    assert state.snapshot().answer == "Let me look that up."
    assert state.snapshot().status == "streaming"
    assert state.phase == "answer"
    state.apply(ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}))
    snap = state.snapshot()
    assert snap.answer == ""
    assert snap.status == "working"
    assert state.phase == "tool"
    assert snap.blocks[0] == Narration(round=1, text="Let me look that up.")
    assert isinstance(snap.blocks[1], ToolLine)
    assert snap.blocks[1].args_preview == "ip=10.0.1.100"
    assert snap.blocks[1].status == "running"


def test_tool_lines_go_running_then_done_or_failed_in_call_order() -> None:
    state = CardState()
    tool_round(state)
    state.apply(ToolCallFinished(call_id="c2", name="aws_find", ok=False, summary="timed out after 10 s", duration_s=10.0))
    state.apply(ToolCallFinished(call_id="c1", name="inventory_lookup", ok=True, summary="1 host found", duration_s=1.23))
    lines = [b for b in state.snapshot().blocks if isinstance(b, ToolLine)]
    assert [(line.name, line.status) for line in lines] == [("inventory_lookup", "done"), ("aws_find", "failed")]
    assert lines[0].duration_s == 1.23 and lines[0].summary == "1 host found"
    assert lines[1].summary == "timed out after 10 s"
    # Key arguments survive the finish; nested values are left out of the preview.
    assert lines[1].args_preview == "ip=10.0.1.100 region=us-east-1"
    state.apply(ToolCallFinished(call_id="c3", name="dump", ok=True, summary="line\n" * 200, duration_s=0.1))  # finish without a start
    last = state.snapshot().blocks[-1]
    assert isinstance(last, ToolLine) and last.name == "dump" and len(last.summary) <= 120 and "\n" not in last.summary


def test_answer_of_the_last_round_after_tools() -> None:
    state = CardState()
    tool_round(state)
    state.apply(ToolCallFinished(call_id="c1", name="inventory_lookup", ok=True, summary="1 host found", duration_s=1.2))
    state.apply(ToolCallFinished(call_id="c2", name="aws_find", ok=True, summary="0 found", duration_s=0.4))
    state.apply(RoundStarted(round=2, max_rounds=8))
    state.apply(AnswerDelta(text="10.0.1.100 is "))
    state.apply(AnswerDelta(text="web-01."))
    snap = state.snapshot()
    assert snap.answer == "10.0.1.100 is web-01."
    assert snap.status == "streaming"
    assert [type(b).__name__ for b in snap.blocks] == ["Narration", "ToolLine", "ToolLine"]


def test_thought_is_a_short_tail_hidden_once_the_answer_starts() -> None:
    state = CardState(thought_chars=40)
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(ThoughtDelta(text="word " * 30 + "final words here"))
    thought = state.snapshot().thought
    assert thought.startswith("…") and thought.endswith("final words here")
    assert len(thought) <= 41
    state.apply(AnswerDelta(text="Answer"))
    assert state.snapshot().thought == ""
    # More reasoning in the same round stays hidden once the answer is visible.
    state.apply(ThoughtDelta(text="more"))
    assert state.snapshot().thought == ""


def test_thought_can_be_turned_off() -> None:
    state = CardState(show_thought=False)
    state.apply(RoundStarted(round=1, max_rounds=8))
    assert state.apply(ThoughtDelta(text="secret reasoning")) == 0
    assert state.snapshot().thought == ""


def test_footer_counts_round_tokens_elapsed_and_names_the_model() -> None:
    clock = FakeClock()
    state = CardState(model_label="demo model", clock=clock)
    state.apply(RoundStarted(round=2, max_rounds=8))
    state.apply(UsageReported(prompt_tokens=1000, completion_tokens=234))
    clock.now += 3.4
    assert state.snapshot().footer == "round 2/8 · 1,234 tokens · 3.4 s · demo model"
    state.apply(TurnDone(result=TurnResult(answer="done", usage=Usage(prompt_tokens=1000, completion_tokens=300), rounds=2)))
    clock.now += 100
    # Elapsed is frozen at the end; tokens come from the authoritative result.
    assert state.snapshot().footer == "round 2/8 · 1,300 tokens · 3.4 s · demo model"
    assert CardState(footer=False).snapshot().footer == ""


def test_turn_done_result_is_authoritative_and_final() -> None:
    state = CardState()
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(AnswerDelta(text="partial"))
    state.apply(TurnDone(result=TurnResult(answer="partial and complete")))
    snap = state.snapshot()
    assert snap.status == "done" and snap.final
    assert snap.answer == "partial and complete"
    # Events after the end change nothing.
    assert state.apply(AnswerDelta(text="late")) == 0
    assert state.snapshot().answer == "partial and complete"


def test_failed_turn_keeps_the_partial_answer_and_explains() -> None:
    state = CardState()
    tool_round(state)
    state.apply(TurnFailed(reason="interrupted", message="The model connection dropped.", partial_answer="Half an ans"))
    snap = state.snapshot()
    assert snap.status == "failed"
    assert snap.answer == "Half an ans"
    assert "interrupted" in snap.error and "The model connection dropped." in snap.error
    # Tools still running at the end do not spin forever.
    assert all(b.status != "running" for b in snap.blocks if isinstance(b, ToolLine))


def test_stop_keeps_partial_answer_and_is_idempotent_after_end() -> None:
    state = CardState(locale="zh-CN")
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(AnswerDelta(text="一半的回答"))
    state.mark_stopped()
    snap = state.snapshot()
    assert snap.status == "stopped" and snap.answer == "一半的回答" and snap.error == "⏹ 已停止。"
    state.mark_stopped("ignored")
    assert state.snapshot().error == "⏹ 已停止。"
    done = CardState()
    done.apply(TurnDone(result=TurnResult(answer="ok")))
    done.mark_stopped()
    assert done.snapshot().status == "done"


def test_cancelled_turn_ends_as_stopped() -> None:
    state = CardState()
    state.apply(AnswerDelta(text="so far"))
    state.apply(TurnFailed(reason="cancelled", message="stopped by the user", partial_answer="so far"))
    assert state.snapshot().status == "stopped"
    assert state.snapshot().answer == "so far"


def test_queued_card_says_it_waits_then_starts() -> None:
    clock = FakeClock()
    state = CardState(clock=clock)
    state.mark_queued(2)
    snap = state.snapshot()
    assert snap.status == "queued" and snap.queue_position == 2
    assert "waiting for the previous question to finish" in snap.error.lower()
    assert snap.footer == ""
    clock.now += 50  # time in the queue is not the turn's elapsed time
    state.apply(RoundStarted(round=1, max_rounds=8))
    snap = state.snapshot()
    assert snap.status == "working" and snap.error == "" and snap.queue_position == 0
    assert "0.0 s" in snap.footer


def test_answer_epoch_changes_only_when_the_text_is_replaced() -> None:
    state = CardState()
    state.apply(AnswerDelta(text="Looking"))
    epoch = state.answer_epoch
    state.apply(TurnDone(result=TurnResult(answer="Looking it up: done")))  # same text, extended
    assert state.answer_epoch == epoch
    other = CardState()
    other.apply(AnswerDelta(text="narration"))
    before = other.answer_epoch
    other.apply(ToolCallStarted(call_id="c1", name="x", arguments={}))
    assert other.answer_epoch == before + 1 and other.answer == ""
