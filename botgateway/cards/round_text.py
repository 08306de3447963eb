"""The current round's visible text: the answer while it streams, narration once the round calls a tool.

:class:`~botgateway.cards.state.CardState` folds the turn's events; this part
of it keeps the text of the round under way and the thought before it. When
the round calls a tool, its text so far is handed over as narration (the
:class:`~botgateway.cards.board.StatusBoard` shows it above the tool lines)
and the answer starts over: its epoch changes, so offsets into the answer
(kept by :class:`~botgateway.cards.parts.PartCursor` for continuation parts)
are known to no longer apply.
"""

from __future__ import annotations

__all__ = ["RoundText"]


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` on one line, starting at a word when one is near."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[-limit:]
    space = cut.find(" ")
    if 0 <= space < 20:
        cut = cut[space + 1 :]
    return "…" + cut


class RoundText:
    """The text of one card's current round, and its thought (mutable; owned by its card state)."""

    def __init__(self, *, show_thought: bool, thought_chars: int) -> None:
        """``show_thought``: the card shows the tail (``thought_chars`` long) of what the model thinks."""
        self.show_thought = show_thought and thought_chars > 0
        """Whether the card shows the thought before the answer."""
        self.thought_chars = thought_chars
        """How much of the thought (its tail) the card shows."""
        self._text = ""
        self._epoch = 0
        self._called_tools = False
        self._thought = ""

    @property
    def answer(self) -> str:
        """The round's visible text so far, shown as the answer."""
        return self._text

    @property
    def epoch(self) -> int:
        """Identity of :attr:`answer`: changes whenever the text so far turns into narration or is replaced."""
        return self._epoch

    def thought(self) -> str:
        """The tail of the round's thought, while no answer text has come (empty when there is none to show)."""
        if self.show_thought and not self._text and self._thought.strip():
            return _tail(self._thought, self.thought_chars)
        return ""

    def new_round(self) -> str:
        """A round starts: returns the narration of the round before it (its text, if it called tools; else empty)."""
        narration = self._take() if self._called_tools else ""
        self._thought = ""
        self._called_tools = False
        return narration

    def add_thought(self, text: str) -> int:
        """Thought text came: returns how many of its characters the card shows (0 while it shows none)."""
        # Keep a bounded tail: only the last ~thought_chars are ever shown.
        self._thought = (self._thought + text)[-max(4 * self.thought_chars, 400) :]
        return len(text) if self.show_thought and not self._text else 0

    def add(self, text: str) -> None:
        """Answer text came."""
        self._text += text

    def tool_called(self) -> str:
        """The round calls a tool: returns its text so far, narration now, no longer answer (empty when none)."""
        self._called_tools = True
        return self._take()

    def settle(self, text: str) -> None:
        """``text`` is the whole answer after all (the turn's authoritative result, or its partial answer)."""
        if not text.startswith(self._text):
            self._epoch += 1  # a different text: earlier offsets no longer apply
        self._text = text

    def _take(self) -> str:
        text = self._text
        if text:
            self._epoch += 1
        self._text = ""
        return text
