"""The demo as the history summarizer: a deterministic running summary when memory asks to compress a conversation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botgateway.history import SUMMARY_INSTRUCTION
from tools.demo.question import IPV4

__all__ = ["compose_summary", "is_summary_request"]


def is_summary_request(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True for the history-compression request :mod:`botgateway.history.memory` sends."""
    opening = SUMMARY_INSTRUCTION.split(".", 1)[0]
    return bool(messages) and messages[0].get("role") == "system" and str(messages[0].get("content", "")).startswith(opening)


def compose_summary(messages: Sequence[Mapping[str, Any]]) -> str:
    """A deterministic running summary: the previous one plus the questions asked and hosts named.

    The demo model cannot condense prose, but it keeps what later questions rely on.
    """
    request = str(messages[-1].get("content", "")) if messages else ""
    previous, _, transcript = request.partition("New part of the conversation:")
    previous = previous.removeprefix("Previous summary:").strip()
    lines = [] if previous in ("", "(none)") else [previous]
    found = sorted(set(IPV4.findall(transcript)))
    if found:
        lines.append("Addresses discussed: " + ", ".join(found))
    questions = [line.removeprefix("User: ").strip() for line in transcript.splitlines() if line.startswith("User: ")]
    if questions:
        lines.append("Questions asked: " + "; ".join(q if len(q) <= 60 else q[:59] + "…" for q in questions[-10:]))
    return "\n".join(lines) or "Nothing to keep from the earlier conversation."
