"""The contract of one admission check: the message to go on with, or the verdict that ends it here.

Admission (:mod:`botgateway.turns.admission`) asks its checks in their declared order. A check
passes by returning the message the next one is given (the same one, or rewritten: a refresh's
question, a quoted alert's conversation, the access decision on its context), or stops the message
with a :class:`Verdict`: a refusal (audited when it names an outcome) or an answer given here, with
no turn. Admission writes the audit record and sends the note; the check only says what they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from botgateway.messages import InboundMessage, Submission, SubmissionStatus

__all__ = ["Check", "Verdict", "admission_log", "matches"]

admission_log = structlog.get_logger("botgateway.turns.admission")
"""The checks' logger: admission's lines keep one logger name, whichever check writes them."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a check decided for a message that does not become a turn: refused, or answered here."""

    note: str = ""
    """What the asker is told."""
    audit: str = ""
    """The outcome its audit record is written with (``refused:too_long``, ``limit:turns_per_minute``); ``""``:
    none is written (a stop, a vote, a note that is no refusal of a question)."""
    reason: str = ""
    """What the audit record keeps as told, when not ``note`` (the bare reason an access refusal's note wraps)."""
    status: SubmissionStatus = "refused"
    """The submission's status."""
    answer: bool = False
    """A neutral answer (``conversation cleared``, ``/whoami``), not an error."""
    private: bool = False
    """To the asker alone where the platform can."""
    limited: bool = False
    """Refused because the asker reached one of its limits."""
    retry_after_s: float | None = None
    """For a limit's refusal: seconds until that limit's window starts again (None: unknown, as a concurrent
    turns limit frees when a turn ends)."""
    submission: Submission | None = None
    """The answer itself, when there is no note to send (a redelivery, a turn stopped)."""

    @classmethod
    def refusal(cls, note: str, *, audit: str = "", reason: str = "", status: SubmissionStatus = "refused",
                limited: bool = False, retry_after_s: float | None = None) -> Verdict:
        """A refusal told as ``note`` (audited as ``audit`` when given, keeping ``reason`` when given)."""
        return cls(note=note, audit=audit, reason=reason, status=status, limited=limited, retry_after_s=retry_after_s)

    @classmethod
    def answered(cls, note: str, *, status: SubmissionStatus, private: bool = False) -> Verdict:
        """A neutral answer ``note``, to the asker alone when ``private``: the message needed no turn."""
        return cls(note=note, status=status, answer=True, private=private)

    @classmethod
    def done(cls, submission: Submission) -> Verdict:
        """The message is dealt with as ``submission`` says, and nobody is told more."""
        return cls(submission=submission)


class Check(Protocol):
    """One check of a message on its way to a turn (a plain ``async def`` of these arguments is one)."""

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg`` (or the message that replaces it) to pass it on, or the :class:`Verdict` that ends it here.

        ``turn_id`` is the id the message becomes a turn under (its place in its asker's limits is held under it).
        """
        ...


def matches(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` is exactly one of ``words`` (case and trailing punctuation ignored)."""
    normalized = text.strip().strip("!.。！ ").casefold()
    return bool(normalized) and normalized in {w.casefold() for w in words}
