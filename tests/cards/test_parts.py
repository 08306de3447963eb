"""The part cursor: where a long answer's part is cut (at a clean point, never before what the part already shows),
and what a continuation part shows."""

from __future__ import annotations

from botgateway.cards.parts import PartCursor
from botgateway.cards.state import CardState
from botgateway.events import AnswerDelta, RoundStarted, ToolCallStarted

SHOWN = "a" * 150 + ". " + "b" * 40  # 192 characters: fits a part of 200; its clean cut is after the sentence (152)
MORE = "c" * 20  # now 212: over


def test_a_part_is_cut_at_a_clean_point_but_never_before_what_it_already_shows() -> None:
    state = CardState(locale="en")
    cursor = PartCursor(state, max_chars=200)
    state.apply(AnswerDelta(text=SHOWN))
    cursor.showed(cursor.view())  # a native stream already shows all of it
    state.apply(AnswerDelta(text=MORE))
    assert cursor.split() == len(SHOWN)  # a stream cannot take text back: the cut gives way to what it shows
    assert cursor.capped_view().answer == SHOWN


def test_a_part_nobody_saw_yet_is_cut_at_the_clean_point() -> None:
    state = CardState(locale="en")
    cursor = PartCursor(state, max_chars=200)
    state.apply(AnswerDelta(text=SHOWN + MORE))
    assert cursor.split() == 152


def test_a_continuation_part_shows_only_what_earlier_parts_did_not() -> None:
    state = CardState(locale="en", asker="alice")
    cursor = PartCursor(state, max_chars=200)
    state.apply(AnswerDelta(text="Let me look that up."))
    state.apply(ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}))
    state.apply(RoundStarted(round=2, max_rounds=8))
    state.apply(AnswerDelta(text="A" * 50 + "B" * 50))
    whole = cursor.view()  # the first part, whole: the usual card
    assert whole.part == 1 and len(whole.blocks) == 2 and whole.asker == "alice" and whole.answer == "A" * 50 + "B" * 50
    cursor.advance(50)
    part2 = cursor.view()
    assert part2.part == 2 and part2.blocks == () and part2.answer == "B" * 50 and part2.asker == ""
