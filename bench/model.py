"""The benchmark's scripted model: one deterministic answer per turn, tool rounds first.

Turn ``i`` asks ``[bench-turn i] …``; the responder finds ``i`` in the request,
counts the tool results already in it, and plays either another tool-call
round (to :func:`lookup_host`, a fast local tool) or the turn's answer,
streamed one chunk (``chunk_chars`` characters, one token) every
``1 / tokens_per_s`` seconds. Answers are seeded, so the orchestrator knows
each turn's exact answer and can check what the card API ended up showing.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from typing import Any

from bench.settings import BenchSettings
from botgateway.tooling import tool
from tools.demo.script import Script

TURN_TAG = re.compile(r"\[bench-turn (\d+)\]")

_WORDS = (
    "host instance running stopped region zone cpu memory disk load uptime kernel "
    "nginx redis mysql deploy rollback alert latency p99 error rate healthy degraded "
    "cn-hangzhou cn-shanghai us-east-1 ap-guangzhou vpc subnet 10.0.1.17 i-0abc123 "
    "ecs cvm ec2 tag owner team-sre 运行中 已停止 主机 负载 正常 告警"
).split()


def user_text(turn: int) -> str:
    """The question turn ``turn`` asks."""
    return f"[bench-turn {turn}] which server is 10.0.{turn // 250}.{turn % 250}?"


def make_answers(settings: BenchSettings) -> list[str]:
    """Each turn's exact answer: Markdown-ish ops prose of a seeded length, CJK words included."""
    rng = random.Random(settings.seed)
    low, high = settings.answer_chars
    answers = []
    for turn in range(settings.turns):
        length = rng.randint(low, high)
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
        # Keep the exact-match check honest: no trailing whitespace or dangling markup.
        answers.append(text.rstrip("-*` \n") or head)
    return answers


def make_responder(settings: BenchSettings, answers: list[str]) -> Callable[[dict[str, Any]], Script]:
    """The :class:`~botgateway.scripted_server.ScriptedLLMServer` responder for a run."""
    delay = 1.0 / settings.tokens_per_s

    def respond(body: dict[str, Any]) -> Script:
        messages = body.get("messages") or []
        turn = None
        for message in messages:
            if message.get("role") == "user":
                match = TURN_TAG.search(str(message.get("content") or ""))
                if match:
                    turn = int(match.group(1))
        if turn is None or turn >= len(answers):
            return Script.error(400, "benchmark model: the request names no known [bench-turn N]")
        done_rounds = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if done_rounds < settings.tool_rounds:
            call = (f"call_{turn}_{done_rounds}", "lookup_host", {"query": f"10.0.{turn // 250}.{turn % 250}"})
            return Script.tool_calls([call], delay_s=delay, chunk_size=settings.chunk_chars, arg_size=settings.chunk_chars * 2)
        return Script.text(answers[turn], chunk_size=settings.chunk_chars, delay_s=delay)

    return respond


def make_lookup_tool(latency_s: float) -> Any:
    """The fast local tool the tool rounds call."""

    @tool(timeout_s=10)
    async def lookup_host(query: str) -> str:
        """Find a host in the benchmark inventory.

        Args:
            query: IP address, instance id or host name.
        """
        if latency_s:
            await asyncio.sleep(latency_s)
        return f"web-x ({query}): running, cn-hangzhou, 4 vCPU / 8 GiB, owner team-sre"

    return lookup_host
