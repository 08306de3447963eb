"""The benchmark's scripted model: one deterministic answer per turn, paced against the clock.

Turn ``i`` asks ``[bench-turn i] …``; the responder finds ``i`` in the
request, counts the tool rounds already in it, and plays either another
tool-call round (``search_inventory_by_ip``, the static inventory's real tool)
or the turn's answer. Answers are seeded per turn (turn *i* gets the same
answer in every scenario), so the orchestrator knows each one exactly and can
check what the platform ended up showing.

:class:`BenchModelServer` paces each stream against the clock (chunk *k* is
due at ``start + k * interval``, or at its own time in a :class:`PacedScript`)
rather than sleeping between chunks, so a busy machine does not stretch every
answer; chunks already due go out in one write. It records when each stream
started and ended, which the report shows as the generation achieved, and
when its first and last answer text were written.

The ``core`` scenario's streams (:func:`core_script`) keep one chunk interval
for every turn (``N / core_chunks_per_s``), so a longer answer takes longer as
with a real model; each turn's first text comes a seeded fraction of an
interval later than the others', so N streams do not write in lockstep; and the
finish and usage chunks go out with the last text, as providers send them.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tools.demo.script import Chunk, Pause, Script, finish_chunk, role_chunk, text_chunks, tool_call_chunks, usage_chunk
from tools.demo.server import ScriptedLLMServer

TURN_TAG = re.compile(r"\[bench-turn (\d+)\]")
WARMUP_TEXT = "[bench-warmup] are you there?"
"""The ``core`` worker's warm-up question (not measured): answered with :data:`WARMUP_ANSWER`."""
WARMUP_ANSWER = "Ready."
"""The answer to :data:`WARMUP_TEXT`."""
BENCH_MODEL = "bench-model"
"""The model the server says answered (the workers' config asks for it)."""
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


@dataclass(frozen=True)
class PacedScript(Script):
    """A :class:`Script` whose chunks are due at their own times rather than every ``delay_s``."""

    due_s: tuple[float, ...] = ()
    """When each chunk is due, in seconds after the request arrived (one per chunk, non-decreasing)."""
    texts: tuple[bool, ...] = ()
    """Which chunks carry answer text (one per chunk; empty: found out per request)."""
    events: tuple[bytes, ...] = ()
    """Every chunk as its SSE event, encoded ahead (one per chunk; empty: encoded as it goes out)."""


_PHASE_STEP = 0.6180339887498949
"""Turn *i*'s first text is ``1 + frac(i × this)`` intervals after the request: evenly spread phases, no lockstep."""


def core_script(answer: str, turn: int, interval_s: float, chunk_chars: int) -> PacedScript:
    """Turn ``turn``'s answer for the ``core`` scenario: one text chunk every ``interval_s``, the end with the last."""
    texts = text_chunks(answer, chunk_chars)
    first = interval_s * (1.0 + (turn * _PHASE_STEP) % 1.0)
    text_due = [first + j * interval_s for j in range(len(texts))]
    items: list[Any] = [role_chunk(), *texts, finish_chunk("stop"), usage_chunk(20, len(answer) // 4)]
    envelope = {"id": f"chatcmpl-bench-{turn}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": BENCH_MODEL}
    return PacedScript(chunks=items, due_s=(0.0, *text_due, text_due[-1], text_due[-1]),
                       texts=tuple(carries_text(item) for item in items),
                       events=tuple(_event(item, envelope) for item in items))


def make_core_responder(answers: list[str], *, interval_s: float, chunk_chars: int) -> Callable[[dict[str, Any]], Script]:
    """The :class:`BenchModelServer` responder of a ``core`` scenario (no tool rounds; the warm-up answered at once).

    Every turn's script is built and encoded here, before the run: built as the requests arrived, a burst of
    them held the server's loop for a few hundred milliseconds (about a millisecond each), and the first chunks of
    the streams already running came late, all together, which measured the model server instead of the core.
    """
    scripts = [core_script(answer, turn, interval_s, chunk_chars) for turn, answer in enumerate(answers)]

    def respond(body: dict[str, Any]) -> Script:
        turn = turn_of(body)
        if turn is None and any(WARMUP_TEXT in str(m.get("content")) for m in body.get("messages") or []):
            return Script.text(WARMUP_ANSWER)
        if turn is None or turn >= len(scripts):
            return Script.error(400, "benchmark model: the request names no known [bench-turn N]")
        return scripts[turn]

    return respond


def carries_text(item: Chunk | str) -> bool:
    """Whether a chunk carries answer text (``delta.content``)."""
    if not isinstance(item, dict):
        return False
    choices = item.get("choices") or ()
    return bool(choices and (choices[0].get("delta") or {}).get("content"))


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
    first_chunk_at: float = 0.0
    """When the first chunk was handed to the socket (0: none was)."""
    first_text_at: float = 0.0
    """When the first chunk carrying answer text was handed to the socket (0: none was)."""
    last_text_at: float = 0.0
    """When the last chunk carrying answer text was (the finish and ``[DONE]`` go with it or after it)."""
    chunks: int = 0
    """Chunks written (``[DONE]`` not counted)."""


class BenchModelServer(ScriptedLLMServer):
    """:class:`ScriptedLLMServer` whose streams keep to the clock and are recorded in :attr:`generations`."""

    def __init__(self, responder: Callable[[dict[str, Any]], Script], *, tool_rounds: int = 0) -> None:
        super().__init__(responder=responder, model=BENCH_MODEL, max_recorded=0)
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
        items = [c for c in script.chunks if not isinstance(c, Pause)]
        due: Sequence[float] = (script.due_s if isinstance(script, PacedScript) and script.due_s
                                else [k * script.delay_s for k in range(len(items))])
        paced = script if isinstance(script, PacedScript) else None
        texts = paced.texts if paced and paced.texts else [carries_text(item) for item in items]
        events = paced.events if paced else ()
        try:
            k = 0
            while k < len(items):
                wait = record.requested_at + due[k] - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                # Everything due by now goes out in one write: a busy machine catches up instead of falling behind.
                now = time.monotonic() - record.requested_at
                start, text = k, False
                while k < len(items) and (k == start or due[k] <= now):
                    text = text or texts[k]
                    k += 1
                batch = list(events[start:k]) if events else [_event(item, envelope) for item in items[start:k]]
                if k == len(items):
                    batch.append(b"data: [DONE]\n\n")
                written_at = time.monotonic()
                await response.write(b"".join(batch))
                record.chunks += k - start
                record.first_chunk_at = record.first_chunk_at or written_at
                if text:
                    record.first_text_at = record.first_text_at or written_at
                    record.last_text_at = written_at
            await response.write_eof()
            record.completed = True
        except ConnectionError:
            self.client_disconnects += 1
        record.ended_at = time.monotonic()
        return response


def _event(item: Chunk | str, envelope: dict[str, Any]) -> bytes:
    """One chunk as an SSE event, with orjson. A core script's are encoded before the run; any other script's as
    they go out, never all of a stream's when its request arrives: 1,000 requests at once would hold up their
    first chunks."""
    return b"data: " + (item.encode() if isinstance(item, str) else orjson.dumps({**envelope, **item})) + b"\n\n"


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
    "BENCH_MODEL", "LOOKUP_TOOL", "WARMUP_ANSWER", "WARMUP_TEXT", "BenchModelServer", "Generation", "PacedScript",
    "answer_script", "carries_text", "core_script", "generation_stats", "make_answer", "make_answers",
    "make_core_responder", "make_responder", "turn_of", "user_text",
]
