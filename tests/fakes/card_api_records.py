"""What the fake card API keeps and what tests read from it: its calls, cards and fallback messages.

:class:`CallRecord` is one request as the fake recorded it, :class:`FakeCard` a
card as the platform shows it, :class:`FakeMessage` a fallback message.
:class:`CardAPIReadings` is the part of :class:`~tests.fakes.card_api.FakeCardAPI`
that answers questions about them: calls of an op, throttles, the most calls
in a window, a turn's cards and messages, and the answer the user can read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.card_api_limits import CardAPILimits

__all__ = ["CallRecord", "CardAPIReadings", "FakeCard", "FakeMessage", "has_output"]


def has_output(snapshot: Mapping[str, Any]) -> bool:
    """Whether ``snapshot`` shows something the model produced (a tool line, thought or answer text)."""
    return bool(snapshot.get("blocks") or snapshot.get("thought") or snapshot.get("answer"))


class _ShowsSnapshot:
    """Readers of a rendered snapshot's fields (for cards and messages)."""

    target: dict[str, Any]
    snapshot: dict[str, Any]

    @property
    def turn_id(self) -> str:
        """The turn it belongs to (``target.turn_id``)."""
        return str(self.target.get("turn_id", ""))

    @property
    def answer(self) -> str:
        """The answer text it shows."""
        return str(self.snapshot.get("answer", ""))

    @property
    def status(self) -> str:
        """The snapshot's status (``streaming``, ``done``…)."""
        return str(self.snapshot.get("status", ""))

    @property
    def seq(self) -> int:
        """The version of the snapshot."""
        return int(self.snapshot.get("seq", 0) or 0)

    @property
    def part(self) -> int:
        """The part of the answer (1, or 2, 3… for continuations)."""
        return int(self.snapshot.get("part", 1) or 1)


@dataclass
class CallRecord:
    """One request the fake received."""

    op: str
    """``create``, ``update``, ``finalize`` or ``fallback``."""
    card_id: str | None
    """The card addressed (the new id for a successful create; None for fallback and refused creates)."""
    arrived_at: float
    """Clock time when the request arrived."""
    turn_id: str = ""
    """The turn the call belongs to (``target.turn_id``)."""
    answer_len: int = 0
    """Characters of answer text the call carried."""
    has_output: bool = False
    """The content shows something the model produced (a tool line, thought or answer text)."""
    body: dict[str, Any] = field(default_factory=dict)
    """The parsed JSON body (``target``, ``snapshot``, ``text``); empty when the fake keeps no bodies."""
    status: int | None = None
    """HTTP status answered; None while the request is still being handled (held or slow)."""
    answered_at: float | None = None
    """Clock time when the answer was sent."""
    reason: str = ""
    """Why the call failed: ``rate_limit``, ``scripted``, ``gone``, ``too_long``, ``invalid``; empty on success."""
    index: int = -1
    """Position in :attr:`FakeCardAPI.calls` (arrival order)."""

    @property
    def answer(self) -> str:
        """The snapshot's answer text carried by the call (needs bodies)."""
        return str(self.body.get("snapshot", {}).get("answer", ""))

    @property
    def text(self) -> str:
        """The rendered text carried by the call (needs bodies)."""
        return str(self.body.get("text", ""))

    @property
    def ok(self) -> bool:
        """Answered 2xx."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def visible_at(self) -> float | None:
        """When the call's content became visible to users; None unless it was accepted."""
        return self.answered_at if self.ok else None


@dataclass
class FakeCard(_ShowsSnapshot):
    """A card as the fake platform shows it (mutable; owned by the fake)."""

    card_id: str
    """The fake's id of the card."""
    target: dict[str, Any]
    """The target it was created for."""
    snapshot: dict[str, Any]
    """The latest accepted snapshot."""
    text: str
    """The latest accepted rendered text."""
    finalized_at: float | None = None
    """When the card was finalized; None while it streams. Later writes get 404."""
    expired: bool = False
    """Set by :meth:`FakeCardAPI.expire`: the card is gone (404)."""
    updates: int = 0
    """Accepted calls on this card, creation included."""
    writes_after_final: int = 0
    """Writes that arrived after the card was finalized (refused with 404; a streamer bug unless late)."""
    seq_regressions: int = 0
    """Accepted calls carrying an older ``seq`` than the card already showed (out-of-order delivery)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every accepted snapshot, in order (only when the fake keeps bodies)."""

    @property
    def finalized(self) -> bool:
        """True once finalized."""
        return self.finalized_at is not None


@dataclass(frozen=True)
class FakeMessage(_ShowsSnapshot):
    """A plain (fallback) message the fake accepted."""

    target: dict[str, Any]
    """The target it was posted to."""
    snapshot: dict[str, Any]
    """The snapshot it was rendered from."""
    text: str
    """The rendered text."""
    visible_at: float
    """When it became visible."""
    call_index: int
    """Index of its :class:`CallRecord` in :attr:`FakeCardAPI.calls` (arrival order)."""




class CardAPIReadings:
    """Questions tests ask about the recorded calls, cards and messages (a mixin of :class:`~tests.fakes.card_api.FakeCardAPI`)."""

    calls: list[CallRecord]
    cards: dict[str, FakeCard]
    messages: list[FakeMessage]
    _limits: CardAPILimits

    def calls_of(self, op: str, *, card_id: str | None = None) -> list[CallRecord]:
        """Recorded calls of ``op`` (for ``card_id`` when given)."""
        return [c for c in self.calls if c.op == op and (card_id is None or c.card_id == card_id)]

    @property
    def rate_limited(self) -> int:
        """Calls refused by the rate limiter (not scripted failures)."""
        return sum(1 for c in self.calls if c.reason == "rate_limit")

    @property
    def throttled(self) -> int:
        """Calls answered 429, by the rate limiter or by script."""
        return sum(1 for c in self.calls if c.status == 429)

    def max_in_window(self, window_s: float = 1.0, *, bucket: str | None = None) -> int:
        """The most accepted (non-429) calls whose arrival falls in any ``window_s`` sliding window."""
        times = sorted(
            c.arrived_at for c in self.calls
            if c.status != 429 and (bucket is None or self._limits.bucket_name(c.op) == bucket)
        )  # fmt: skip
        best = 0
        start = 0
        for end, at in enumerate(times):
            while at - times[start] >= window_s:
                start += 1
            best = max(best, end - start + 1)
        return best

    def cards_for(self, turn_id: str) -> list[FakeCard]:
        """The cards of one turn (by ``target.turn_id``), in part order."""
        found = [c for c in self.cards.values() if c.turn_id == turn_id]
        return sorted(found, key=lambda c: c.part)

    def messages_for(self, turn_id: str) -> list[FakeMessage]:
        """The fallback messages of one turn, in arrival order."""
        return [m for m in self.messages if m.turn_id == turn_id]

    def card_answer(self, turn_id: str) -> str:
        """The answer the turn's cards show now, parts joined in order."""
        return "".join(card.answer for card in self.cards_for(turn_id))

    def delivered_answer(self, turn_id: str) -> str:
        """The whole answer the user can read for ``turn_id``: finalized cards and fallback messages, in part order.

        Pieces of one part keep the order they arrived in (a fallback may split a part into several messages).
        """
        pieces: list[tuple[int, int, str]] = []
        for card in self.cards_for(turn_id):
            if card.finalized:
                first = next(i for i, c in enumerate(self.calls) if c.card_id == card.card_id)
                pieces.append((card.part, first, card.answer))
        for message in self.messages_for(turn_id):
            pieces.append((message.part, message.call_index, message.answer))
        return "".join(text for _, _, text in sorted(pieces))
