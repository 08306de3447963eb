"""Conversation history: memory with its token budget, the cache over the store, summaries, and the write-behind commit queue."""

from __future__ import annotations

from botgateway.history.memory import (
    SUMMARY_ACK,
    SUMMARY_HEADER,
    SUMMARY_INSTRUCTION,
    Memory,
    Summarizer,
    estimate_text_tokens,
    summary_text,
    trim_history,
)
from botgateway.history.summary import MESSAGE_CHARS
from botgateway.history.tokens import estimate_tokens

__all__ = [
    "MESSAGE_CHARS",
    "SUMMARY_ACK",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTION",
    "Memory",
    "Summarizer",
    "estimate_text_tokens",
    "estimate_tokens",
    "summary_text",
    "trim_history",
]
