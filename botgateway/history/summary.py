"""The summary turn: how older turns are condensed into one, and how it sits in history.

The summary reaches the model as a ``user`` message followed by a short
``assistant`` acknowledgement. That keeps the user/assistant alternation that
strict OpenAI-compatible providers enforce, and never adds a second ``system``
message (several providers reject one that is not first). Each new summary
folds the previous one in, so it stays cumulative.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from botgateway.history.tokens import content_text
from botgateway.stores.base import Message, StoredTurn

__all__ = [
    "MESSAGE_CHARS",
    "SUMMARY_ACK",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTION",
    "TOOL_RESULT_CHARS",
    "build_summary_request",
    "render_transcript",
    "summary_text",
    "summary_turn",
]

SUMMARY_HEADER = "Summary of our earlier conversation (context only; older messages were condensed):"
"""Opens the ``user`` message that carries the summary."""
SUMMARY_ACK = "Noted. I will use this summary as context for the rest of the conversation."
"""The ``assistant`` reply that closes the summary pair."""

SUMMARY_INSTRUCTION = (
    "You maintain the running summary of a chat between operations staff and an "
    "infrastructure assistant that looks things up with tools. Merge the previous summary "
    "(if any) and the new part of the conversation into ONE updated summary that replaces "
    "both. Keep every fact a later question may rely on: host names, IPs, instance ids, "
    "regions, accounts, states, numbers, what the user asked for, decisions and open "
    "questions. Leave out greetings and how the tools were called. Write in the language "
    "the user writes in, as short plain lines, at most about {words} words. Reply with the "
    "summary only."
)
"""System instruction of the summarization request (``{words}`` is the length target)."""

TOOL_RESULT_CHARS = 1500
"""Tool output longer than this is cut in the transcript sent to the summarizer."""
MESSAGE_CHARS = 6000
"""A question or answer longer than this is cut in the transcript too, so one huge message cannot sink the summary."""


def summary_turn(text: str, *, created_at: float | None = None) -> StoredTurn:
    """The stored turn that stands for summarized older turns."""
    return StoredTurn(
        turn_id=f"summary-{uuid.uuid4().hex[:16]}",
        messages=(
            {"role": "user", "content": f"{SUMMARY_HEADER}\n{text}"},
            {"role": "assistant", "content": SUMMARY_ACK},
        ),
        created_at=time.time() if created_at is None else created_at,
        is_summary=True,
    )


def summary_text(turn: StoredTurn) -> str:
    """The summary inside a summary turn (its first message, header removed)."""
    if not turn.messages:
        return ""
    text = content_text(turn.messages[0].get("content"))
    return text.removeprefix(SUMMARY_HEADER).strip()


def render_transcript(turns: Sequence[StoredTurn], *, tool_result_chars: int = TOOL_RESULT_CHARS) -> str:
    """Turns as a plain transcript for the summarizer (long tool output and long messages cut)."""
    lines: list[str] = []
    for turn in turns:
        names: dict[str, str] = {}
        for message in turn.messages:
            role = message.get("role")
            text = content_text(message.get("content")).strip()
            if role == "user":
                lines.append(f"User: {_cut(text, MESSAGE_CHARS)}")
            elif role == "assistant":
                if text:
                    lines.append(f"Assistant: {_cut(text, MESSAGE_CHARS)}")
                for call in message.get("tool_calls") or ():
                    function = call.get("function") or {}
                    name = str(function.get("name", "?"))
                    names[str(call.get("id", ""))] = name
                    lines.append(f"Assistant called tool {name} with {function.get('arguments', '{}')}")
            elif role == "tool":
                name = names.get(str(message.get("tool_call_id", "")), "tool")
                lines.append(f"Result of {name}: {_cut(text, tool_result_chars)}")
        lines.append("")
    return "\n".join(lines).strip()


def _cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"


def build_summary_request(previous: str, turns: Sequence[StoredTurn], *, target_tokens: int) -> list[Message]:
    """The chat request that asks the model for the updated, cumulative summary."""
    words = max(50, int(target_tokens * 0.6))
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTION.format(words=words)},
        {
            "role": "user",
            "content": (
                f"Previous summary:\n{previous or '(none)'}\n\n"
                f"New part of the conversation:\n{render_transcript(turns)}\n\n"
                "Write the updated summary."
            ),
        },
    ]
