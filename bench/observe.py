"""What people would see: each answer's progress on the fake platform, from its watch callbacks.

A :class:`TurnWatch` is told, at every accepted change of a bot message (or
card) of its turn, what that turn's messages now show. From the texts it works
out how much of the exact answer is visible and whether the messages carrying
it still look live, and keeps the first moment of each milestone:

- **first text** — some of the answer is visible (at least its first three
  characters: a placeholder never counts);
- **text complete** — every character of the answer is visible (it may still
  be streaming, with a cursor or a Stop button);
- **complete** — every character is visible *and* the messages carrying it are
  settled (no cursor, no Stop button, stream stopped, card finalized). This is
  the latency the goals judge.

The answer is found in the texts by containment: one message holding all of
it, or consecutive messages holding consecutive pieces (an answer continued
in a second part). At the end, :meth:`TurnWatch.verdict` checks the carriers
show nothing but the answer and the asker's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_PIECE = 3
"""Characters a message must show of the answer (or of its rest) to count as showing it."""


@dataclass(frozen=True)
class View:
    """One message or card of a turn as people see it at some moment."""

    key: str
    """Stable id (Slack ``ts``, DingTalk ``outTrackId`` or message number)."""
    order: float
    """Position in the conversation (creation order)."""
    text: str
    """The visible text."""
    live: bool
    """It still looks live (placeholder, cursor, Stop button, open stream, card not finalized)."""


def longest_piece(text: str, answer: str, start: int) -> int:
    """The longest ``k`` with ``answer[start:start+k]`` in ``text`` (0 when under :data:`MIN_PIECE`)."""
    lo, hi = 0, len(answer) - start
    while lo < hi:  # containment of a prefix is monotone in its length
        mid = (lo + hi + 1) // 2
        if answer[start : start + mid] in text:
            lo = mid
        else:
            hi = mid - 1
    return lo if lo >= min(MIN_PIECE, len(answer) - start) else 0


def carriers(views: Sequence[View], answer: str) -> tuple[int, list[tuple[View, int, int]]]:
    """How many answer characters ``views`` show, and which views carry which ``[start, end)`` piece."""
    for view in views:
        if answer and answer in view.text:
            return len(answer), [(view, 0, len(answer))]
    covered = 0
    pieces: list[tuple[View, int, int]] = []
    for view in sorted(views, key=lambda v: v.order):
        if covered >= len(answer):
            break
        k = longest_piece(view.text, answer, covered)
        if k:
            pieces.append((view, covered, covered + k))
            covered += k
    return covered, pieces


@dataclass
class TurnWatch:
    """One answer's milestones, as seen on the platform."""

    turn: int
    """Index of the mention."""
    answer: str
    """The exact answer the model streams."""
    decorations: tuple[str, ...] = ()
    """Text a carrier may show besides the answer (the asker line, continuation notes)."""
    inbound_at: float | None = None
    """When the fake platform pushed the mention."""
    first_text_at: float | None = None
    """First moment part of the answer was visible."""
    text_complete_at: float | None = None
    """First moment all of it was visible (maybe still live)."""
    complete_at: float | None = None
    """First moment all of it was visible on settled messages."""
    views: dict[str, View] = field(default_factory=dict)
    """The turn's messages now."""
    changes: int = 0
    """Accepted changes of the turn's messages."""

    def update(self, view: View | None, key: str, at: float) -> None:
        """Message ``key`` now shows ``view`` (``None``: it was deleted) since ``at``."""
        self.changes += 1
        if view is None:
            self.views.pop(key, None)
        else:
            self.views[key] = view
        covered, pieces = carriers(list(self.views.values()), self.answer)
        if covered and self.first_text_at is None:
            self.first_text_at = at
        if covered >= len(self.answer):
            if self.text_complete_at is None:
                self.text_complete_at = at
            if self.complete_at is None and not any(v.live for v, _, _ in pieces):
                self.complete_at = at

    @property
    def done(self) -> bool:
        """The answer is complete (settled)."""
        return self.complete_at is not None

    def verdict(self) -> tuple[bool, str]:
        """``(exact, why not)`` from what the turn's messages show now."""
        covered, pieces = carriers(list(self.views.values()), self.answer)
        if not self.views:
            return False, "nothing visible"
        if covered < len(self.answer):
            return False, f"{covered}/{len(self.answer)} answer characters visible"
        if any(v.live for v, _, _ in pieces):
            return False, "the answer's message still looks live"
        for view, start, end in pieces:
            rest = view.text.replace(self.answer[start:end], "", 1)
            extra = [line for line in (x.strip() for x in rest.splitlines()) if line and line not in self.decorations]
            if extra:
                return False, f"extra text next to the answer: {extra[0][:60]!r}"
        return True, ""

    def to_dict(self) -> dict[str, Any]:
        """The milestones (times are ``time.monotonic()`` seconds)."""
        exact, why = self.verdict()
        return {
            "turn": self.turn,
            "inbound_at": self.inbound_at,
            "first_text_at": self.first_text_at,
            "text_complete_at": self.text_complete_at,
            "complete_at": self.complete_at,
            "exact": exact,
            "problem": why,
            "messages": len(self.views),
            "changes": self.changes,
        }
