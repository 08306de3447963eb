"""Which slice of a long answer the current card shows: the part/offset cursor.

A card holds at most ``capacity`` answer characters. Past that the card is
closed at a clean split point ("continued below") and part 2 starts in a new
card with the blocks and answer text that came after. The cursor remembers
where the current part begins, and shrinks ``capacity`` when the platform says
a rendering was too long after all.
"""

from __future__ import annotations

from dataclasses import replace

from botgateway.cards.split import split_point
from botgateway.cards.state import CardState
from botgateway.snapshot import CardSnapshot

__all__ = ["MIN_PART_CHARS", "PartCursor"]

MIN_PART_CHARS = 64
"""Continuation parts are never cut smaller than this, even after ``TooLong`` answers."""


class PartCursor:
    """The current part of one turn's card: its number, first block and answer offset."""

    def __init__(self, state: CardState, max_chars: int) -> None:
        self._state = state
        self.capacity = max(int(max_chars), MIN_PART_CHARS)
        """Answer characters one card may show (lowered after a ``TooLong``)."""
        self.part = 1
        """1 for the first card of the turn; 2, 3… for continuations."""
        self._first_block = 0
        self._offset = 0
        self._epoch = 0
        self._shown = 0  # answer characters of the current part the platform already shows
        self._shown_epoch = 0

    def answer(self) -> str:
        """The answer text from the start of the current part (all of it when the answer restarted)."""
        if self._state.answer_epoch == self._epoch:
            return self._state.answer[self._offset :]
        return self._state.answer

    def overflows(self) -> bool:
        """The current part's answer no longer fits one card."""
        return len(self.answer()) > self.capacity

    def view(self) -> CardSnapshot:
        """The current part as a snapshot (uncut): blocks from its first on, the answer past what earlier parts showed.

        Only the first part names the asker and carries the pictures.
        """
        full = self._state.snapshot()
        if self.part == 1 and self._first_block == 0 and (self._offset == 0 or self._epoch != self._state.answer_epoch):
            return full  # the first part, whole: the usual card, built once
        first = self.part == 1
        return replace(
            full, part=self.part, blocks=full.blocks[self._first_block :], answer=self.answer(),
            asker=full.asker if first else "", artifacts=full.artifacts if first else (),
        )

    def capped_view(self) -> CardSnapshot:
        """The current part, its answer cut to fit one card (the rest shows in the next part)."""
        view = self.view()
        if len(view.answer) <= self.capacity:
            return view
        return replace(view, answer=view.answer[: self.split()])

    def closing_view(self, cut: int) -> CardSnapshot:
        """The current part, closed at ``cut`` answer characters, pointing to the next part."""
        view = self.view()
        return replace(view, status="done", answer=view.answer[:cut], thought="", footer="", error="", continued=True)

    def split(self) -> int:
        """Where the current part's answer is cut to fit (its length when it fits).

        Never before what the part already shows: a native stream cannot take text back, and an edited card
        would lose a sentence its reader saw. The clean cut gives way to that (rarely: mid-sentence).
        """
        answer = self.answer()
        if len(answer) <= self.capacity:
            return len(answer)
        shown = self._shown if self._shown_epoch == self._state.answer_epoch else 0
        return max(split_point(answer, self.capacity), min(shown, self.capacity))

    def showed(self, snapshot: CardSnapshot) -> None:
        """The platform now shows ``snapshot`` of the current part."""
        epoch = self._state.answer_epoch
        if epoch != self._shown_epoch:
            self._shown, self._shown_epoch = 0, epoch  # the answer restarted: what showed before is gone
        self._shown = max(self._shown, len(snapshot.answer))

    def advance(self, shown_chars: int) -> None:
        """The current part is closed after ``shown_chars`` more answer characters; the next part starts."""
        if self._state.answer_epoch != self._epoch:
            self._epoch = self._state.answer_epoch
            self._offset = 0
        self._offset += shown_chars
        self._first_block = self._state.block_count
        self._shown = 0
        self.part += 1

    def shrink(self, length: int) -> bool:
        """The platform said too long at ``length`` answer characters: aim lower. False when already minimal."""
        if length <= MIN_PART_CHARS:
            return False
        self.capacity = max(MIN_PART_CHARS, int(min(self.capacity, length) * 0.75))
        return True
