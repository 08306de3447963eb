"""One strategy's run, in its own process: the measured side of the benchmark.

``python -m bench.worker JOB.json RESULT.json`` reads the run settings, the
strategy and the URLs of the fake model and card API (served by the
orchestrator process), starts every turn at once through the real
:class:`~botgateway.loop.ToolLoop` and :class:`~botgateway.streaming.CardStreamer`,
and writes what it observed: per turn, when each piece of answer text was
generated; per process, CPU time and peak RSS. Only the pipeline runs here,
so those numbers are ours alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from bench.model import make_lookup_tool, user_text
from bench.settings import BenchSettings
from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget, RateLimit
from botgateway.cards.policy import BufferPolicy
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.config import BufferPolicyConfig, CardConfig, LLMConfig, MemoryConfig, load_config
from botgateway.events import AnswerDelta, RoundStarted, ThoughtDelta, ToolCallStarted, TurnDone, TurnEvent, TurnFailed
from botgateway.llm import LLMClient
from botgateway.loop import ToolLoop
from botgateway.memory import Memory
from botgateway.sink import CardTarget
from botgateway.stores import open_store
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.card_api import HttpCardSink


@dataclass
class TurnTrace:
    """What the worker saw of one turn (mutable while the turn runs)."""

    turn: int
    """Index of the turn."""
    turn_id: str
    """Id sent to the card API with every call."""
    started_at: float = 0.0
    """When the turn began (before the card was created)."""
    first_output_at: float | None = None
    """First model output: a thought, answer text or a tool call."""
    answer_deltas: list[tuple[float, int]] = field(default_factory=list)
    """(time, answer characters so far) of the last round, one pair per chunk."""
    chunks: int = 0
    """Text and thought chunks received."""
    ended_at: float | None = None
    """When TurnDone/TurnFailed arrived."""
    outcome: str = ""
    """``done``, ``failed:<reason>`` or ``crashed:<error>``."""
    answer: str = ""
    """The loop's final answer (TurnDone) or partial answer."""
    finished_at: float | None = None
    """When ``CardStreamer.finish()`` returned."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The streamer's own :class:`~botgateway.metrics.CardMetrics`."""

    def observe(self, event: TurnEvent, now: float) -> None:
        """Note ``event``, which the pipeline received at ``now``."""
        if isinstance(event, RoundStarted):
            # Only the last round's text is the answer; earlier text becomes narration.
            self.answer_deltas = []
        elif isinstance(event, (AnswerDelta, ThoughtDelta)) and event.text:
            self.chunks += 1
            if self.first_output_at is None:
                self.first_output_at = now
            if isinstance(event, AnswerDelta):
                total = (self.answer_deltas[-1][1] if self.answer_deltas else 0) + len(event.text)
                self.answer_deltas.append((now, total))
        elif isinstance(event, ToolCallStarted):
            if self.first_output_at is None:
                self.first_output_at = now
        elif isinstance(event, TurnDone):
            self.ended_at = now
            self.outcome = "done"
            self.answer = event.result.answer
        elif isinstance(event, TurnFailed):
            self.ended_at = now
            self.outcome = f"failed:{event.reason}"
            self.answer = event.partial_answer

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the orchestrator."""
        return {
            "turn": self.turn,
            "turn_id": self.turn_id,
            "started_at": self.started_at,
            "first_output_at": self.first_output_at,
            "answer_deltas": self.answer_deltas,
            "chunks": self.chunks,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "answer": self.answer,
            "finished_at": self.finished_at,
            "metrics": self.metrics,
        }


def _policy_and_card(settings: BenchSettings, strategy: str) -> tuple[BufferPolicy, CardConfig]:
    if settings.config:
        config = load_config(settings.config)
        policy_config, card = config.adapters.dingtalk.policy, config.card
    else:
        policy_config, card = BufferPolicyConfig(), CardConfig()
    if strategy == "ours":
        return BufferPolicy.from_config(policy_config), card
    if strategy == "every-chunk":
        return BufferPolicy.every_chunk(), card
    if strategy == "no-streaming":
        return BufferPolicy.final_only(), card
    raise ValueError(f"unknown strategy {strategy!r}")


def _rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # psutil is in the bench extra; fall back to /proc
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_strategy(settings: BenchSettings, strategy: str, llm_url: str, card_url: str) -> dict[str, Any]:
    """Run every turn of ``strategy`` at once against the given fakes; the worker's observations."""
    policy, card = _policy_and_card(settings, strategy)
    deadline = settings.final_deadline_s
    with tempfile.TemporaryDirectory(prefix="botgateway-bench-") as tmp:
        store = await open_store(MemoryConfig(store="sqlite", sqlite_path=str(Path(tmp) / "bench.db")))
        llm = LLMClient(
            LLMConfig(provider="custom", base_url=llm_url, model="bench-model", max_rounds=settings.tool_rounds + 1),
            base_url=llm_url,
        )
        tools = ToolRegistry()
        tools.add(make_lookup_tool(settings.tool_ms / 1000.0))
        memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
        loop = ToolLoop(llm, tools, memory, max_rounds=settings.tool_rounds + 1, system_prompt="You are a benchmark.")
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        session = aiohttp.ClientSession(connector=connector)
        # One budget for every call of the app, as the fake (and DingTalk's card API) counts them.
        sink = HttpCardSink(
            card_url,
            session=session,
            rate=RateLimit(rate_per_s=settings.qps, burst=settings.client_burst),
            one_bucket=True,
            platform="benchcard",
            app_key="bench-app",
        )
        budget = RateBudget() if strategy != "every-chunk" else None
        # Cards closed after a fallback delivery; whatever still runs at the end is cancelled.
        background = BackgroundTasks()
        traces = [TurnTrace(turn=i, turn_id=f"{strategy}-{i}") for i in range(settings.turns)]

        async def one(trace: TurnTrace) -> None:
            target = CardTarget(
                platform=sink.platform,
                chat_id=f"chat-{trace.turn}",
                turn_id=trace.turn_id,
                user_id=f"user-{trace.turn}",
                user_name=f"user {trace.turn}",
                is_group=True,
                workspace_id="bench-app",
            )
            state = CardState(
                locale="en",
                show_thought=card.show_thought,
                thought_chars=card.thought_chars,
                footer=card.footer,
                model_label="bench model",
                asker=target.user_name,
            )
            streamer = CardStreamer(
                sink, target, policy=policy, budget=budget, state=state, timing=StreamerTiming(final_deadline_s=deadline),
                background=background,
            )
            ctx = ToolContext(user_id=target.user_id, platform=sink.platform, conversation_id=f"conv-{trace.turn}", chat_id=target.chat_id, is_group=True)
            if settings.ramp_s:
                # Simulated arrival time of this question, not synchronization.
                await asyncio.sleep(settings.ramp_s * trace.turn / settings.turns)
            trace.started_at = time.monotonic()
            try:
                # The gateway's order: create the card, run the turn, finish the card.
                await streamer.start()
                async for event in loop.run_turn(ctx.conversation_id, user_text(trace.turn), ctx, turn_id=trace.turn_id):
                    trace.observe(event, time.monotonic())
                    await streamer.feed(event)
            except Exception as exc:  # recorded, never hidden: the report counts crashed turns
                trace.outcome = f"crashed:{type(exc).__name__}: {exc}"[:300]
            metrics = await streamer.finish()
            trace.finished_at = time.monotonic()
            trace.metrics = metrics.to_dict()

        rss_before = _rss_bytes()
        cpu_before = _cpu_s()
        wall_before = time.monotonic()
        try:
            await asyncio.gather(*(one(trace) for trace in traces))
        finally:
            wall = time.monotonic() - wall_before
            cpu = _cpu_s() - cpu_before
            await background.aclose()
            await session.close()
            await llm.aclose()
            await store.close()
    return {
        "strategy": strategy,
        "turns": [trace.to_dict() for trace in traces],
        "process": {
            "pid": os.getpid(),
            "cpu_s": cpu,
            "wall_s": wall,
            "run_started_at": wall_before,
            "rss_before_bytes": rss_before,
            "peak_rss_bytes": _peak_rss_bytes(),
        },
    }


def _quiet_logs() -> None:
    # The streamer logs every throttle at info; thousands of lines would only cost CPU here.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker subprocess."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.worker JOB.json RESULT.json (started by python -m bench)", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    _quiet_logs()
    settings = BenchSettings.from_dict(job["settings"])
    try:
        result = asyncio.run(run_strategy(settings, job["strategy"], job["llm_url"], job["card_url"]))
    except Exception as exc:
        # The traceback is for whoever debugs the pipeline; the last line is what the report shows first.
        traceback.print_exc()
        print(f"worker failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    Path(args[1]).write_text(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
