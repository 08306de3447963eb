"""The benchmark's scripted model: one deterministic answer per turn, paced against the clock.

Turn ``i`` asks ``[bench-turn i] …``; the responder finds ``i`` in the
request, counts the tool rounds already in it, and plays either another
tool-call round (``search_inventory_by_ip``, the static inventory's real tool)
or the turn's answer. Answers are seeded per turn (turn *i* gets the same
answer in every scenario), so the orchestrator knows each one exactly and can
check what the platform ended up showing.

:class:`BenchModelServer` paces each stream against the clock (chunk *k* is
due at ``start + k * interval``) rather than sleeping between chunks, so a
busy machine does not stretch every answer; it records when each stream
started and ended, which the report shows as the generation achieved.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks, tool_call_chunks, usage_chunk
from tools.demo.server import ScriptedLLMServer

TURN_TAG = re.compile(r"\[bench-turn (\d+)\]")
LOOKUP_TOOL = "search_inventory_by_ip"
"""The static inventory's address lookup (``tools.inventory`` is enabled in the bench's config)."""

_WORDS = (
    "host instance running stopped region zone cpu memory disk load uptime kernel "
    "nginx redis mysql deploy rollback alert latency p99 error rate healthy degraded "
    "cn-hangzhou cn-shanghai us-east-1 ap-guangzhou vpc subnet 10.0.1.17 i-0abc123 "
    "ecs cvm ec2 tag owner team-sre 运行中 已停止 主机 负载 正常 告警"
).split()


def user_text(turn: int) -> str:
    """The question mention ``turn`` asks."""
    return f"[bench-turn {turn}] which server is 10.0.{turn // 250}.{turn % 250}?"


def make_answer(seed: int, turn: int, chars: tuple[int, int]) -> str:
    """Turn ``turn``'s exact answer: Markdown-ish ops prose (CJK words included), the same in every scenario."""
    rng = random.Random(seed * 1_000_003 + turn)
    length = rng.randint(*chars)
    head = f"**web-{turn}** (10.0.{turn // 250}.{turn % 250}) is running."
    words = [head]
    size = len(head)
    while size < length:
        word = rng.choice(_WORDS)
        if rng.random() < 0.06:
            word += ".\n\n-"
        words.append(word)
        size += len(word) + 1
    text = " ".join(words)[:length].rstrip()
    # No trailing whitespace or dangling markup: the exact-match check compares what renders.
    return text.rstrip("-*` \n") or head


def make_answers(seed: int, n: int, chars: tuple[int, int]) -> list[str]:
    """The answers of turns ``0 .. n-1``."""
    return [make_answer(seed, turn, chars) for turn in range(n)]


def turn_of(body: dict[str, Any]) -> int | None:
    """The turn a chat-completions request belongs to (from its user message), if any."""
    turn = None
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            match = TURN_TAG.search(str(message.get("content") or ""))
            if match:
                turn = int(match.group(1))
    return turn


def answer_script(answer: str, gen_s: float, chunk_chars: int) -> Script:
    """The answer streamed ``chunk_chars`` at a time; the last chunk is due ``gen_s`` after the first byte."""
    items: list[Any] = [role_chunk(), *text_chunks(answer, chunk_chars), finish_chunk("stop"), usage_chunk(20, len(answer) // 4)]
    return Script(chunks=items, delay_s=gen_s / max(1, len(items) - 1))


def make_responder(answers: list[str], *, gen_s: float, chunk_chars: int, tool_rounds: int) -> Callable[[dict[str, Any]], Script]:
    """The :class:`BenchModelServer` responder for a scenario."""

    def respond(body: dict[str, Any]) -> Script:
        turn = turn_of(body)
        if turn is None or turn >= len(answers):
            return Script.error(400, "benchmark model: the request names no known [bench-turn N]")
        messages = body.get("messages") or []
        done_rounds = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if done_rounds < tool_rounds:
            call = (f"call_{turn}_{done_rounds}", LOOKUP_TOOL, {"ip": "10.0.1.100"})
            items = [role_chunk(), *tool_call_chunks([call]), finish_chunk("tool_calls"), usage_chunk(30, 15)]
            return Script(chunks=items, delay_s=0.02)
        return answer_script(answers[turn], gen_s, chunk_chars)

    return respond


@dataclass
class Generation:
    """One stream the model served."""

    turn: int | None
    """The turn it answered."""
    answer: bool
    """It streamed the answer (not a tool-call round)."""
    requested_at: float
    """When the request arrived (``time.monotonic()``)."""
    ended_at: float = 0.0
    """When the last chunk was written (or the client went away)."""
    completed: bool = False
    """Every chunk was written."""


class BenchModelServer(ScriptedLLMServer):
    """:class:`ScriptedLLMServer` whose streams keep to the clock and are recorded in :attr:`generations`."""

    def __init__(self, responder: Callable[[dict[str, Any]], Script], *, tool_rounds: int = 0) -> None:
        super().__init__(responder=responder, model="bench-model", max_recorded=0)
        self._tool_rounds = tool_rounds
        self.generations: list[Generation] = []
        """Every stream served, in order of arrival."""

    async def _stream(self, request: web.Request, body: dict[str, Any], script: Script, number: int) -> web.StreamResponse:
        rounds = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant" and m.get("tool_calls"))
        record = Generation(turn_of(body), rounds >= self._tool_rounds, time.monotonic())
        self.generations.append(record)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        envelope = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": str(body.get("model") or self.model)}
        try:
            for k, item in enumerate(c for c in script.chunks if not isinstance(c, Pause)):
                wait = record.requested_at + k * script.delay_s - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                payload = item if isinstance(item, str) else json.dumps({**envelope, **item}, ensure_ascii=False)
                await response.write(f"data: {payload}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            record.completed = True
        except ConnectionError:
            self.client_disconnects += 1
        record.ended_at = time.monotonic()
        return response


def generation_stats(generations: list[Generation], gen_s: float) -> dict[str, Any]:
    """How long the answer streams took (the model is paced to ``gen_s``; more means this machine was too busy)."""
    answers = [g.ended_at - g.requested_at for g in generations if g.completed and g.answer and g.ended_at]
    answers.sort()
    if not answers:
        return {"streams": len(generations), "p50_s": None, "max_s": None, "target_s": gen_s}
    return {
        "streams": len(generations),
        "p50_s": answers[len(answers) // 2],
        "max_s": answers[-1],
        "target_s": gen_s,
        "late": sum(1 for a in answers if a > gen_s + max(0.25, gen_s * 0.05)),
    }


__all__ = [
    "LOOKUP_TOOL", "BenchModelServer", "Generation", "answer_script", "generation_stats", "make_answer",
    "make_answers", "make_responder", "turn_of", "user_text",
]
