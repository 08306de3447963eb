"""The card's lifecycle: queued, working, streaming, then done, failed or stopped, and the note each shows.

:class:`~botgateway.cards.state.CardState` folds the turn's events into what the
card shows; this part of it keeps where the turn is in its life, the note the
card shows for that (its place in a queue, why the turn failed or stopped), and
when the turn started and ended, for the footer's elapsed time. How a turn ends
is worded by pure functions (:func:`done`, :func:`stopped`, :func:`failed`,
:func:`turn_failed`) as an :class:`Ending`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from botgateway.events import TurnFailed
from botgateway.snapshot import CardStatus
from botgateway.strings import t

__all__ = ["CardLifecycle", "Ending", "done", "failed", "stopped", "turn_failed"]

_FAILURE_KEYS: Mapping[str, str] = MappingProxyType({
    "llm_unavailable": "failed_llm_unavailable",
    "interrupted": "failed_interrupted",
    "internal": "failed_internal",
    "timeout": "failed_timeout",
    "llm_refused": "failed_llm_refused",
})


@dataclass(frozen=True)
class Ending:
    """How a turn ended: the card's final status, the note it shows, and why calls still running failed."""

    status: Literal["done", "failed", "stopped"]
    """The card's final status."""
    note: str
    """What the card says of the ending (empty when it answered)."""
    tool_reason: str
    """The reason on the tool lines still running or waiting when the turn ended."""


def done(locale: str) -> Ending:
    """The turn answered (a call still running then never finished)."""
    return Ending("done", "", t(locale, "failed_unfinished"))


def stopped(locale: str, note: str = "") -> Ending:
    """The asker (or an admin) stopped the turn: ``note``, or a default, says so."""
    return Ending("stopped", note or t(locale, "stopped"), t(locale, "tool_stopped"))


def failed(locale: str, message: str = "") -> Ending:
    """The turn failed, ``message`` saying why in plain words (a default when empty)."""
    message = message or t(locale, "failed_unfinished")
    return Ending("failed", t(locale, "failed", message=message), message)


def turn_failed(locale: str, event: TurnFailed) -> Ending:
    """The ending a :class:`~botgateway.events.TurnFailed` reports (a cancelled turn was stopped)."""
    if event.reason == "cancelled":
        return stopped(locale)
    note = t(locale, _FAILURE_KEYS.get(event.reason, "failed"), message=event.message).strip()
    return Ending("failed", note, event.message or t(locale, "failed_unfinished"))


class CardLifecycle:
    """Where one card's turn is in its life (mutable; owned by its card state)."""

    def __init__(self, locale: str, *, clock: Callable[[], float]) -> None:
        """``locale``: the language of the notes; ``clock`` (monotonic) times the turn."""
        self.locale = locale
        """The language of the notes."""
        self._clock = clock
        self._status: CardStatus = "working"
        self._note = ""
        self._queue_position = 0
        self._running = False  # the turn left the queue (or never was in one): it can be queued no more
        self._started_at = clock()
        self._ended_at: float | None = None

    @property
    def status(self) -> CardStatus:
        """The card's lifecycle status."""
        return self._status

    @property
    def final(self) -> bool:
        """True once done, failed or stopped."""
        return self._status in ("done", "failed", "stopped")

    @property
    def note(self) -> str:
        """What the card says of its status: its place in a queue, why the turn failed or stopped (often empty)."""
        return self._note

    @property
    def queue_position(self) -> int:
        """The card's place in its queue while it waits there (1 = next; 0 when unknown or not queued)."""
        return self._queue_position if self._status == "queued" else 0

    def queue(self, position: int, *, busy: bool) -> bool:
        """The turn waits (see :meth:`~botgateway.cards.state.CardState.mark_queued`); False, changing nothing,
        once it runs or ended."""
        if self._running or self.final:
            return False
        self._status = "queued"
        self._queue_position = max(position, 0)
        if busy:
            self._note = t(self.locale, "queued_busy", position=max(position, 1))
        elif position > 0:
            self._note = t(self.locale, "queued_position", position=position)
        else:
            self._note = t(self.locale, "queued")
        return True

    def begin(self) -> None:
        """The turn runs (it left the queue, or its first event came); a queued turn is timed from now."""
        if self._running:
            return
        self._running = True
        if self._status == "queued":
            self._status = "working"
            self._queue_position = 0
            self._note = ""
            self._started_at = self._clock()

    def answering(self) -> None:
        """Answer text came: a working card is streaming now."""
        if self._status == "working":
            self._status = "streaming"

    def calling(self) -> None:
        """A tool call started: the card is working (again)."""
        self._status = "working"

    def end(self, ending: Ending) -> None:
        """The turn ended as ``ending`` says."""
        self._status = ending.status
        self._note = ending.note
        self._queue_position = 0
        self._ended_at = self._clock()

    def elapsed_s(self) -> float:
        """Seconds the turn ran, until it ended or until now."""
        end = self._ended_at if self._ended_at is not None else self._clock()
        return end - self._started_at
