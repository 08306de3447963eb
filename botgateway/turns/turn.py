"""One scheduled turn: its card, its task, and what its audit record needs.

The gateway keeps one :class:`ScheduledTurn` per question from submission
until its card is final; :meth:`ScheduledTurn.observe` folds the turn's events
into the audit bookkeeping, :meth:`ScheduledTurn.tool_call_row` is what is
written as each tool call starts and ends (so a killed turn is still audited),
and :meth:`ScheduledTurn.audit_record` is written when the turn ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, TypedDict

from botgateway.access import asker_of
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer
from botgateway.events import (
    ApprovalDecided,
    EventListener,
    ModelAnswering,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    UsageReported,
)
from botgateway.messages import InboundMessage, TurnOutcome
from botgateway.redaction import RedactSecrets, redact_text
from botgateway.stores.base import AuditRecord, ToolCallRow
from botgateway.tooling.contract import Source
from botgateway.turns.resume_record import RESUMED_FROM, TurnProgress
from botgateway.usage import USAGE_KEY, usage_entry

__all__ = ["ScheduledTurn"]

_REDACT = RedactSecrets()
"""Masks secrets in tool arguments before they are audited (a password typed into a question stays out of the log)."""
# Questions, answers and tool summaries are masked too: people paste tokens into chat.


class _Where(TypedDict):
    """Who asked where: the fields every audit record and tool call row share."""

    principal: str
    team: str
    channel: str
    role: str


class ScheduledTurn:
    """One scheduled turn (mutable; owned by the gateway)."""

    def __init__(
        self, msg: InboundMessage, turn_id: str, state: CardState, streamer: CardStreamer,
        progress: TurnProgress | None = None,
    ) -> None:
        self.msg = msg
        """The question, as the adapter handed it over (``target.turn_id`` set)."""
        self.turn_id = turn_id
        """The gateway's id of the turn."""
        self.state = state
        """What the card shows."""
        self.streamer = streamer
        """When the card is updated."""
        self.user_id = msg.ctx.user_id or msg.target.user_id
        """The asker (who may stop it, besides admins)."""
        self.go = asyncio.Event()
        """Set when the turn may run (it is first in its conversation)."""
        self.done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        """Resolves once the card is final."""
        self.task: asyncio.Task[None] | None = None
        """The task running the turn."""
        self.stop_note = ""
        """What the card says when stopped (empty: the default note)."""
        self.stop_requested = False
        """A stop was asked for (backs up the task cancellation)."""
        self.entered = False
        """The task has started running its body (cancelling it now finishes the card)."""
        self.finishing = False
        """The card is being finalized: too late to stop."""
        self.started_at = time.time()
        """Unix time the turn started (left the queue)."""
        self.running = False
        """The turn left its line and runs: too late to move it to another process."""
        self.moving: asyncio.Future[bool] | None = None
        """While a draining gateway moves the turn to the fleet: resolves to whether it moved (the turn does not
        start before)."""
        self.moved = False
        """The turn was moved to another process, which answers it (its card here ends saying so)."""
        self.tool_calls: dict[str, dict[str, Any]] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.answer = ""
        """The final (or partial) answer."""
        self.outcome = "failed:internal"
        """``done``, ``failed:<reason>``, ``stopped`` or ``moved``."""
        self.row_writes: list[asyncio.Task[None]] = []
        """Tool-call rows of this turn being written to the Store."""
        self.model = ""
        """The model that answered the last round (:class:`ModelAnswering`); empty when not told."""
        self.model_calls: list[dict[str, Any]] = []
        """Each model call's usage as the audit record keeps it (:func:`~botgateway.usage.recorder.usage_entry`)."""
        self.listener: EventListener | None = None
        """Told of each event as the card is (an HTTP API client's stream); ``None``: nobody listens."""
        self.progress = progress
        """What its card's record keeps to run it again after a crash (``None``: it is not to be resumed)."""

    def observe(self, event: TurnEvent) -> None:
        """Keep what the audit record needs (and its card's record, to resume it)."""
        if self.progress is not None:
            self.progress.observe(event)
        if isinstance(event, ToolCallStarted):
            self.tool_calls[event.call_id] = {
                "name": event.name, "arguments": _REDACT.redact(dict(event.arguments)), "started_at": time.time()
            }
        elif isinstance(event, ToolCallFinished):
            entry = self.tool_calls.setdefault(event.call_id, {"name": event.name, "arguments": {}})
            entry.update(ok=event.ok, summary=redact_text(event.summary), duration_s=round(event.duration_s, 3))
            if event.sources:  # provenance, for the feedback on the answer and the audit
                entry["sources"] = [_source(source) for source in event.sources]
        elif isinstance(event, ModelAnswering):
            self.model = event.model
        elif isinstance(event, ApprovalDecided):
            self.tool_calls.setdefault(event.call_id, {"name": event.name, "arguments": {}})["approval"] = _approval(event)
        elif isinstance(event, UsageReported):
            self.model = event.model or self.model
            self.prompt_tokens += event.prompt_tokens
            self.completion_tokens += event.completion_tokens
            self.model_calls.append(usage_entry(event, time.time()))  # each call's usage row (botgateway usage)
        elif isinstance(event, TurnDone):
            self.outcome = "done"
            self.answer = event.result.answer
            self.prompt_tokens = event.result.usage.prompt_tokens or self.prompt_tokens
            self.completion_tokens = event.result.usage.completion_tokens or self.completion_tokens
        elif isinstance(event, TurnFailed):
            self.outcome = f"failed:{event.reason}"
            self.answer = event.partial_answer

    def tool_call_row(self, event: TurnEvent) -> ToolCallRow | None:
        """The row written when ``event`` is a tool call starting or ending (None for other events)."""
        if not isinstance(event, (ToolCallStarted, ToolCallFinished)):
            return None
        msg = self.msg
        row = ToolCallRow(
            turn_id=self.turn_id,
            call_id=event.call_id,
            phase="started",
            name=event.name,
            at=time.time(),
            platform=msg.platform,
            conversation_id=msg.conversation_id,
            user_id=self.user_id,
            **self._where(),
        )
        if isinstance(event, ToolCallStarted):
            return dataclasses.replace(
                row, question=redact_text(msg.text), arguments=_REDACT.redact(dict(event.arguments))
            )
        return dataclasses.replace(
            row, phase="finished", ok=event.ok, summary=redact_text(event.summary), duration_s=round(event.duration_s, 3),
            approval=str(self.tool_calls.get(event.call_id, {}).get("approval", "")),
        )

    def _where(self) -> _Where:
        """Who asked where, as audit records name it."""
        msg = self.msg
        return {
            "principal": asker_of(msg),
            "team": msg.target.workspace_id,
            "channel": msg.ctx.chat_id or msg.target.chat_id,
            "role": ",".join(sorted(msg.ctx.roles)),
        }

    def audit_record(self, outcome: TurnOutcome, duration_s: float) -> AuditRecord:
        """The turn's audit record, once it ended as ``outcome``."""
        msg = self.msg
        metrics = outcome.metrics
        return AuditRecord(
            turn_id=self.turn_id,
            platform=msg.platform,
            conversation_id=msg.conversation_id,
            user_id=self.user_id,
            question=redact_text(msg.text),
            outcome=self.outcome,
            answer=redact_text(outcome.answer),
            tool_calls=tuple(self.tool_calls.values()),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            started_at=self.started_at,
            duration_s=round(duration_s, 3),
            extra={**({"card": metrics.to_dict()} if metrics is not None else {}),
                   **({RESUMED_FROM: resumed} if (resumed := msg.target.extra.get(RESUMED_FROM)) else {}),
                   **({"model": self.model} if self.model else {}),
                   **({USAGE_KEY: list(self.model_calls)} if self.model_calls else {})},
            **self._where(),
        )


def _source(source: Source) -> dict[str, Any]:
    """A source as the audit keeps it: its fields that say something."""
    return {key: value for key, value in dataclasses.asdict(source).items() if value not in ("", 0.0, False)}


def _approval(event: ApprovalDecided) -> str:
    """The approval as the audit names it: ``approved by slack:U0ALICE``, ``denied by …``, ``timeout``."""
    return f"{event.verdict} by {event.by_id}" if event.by_id else event.verdict
