"""The card's status board: narration and one line per tool call, and the approvals waiting now.

:class:`~botgateway.cards.state.CardState` folds the turn's events into the
card; the board owns the blocks above the answer. A call's line goes
running → (waiting for approval →) done or failed, and says how its approval
was decided ("✅ approved by @alice").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from botgateway.cards import render
from botgateway.events import ApprovalDecided, ApprovalRequested, ToolCallFinished, ToolCallStarted
from botgateway.snapshot import ApprovalPrompt, Block, Narration, ToolLine
from botgateway.strings import t

__all__ = ["SUMMARY_CHARS", "StatusBoard", "shown_arguments"]

SUMMARY_CHARS = 120
"""A tool line's summary is cut to this length: the card is a status board, not a log."""


def shown_arguments(arguments: Mapping[str, Any]) -> str:
    """The whole arguments as JSON, as an approver sees them (backticks escaped, so they cannot end a code block)."""
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str).replace("`", "\\u0060")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class StatusBoard:
    """The blocks of one card (mutable; owned by its :class:`~botgateway.cards.state.CardState`)."""

    def __init__(self, locale: str) -> None:
        """``locale``: the language of the notes on the lines (approval outcomes)."""
        self.locale = locale
        """The language of the approval notes."""
        self._blocks: list[Block] = []
        self._index: dict[str, int] = {}
        self._prompts: dict[str, ApprovalPrompt] = {}
        self._not_approved: set[str] = set()

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Narration and tool lines, in time order."""
        return tuple(self._blocks)

    @property
    def approvals(self) -> tuple[ApprovalPrompt, ...]:
        """The approvals waiting now, oldest first."""
        return tuple(self._prompts.values())

    def __len__(self) -> int:
        return len(self._blocks)

    def narrate(self, round_no: int, text: str) -> None:
        """Add the visible text of a round that went on to call tools."""
        self._blocks.append(Narration(round=round_no, text=text))

    def started(self, event: ToolCallStarted) -> ToolLine:
        """A call's line, running."""
        line = ToolLine(call_id=event.call_id, name=event.name, args_preview=render.format_args(event.arguments),
                        status="running")
        self._index[event.call_id] = len(self._blocks)
        self._blocks.append(line)
        return line

    def finished(self, event: ToolCallFinished) -> ToolLine:
        """A call's line, done or failed (a call never approved shows its approval's outcome as the reason)."""
        line = ToolLine(
            call_id=event.call_id,
            name=event.name,
            args_preview="",
            status="done" if event.ok else "failed",
            duration_s=event.duration_s,
            summary=_short(" ".join(event.summary.split()), SUMMARY_CHARS),
        )
        previous = self._line(event.call_id)
        if previous is None:
            # A finish without a start (a loop that reports only outcomes): still show it.
            self._index[event.call_id] = len(self._blocks)
            self._blocks.append(line)
            return line
        if event.call_id in self._not_approved:
            # It never ran: the approval's outcome is the reason, not the note written for the model.
            line = replace(line, summary=previous.approval)
        else:
            line = replace(line, approval=previous.approval)
        line = replace(line, args_preview=previous.args_preview)
        self._blocks[self._index[event.call_id]] = line
        return line

    def approval_requested(self, event: ApprovalRequested) -> ApprovalPrompt:
        """The call waits: its line says so (with the code to reply with) and the card shows the prompt."""
        prompt = ApprovalPrompt(code=event.code, token=event.token, call_id=event.call_id, tool=event.name,
                                arguments=shown_arguments(event.arguments), asker=event.asker, timeout_s=event.timeout_s)
        self._prompts[event.call_id] = prompt  # by call: a code may be handed out again later
        self._change(event.call_id, status="waiting", approval=t(self.locale, "approval_pending", code=event.code))
        return prompt

    def approval_decided(self, event: ApprovalDecided) -> str:
        """The prompt goes; the call's line says how it was decided (returned). An approved call runs now."""
        prompt = self._prompts.pop(event.call_id, None)
        note = self._decision_note(event, prompt.timeout_s if prompt else 0.0)
        if not event.approved:
            self._not_approved.add(event.call_id)
        self._change(event.call_id, status="running" if event.approved else "waiting", approval=note)
        return note

    def end(self, tool_reason: str) -> None:
        """The turn ended: lines still running or waiting fail with ``tool_reason``; no approval waits any more."""
        for index, block in enumerate(self._blocks):
            if isinstance(block, ToolLine) and block.status in ("running", "waiting"):
                self._blocks[index] = replace(block, status="failed", summary=tool_reason)
        self._prompts.clear()

    def _decision_note(self, event: ApprovalDecided, timeout_s: float) -> str:
        locale = self.locale
        if event.verdict == "approved":
            return t(locale, "approval_approved", by=event.by)
        if event.verdict == "timeout":
            return t(locale, "approval_timeout", timeout=render.format_duration(timeout_s, locale))
        if event.verdict == "denied":
            return t(locale, "approval_denied", by=event.by)
        if event.verdict == "too_long":
            return t(locale, "approval_too_long")
        return t(locale, "approval_unavailable")

    def _line(self, call_id: str) -> ToolLine | None:
        index = self._index.get(call_id)
        block = self._blocks[index] if index is not None else None
        return block if isinstance(block, ToolLine) else None

    def _change(self, call_id: str, **changes: Any) -> None:
        """Change the line of ``call_id``, if the card shows one."""
        line = self._line(call_id)
        if line is not None:
            self._blocks[self._index[call_id]] = replace(line, **changes)
