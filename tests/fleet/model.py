"""The fleet tests' model: ``[q N]`` gets answer N in about two seconds, ``[slow N]`` streams for minutes."""

from __future__ import annotations

import re
from typing import Any

from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks

__all__ = ["answer_of", "respond"]

_QUESTION = re.compile(r"\[(q|slow) (\d+)\]")


def answer_of(number: int) -> str:
    """The model's answer to question ``number``: long enough to stream for a while, distinct per question."""
    return f"Answer {number}: " + " ".join(f"host-{number}-{k} is running in cn-hangzhou." for k in range(12))


def respond(body: dict[str, Any]) -> Script:
    """Answer the newest ``[q N]`` in about two seconds, or stream ``[slow N]`` for ten minutes."""
    user_texts = [str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user"]
    found = _QUESTION.findall(user_texts[-1]) if user_texts else []
    if not found:
        return Script.error(400, "fleet test model: no [q N] in the question")
    kind, number = found[-1][0], int(found[-1][1])
    if kind == "slow":
        chunks = [role_chunk(), *text_chunks("Still looking. " * 4000, 8), finish_chunk("stop")]
        return Script(chunks=chunks, delay_s=0.15)
    chunks = [role_chunk(), *text_chunks(answer_of(number), 12), finish_chunk("stop")]
    return Script(chunks=chunks, delay_s=2.0 / len(chunks))
