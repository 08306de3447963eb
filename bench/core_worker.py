"""The ``core`` scenario's measured side: N turns submitted at once through the real Gateway, in the worker.

:func:`serve_core` builds the runtime exactly as ``botgateway run`` does
(:func:`botgateway.cli.runtime.build_runtime`: SQLite store in the scenario's
folder, the real memory, model client, tool loop, ``RateBudget`` and
``Gateway``) but starts no adapter. As one of several workers (``--workers``)
it builds it as worker ``i`` of ``botgateway run --workers K`` does: the Redis
store and the fleet's shared budget, its own instance id, and it submits only
its share of the turns (``job["turns"]``). It builds one message per turn as an
adapter does (a group message in its own channel, so its own conversation,
from its own user). It answers one warm-up question first, unmeasured, so
the one-time costs of a fresh process (the model client's first connection,
code paths run for the first time) are not billed to the first turns, as they
would not be in a process that has been serving; then it prints ``ready`` and
waits for ``go``. Then it hands every
message to ``Gateway.submit`` with the bench's sink (:class:`~bench.core_sink.BenchSink`)
and the product's buffer policy, all at once, and waits until every turn's
card is final. Meanwhile the sink, the memory probe
(:class:`~bench.core_probe.TimedHistory`) and the loop-lag sampler
(:class:`~bench.core_probe.LoopLag`) take their stamps. It writes the stamps
of every turn, the loop-lag samples and the CPU seconds used from ``go`` until
the last card was final, then shuts down in ``botgateway run``'s order.

With ``--profile`` the measured run is profiled with cProfile (the event
loop's thread only) and the top functions are written to ``job["profile_path"]``.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import time
from pathlib import Path
from typing import Any

from bench.core_probe import LoopLag, TimedHistory
from bench.core_sink import BenchSink, TurnStamps
from bench.model import WARMUP_TEXT, user_text
from bench.process_stats import cpu_s, peak_rss_bytes, rss_bytes
from bench.settings import BenchSettings
from bench.worker import wait_for_line
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cli.collector import settle_after_startup
from botgateway.config import Config
from botgateway.gateway import Gateway
from botgateway.messages import InboundMessage, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext

__all__ = ["PLATFORM", "WORKSPACE", "inbound_message", "serve_core"]

PLATFORM = "bench"
"""The platform name of the core scenario's messages and cards."""

WORKSPACE = "T0BENCH"
"""The one workspace every turn is asked in."""


def inbound_message(turn: int | None, *, worker: int = 0) -> InboundMessage:
    """Turn ``turn``'s question as an adapter hands it over: its own channel, conversation and asker
    (``None``: worker ``worker``'s warm-up question, whose card the sink does not record; each worker has its
    own, or the fleet's dedupe would drop the second as a redelivery)."""
    tag = f"WARMUP{worker}" if turn is None else f"{turn:05d}"
    chat, user, name = f"C{tag}", f"U{tag}", f"user{tag}"
    target = CardTarget(platform=PLATFORM, chat_id=chat, user_id=user, user_name=name, is_group=True, locale="en",
                        workspace_id=WORKSPACE, extra={} if turn is None else {"bench_turn": turn})
    key = conversation_key(PLATFORM, "thread", workspace=WORKSPACE, chat=chat, user=user)
    principal = Principal.of(PLATFORM, user, team=WORKSPACE, name=name)
    ctx = ToolContext(user_id=user, user_name=name, platform=PLATFORM, conversation_id=key, chat_id=chat, is_group=True,
                      principal=principal)
    text = WARMUP_TEXT if turn is None else user_text(turn)
    return InboundMessage(platform=PLATFORM, message_id=f"bench-{tag}", conversation_id=key, text=text,
                          target=target, ctx=ctx, principal=principal)


