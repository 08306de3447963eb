"""What an interrupted turn needs to run again after its process died, and whether it may.

A typed question's open-card records carry it (:class:`~botgateway.cards.records.ResumableRecords`): the
question whole, as it was admitted (who asked, where, under which grant), when it was asked, and the turn's tool
calls so far, each with whether its tool only reads and whether it ended, and whether a call waits for an
approval. :class:`TurnProgress` folds the turn's events into it. :func:`why_not` tells a recovering process
whether the turn may run again: only when nothing it did can have changed anything (each call it made, ended or
not, was of a read-only tool), no call was waiting for an approver, the question is recent enough
(``gateway.resume_within_s``), and the turn is not itself a resumed one (a question runs again once at most).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from botgateway.events import ApprovalDecided, ApprovalRequested, ToolCallFinished, ToolCallStarted, TurnEvent
from botgateway.fleet.handoff import MovedQuestion
from botgateway.fleet.wire import moved_from_wire, moved_to_wire
from botgateway.messages import InboundMessage
from botgateway.strings import t

__all__ = ["RESUMED_FROM", "RecordedCall", "ResumableTurn", "TurnProgress", "turn_from_wire", "turn_to_wire", "why_not"]

RESUMED_FROM = "resumed_from"
"""Where a resumed turn names the interrupted turn it runs again: a key of its card target's ``extra`` (so its own
record says it was resumed once) and of its audit record's ``extra`` (the link between the two attempts)."""

_VERSION = 1
"""The shape of the record; a record of another shape is not resumed (it is closed as "not on record")."""


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of the interrupted turn, as its record keeps it."""

    name: str
    """The tool's name."""
    read_only: bool
    """Whether the tool says it only reads (``read_only``): a call of any other may have changed something."""
    ended: bool
    """Whether the call had ended (a call that had not may have done its work all the same)."""


@dataclass(frozen=True)
class ResumableTurn:
    """A turn as its open card's record keeps it, for the process that finds the card left open."""

    msg: InboundMessage
    """The question as it was admitted: text, conversation, card target, principal, roles and grant."""
    turn_id: str
    """The interrupted turn's id."""
    asked_at: float
    """Unix time the question was scheduled: its age bounds a resume."""
    calls: tuple[RecordedCall, ...] = ()
    """Its tool calls so far, in the order they started."""
    approval_pending: bool = False
    """A call was waiting for an approver when the record was last written."""
    resumed_from: str = ""
    """Non-empty for a turn that is itself a resume (the id of the turn it ran again): it is not resumed again."""


def turn_to_wire(turn: ResumableTurn) -> dict[str, Any]:
    """``turn`` as JSON-ready data (the record's ``resume`` field)."""
    return {"v": _VERSION, "question": _question_to_wire(turn), **_progress_to_wire(turn)}


def _question_to_wire(turn: ResumableTurn) -> dict[str, Any]:
    # The question travels as a question moved between processes does: the same whole, checked on the way in.
    return moved_to_wire(MovedQuestion(msg=turn.msg, turn_id=turn.turn_id, moved_at=turn.asked_at, moved_by=""))


def _progress_to_wire(turn: ResumableTurn) -> dict[str, Any]:
    return {
        "calls": [{"name": c.name, "read_only": c.read_only, "ended": c.ended} for c in turn.calls],
        "approval_pending": turn.approval_pending,
        RESUMED_FROM: turn.resumed_from,
    }


def turn_from_wire(data: Mapping[str, Any]) -> ResumableTurn:
    """The turn :func:`turn_to_wire` recorded; raises ``ValueError`` when ``data`` is not one."""
    if data.get("v") != _VERSION:
        raise ValueError(f"not a resume record of version {_VERSION}")
    question = data.get("question")
    calls = data.get("calls")
    if not isinstance(question, Mapping) or not isinstance(calls, list):
        raise ValueError("a resume record needs a question and a list of calls")
    moved = moved_from_wire(question)
    recorded = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError("a recorded call needs a name")
        # Anything but an explicit True counts against resuming: a malformed record never runs a call twice.
        recorded.append(RecordedCall(name=call["name"], read_only=call.get("read_only") is True,
                                     ended=call.get("ended") is True))
    resumed_from = data.get(RESUMED_FROM)
    return ResumableTurn(
        msg=moved.msg, turn_id=moved.turn_id, asked_at=moved.moved_at, calls=tuple(recorded),
        approval_pending=data.get("approval_pending") is not False,
        resumed_from=resumed_from if isinstance(resumed_from, str) else "?",
    )


def why_not(turn: ResumableTurn, *, now: float, within_s: float) -> str | None:
    """Why ``turn`` may not run again, as its card says it (in the asker's language); None when it may."""
    locale = turn.msg.target.locale
    if turn.resumed_from:
        return t(locale, "resume_again")
    writer = next((call for call in turn.calls if not call.read_only), None)
    if writer is not None:
        return t(locale, "resume_wrote", tool=writer.name)
    if turn.approval_pending:
        return t(locale, "resume_approval")
    if within_s <= 0 or now - turn.asked_at > within_s:
        return t(locale, "resume_too_old")
    return None


class TurnProgress:
    """A running turn's resume record, kept up to date from its events; ``on_change`` is called when it changed.

    Only tool-call boundaries change it (a call starts or ends, an approval is asked or decided), so its record is
    written again only then, never per token.
    """

    def __init__(
        self, msg: InboundMessage, turn_id: str, *, read_only: Callable[[str], bool], asked_at: float | None = None
    ) -> None:
        self._turn = ResumableTurn(msg=msg, turn_id=turn_id, asked_at=time.time() if asked_at is None else asked_at,
                                   resumed_from=str(msg.target.extra.get(RESUMED_FROM) or ""))
        self._read_only = read_only
        self._calls: dict[str, RecordedCall] = {}
        self._waiting: set[str] = set()  # calls waiting for an approver
        self._question: dict[str, Any] | None = None  # the question's wire form, made once
        self.on_change: Callable[[], None] | None = None
        """Told when the record changed (the open-card records write it again, behind the turn)."""

    def observe(self, event: TurnEvent) -> None:
        """Fold ``event`` in; tells :attr:`on_change` when it changed the record."""
        if isinstance(event, ToolCallStarted):
            self._calls[event.call_id] = RecordedCall(name=event.name, read_only=self._read_only(event.name), ended=False)
        elif isinstance(event, ToolCallFinished):
            started = self._calls.get(event.call_id)
            read_only = started.read_only if started is not None else self._read_only(event.name)
            self._calls[event.call_id] = RecordedCall(name=event.name, read_only=read_only, ended=True)
        elif isinstance(event, ApprovalRequested):
            self._waiting.add(event.call_id)
        elif isinstance(event, ApprovalDecided):
            self._waiting.discard(event.call_id)
        else:
            return
        if self.on_change is not None:
            self.on_change()

    def record(self) -> dict[str, Any]:
        """The record as it stands now (JSON-ready)."""
        turn = replace(self._turn, calls=tuple(self._calls.values()), approval_pending=bool(self._waiting))
        if self._question is None:
            self._question = _question_to_wire(turn)  # the question never changes: encoded once
        return {"v": _VERSION, "question": self._question, **_progress_to_wire(turn)}
