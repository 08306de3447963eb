"""The streaming tool loop: rounds of model calls and tools, bounded by the turn's deadline."""

from __future__ import annotations

from botgateway.loop.deadline import TurnDeadline, TurnTimedOut
from botgateway.loop.tool_loop import (
    CLOSING_INSTRUCTION,
    REFRESH_NOTE,
    HistoryStore,
    ToolLoop,
    max_rounds_note,
    system_prompt,
)

__all__ = [
    "CLOSING_INSTRUCTION",
    "REFRESH_NOTE",
    "HistoryStore",
    "ToolLoop",
    "TurnDeadline",
    "TurnTimedOut",
    "max_rounds_note",
    "system_prompt",
]
