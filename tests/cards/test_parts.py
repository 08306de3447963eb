"""Where a long answer's part is cut: at a clean point, but never before what the part already shows."""

from __future__ import annotations

from botgateway.cards.parts import PartCursor
from botgateway.cards.state import CardState
from botgateway.events import AnswerDelta

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