async def _submit(gateway: Gateway, sink: BenchSink, policy: BufferPolicy, msg: InboundMessage,
                  stamps: TurnStamps) -> asyncio.Future[Any] | None:
    stamps.submitted_at = time.monotonic()
    submission = await gateway.submit(msg, sink, policy)
    stamps.status = submission.status
    return submission.done


async def _warm_up(gateway: Gateway, sink: BenchSink, worker: int, timeout_s: float) -> None:
    """Answer the warm-up question, start to final card (unmeasured)."""
    submission = await gateway.submit(inbound_message(None, worker=worker), sink, BufferPolicy.from_config())
    if submission.done is not None:
        await asyncio.wait_for(asyncio.shield(submission.done), timeout_s)


async def _burst(gateway: Gateway, sink: BenchSink, messages: list[InboundMessage], stamps: list[TurnStamps],
                 timeout_s: float) -> None:
    """Submit every message at once, then wait until every card is final (or ``timeout_s`` passed)."""
    policy = BufferPolicy.from_config()
    done = await asyncio.gather(*(_submit(gateway, sink, policy, m, s) for m, s in zip(messages, stamps, strict=True)))
    waiting = [d for d in done if d is not None]
    if waiting:
        await asyncio.wait(waiting, timeout=timeout_s)
    for future, turn in zip(done, stamps, strict=True):
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            turn.status = future.result().outcome


def _write_profile(profiler: cProfile.Profile, path: Path) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write("== by own time ==\n")
    stats.sort_stats("tottime").print_stats(45)
    out.write("\n== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(45)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out.getvalue())


async def serve_core(job: dict[str, Any], config: Config) -> dict[str, Any]:
    """Run one core scenario (see the module docstring); the worker's stamps and numbers."""
    from botgateway.cli.runtime import build_runtime

    settings = BenchSettings.from_dict(job["settings"])
    index = job.get("worker_index")
    turns = [int(t) for t in job.get("turns") or range(int(job["n"]))]
    stamps = {turn: TurnStamps(turn) for turn in turns}
    messages = [inbound_message(turn) for turn in turns]
    turn_of = {m.conversation_id: turn for turn, m in zip(turns, messages, strict=True)}

    def loaded(conversation_id: str, started: float, at: float) -> None:
        turn = turn_of.get(conversation_id)
        if turn is not None:
            stamps[turn].history_started_at, stamps[turn].history_loaded_at = started, at

    async with build_runtime(config, worker_index=index) as runtime:
        runtime.loop.memory = TimedHistory(runtime.memory, loaded)
        sink = BenchSink(stamps, latency_s=settings.latency_ms / 1000.0)
        await _warm_up(runtime.gateway, sink, index or 0, float(job["run_timeout_s"]))
        instance_id, store = runtime.gateway.instance_id, type(runtime.store).__name__
        settle_after_startup()  # start-up is over, as botgateway run marks it
        rss_ready = rss_bytes()
        print("ready", flush=True)
        await wait_for_line("go")
        lag = LoopLag()
        profiler = cProfile.Profile() if settings.profile else None
        lag.start()
        cpu_started, started = cpu_s(), time.monotonic()
        if profiler is not None:
            profiler.enable()
        await _burst(runtime.gateway, sink, messages, list(stamps.values()), float(job["run_timeout_s"]))
        if profiler is not None:
            profiler.disable()
        cpu, ended = cpu_s() - cpu_started, time.monotonic()
        samples = await lag.stop()
        await runtime.gateway.aclose()
    if profiler is not None and job.get("profile_path"):
        _write_profile(profiler, Path(job["profile_path"]))
    return {
        "worker_index": index or 0, "instance_id": instance_id, "store": store, "pid": os.getpid(), "cpu_s": cpu,
        "wall_s": ended - started, "started_at": started, "ended_at": ended,
        "rss_ready_bytes": rss_ready, "peak_rss_bytes": peak_rss_bytes(), "loop_lag_s": samples,
        "loop_lag_interval_s": lag.interval_s, "turns": [s.to_dict() for s in stamps.values()],
    }
