"""The orchestrator: fakes and model here, botgateway in a worker process, one scenario at a time.

Per chat scenario this process serves a fresh fake platform (:mod:`bench.slack_side`
or :mod:`bench.dingtalk_side`) and a fresh scripted model
(:class:`~bench.model.BenchModelServer`), starts a fresh worker
(:mod:`bench.worker`: the real Gateway and adapter, built as ``botgateway
run`` builds them), waits for its socket, pushes the mentions (all at once or
spread), follows every answer on the platform until all are complete or the
deadline passes, waits ``live_check_s`` more, counts what still looks live,
then stops the worker. A scenario of K replicas (``--replicas``) starts K
workers sharing Redis under a key prefix of its own (:mod:`bench.replicas`);
on Slack it posts every mention to each of them. An incident puts every
mention in one Slack channel (:mod:`bench.incident`); a crash kills every
worker mid-burst and starts it again (:mod:`bench.crash`). Each scenario's
floor (:mod:`bench.floor`) goes beside its figures. A ``core`` scenario has no platform
and runs through :mod:`bench.core_scenario`; ``estate`` and ``charts`` run
through :mod:`bench.estate` and :mod:`bench.charts` (whose calls count runs
chat scenarios through :func:`run_scenario`). Scenarios run one after another,
never side by side, so the worker's CPU time and RSS are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import os
import platform
import resource
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.analysis import Goal, answered_twice, floor_distance, model_numbers, scenario_floors, turn_latencies
from bench.charts import charts_goals, charts_progress, run_charts_scenario
from bench.chat_goals import chat_goals
from bench.core_analysis import core_goals, cpu_cores_text, fleet_goal, throughput_goal
from bench.core_scenario import run_core_scenario
from bench.crash import crash_and_restart, crash_numbers
from bench.dingtalk_side import DingTalkSide
from bench.estate import estate_goals, estate_progress, run_estate_scenario
from bench.fleet import every, scenario_redis
from bench.model import BenchModelServer, Generation, make_answers, make_responder
from bench.process_stats import usable_cpus
from bench.replicas import fleet_process, marked_warnings, replica_workers
from bench.settings import BenchSettings, Scenario
from bench.side import PlatformSide
from bench.slack_side import SlackSide
from bench.stats import jsonable
from bench.worker_process import WorkerFailed, WorkerProcess
from tools.demo.script import Script

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_info() -> dict[str, Any]:
    """What the numbers ran on."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "loadavg": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def make_side(settings: BenchSettings, scenario: Scenario, answers: list[str]) -> PlatformSide:
    """The fake platform of ``scenario``."""
    if scenario.platform == "slack":
        return SlackSide(settings, answers, replicas=scenario.replicas, one_channel=scenario.one_channel,
                         stream_starts_counted=scenario.stream_starts_counted)
    return DingTalkSide(settings, answers, replicas=scenario.replicas)


async def _push_all(side: PlatformSide, offsets: list[float], start: float) -> None:
    for turn, offset in enumerate(offsets):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the mention's arrival time, not synchronization
        await side.push(turn)


async def _follow(side: PlatformSide, settings: BenchSettings, offsets: list[float], start: float) -> float:
    """Push the mentions, wait for every answer (or the deadline), then ``live_check_s``; returns when the answers ended."""
    pushing = asyncio.create_task(_push_all(side, offsets, start))
    deadline = start + max(offsets) + settings.gen_s + settings.settle_s + settings.tool_rounds * 2.0
    try:
        await asyncio.wait_for(side.all_done.wait(), max(0.0, deadline - time.monotonic()))
        ended = max(w.complete_at or start for w in side.watches)
    except TimeoutError:
        ended = time.monotonic()
    await pushing
    await asyncio.sleep(max(0.0, ended + settings.live_check_s - time.monotonic()))
    return ended


@contextlib.asynccontextmanager
async def _store(scenario: Scenario) -> AsyncIterator[str]:
    """The Redis key prefix a fleet's replicas share (purged afterwards); empty for one worker (SQLite)."""
    if scenario.replicas == 1:
        yield ""
        return
    async with scenario_redis("--replicas above 1") as (_client, prefix):
        yield prefix


async def run_scenario(settings: BenchSettings, scenario: Scenario, answers: list[str], folder: Path, *,
                       responder: Callable[[dict[str, Any]], Script] | None = None,
                       job_extra: Mapping[str, Any] | None = None, side: PlatformSide | None = None) -> dict[str, Any]:
    """One scenario on fresh fakes and a fresh worker (or K replicas); its section of the report.

    ``responder`` replaces the model's usual one (it must play ``settings.tool_rounds`` tool rounds), ``job_extra``
    adds to the worker's job, and ``side`` replaces the usual fake platform (the ``charts`` scenario's runs).
    """
    answers = answers[: scenario.n]
    side = side or make_side(settings, scenario, answers)
    model = BenchModelServer(
        responder or make_responder(answers, gen_s=settings.gen_s, chunk_chars=settings.chunk_chars,
                                    tool_rounds=settings.tool_rounds),
        tool_rounds=settings.tool_rounds,
    )
    folder.mkdir(parents=True, exist_ok=True)
    async with _store(scenario) as prefix:
        job = {"settings": settings.to_dict(), "platform": scenario.platform, "mode": scenario.mode, "n": scenario.n,
               "tmp": str(folder), "llm_url": await model.start(), **await side.start(),
               "stream_starts_per_channel": scenario.stream_starts_counted, **(job_extra or {})}
        workers = replica_workers(job, folder, replicas=scenario.replicas, prefix=prefix)
        try:
            run = await _drive(settings, scenario, side, workers, lambda: replica_workers(
                job, folder / "restarted", replicas=scenario.replicas, prefix=prefix))
        finally:
            await asyncio.gather(*(worker.kill() for worker in workers))
            await model.stop()
            await side.stop()
    result = _chat_result(settings, scenario, side, model, run, workers)
    if isinstance(side, SlackSide):
        result.update(_slack_numbers(side, scenario, result, model.generations, run.crash))
        result["redis_prefix"] = prefix
    return result


@dataclass(frozen=True)
class _Run:
    """What driving a chat scenario's workers measured, before the report reads it."""

    start: float
    """When the mentions began (``time.monotonic()``)."""
    ended: float
    """When the answers ended (``time.monotonic()``)."""
    live: dict[str, Any]
    """What still looked live ``live_check_s`` after the answers (:meth:`PlatformSide.live_left`)."""
    calls: dict[str, dict[str, int]]
    """The platform calls per method."""
    timeline: dict[str, dict[str, list[int]]]
    """The platform calls per method per second."""
    fakes_cpu_s: float
    """CPU seconds this process (the fakes and the model) spent meanwhile."""
    process: dict[str, Any]
    """The workers' numbers (CPU, RSS), as they stopped."""
    crash: dict[str, Any] | None
    """A crash scenario's timing and start; None otherwise."""


async def _drive(settings: BenchSettings, scenario: Scenario, side: PlatformSide, workers: list[WorkerProcess],
                 restarted: Callable[[], list[WorkerProcess]]) -> _Run:
    """Start the workers, push the mentions, follow the answers and stop the workers (a crash scenario kills them
    mid-burst and puts ``restarted()`` in their place in ``workers``); the caller kills whatever is left."""
    crashing: asyncio.Task[dict[str, Any]] | None = None
    try:
        await every(worker.start() for worker in workers)
        await side.wait_connected(30.0)
        cpu_before, start = _cpu_s(), time.monotonic()
        offsets = settings.arrival_offsets(scenario)
        if scenario.variant == "crash":  # replaces the workers in ``workers`` with their restarted selves
            crashing = asyncio.create_task(crash_and_restart(workers, start + settings.crash_at_s, restarted))
        ended = await asyncio.wait_for(_follow(side, settings, offsets, start), settings.worker_timeout_s)
        crash = None if crashing is None else {"timing": await crashing, "start": start}
        live, calls, timeline = side.live_left(), side.counts(), side.timeline(start)
        fakes_cpu = _cpu_s() - cpu_before
        process = fleet_process(await every(worker.stop() for worker in workers))
    except TimeoutError:
        raise WorkerFailed(f"the scenario did not finish within {settings.worker_timeout_s:g} s") from None
    finally:
        if crashing is not None and not crashing.done():
            crashing.cancel()
            await asyncio.gather(crashing, return_exceptions=True)
    return _Run(start, ended, live, calls, timeline, fakes_cpu, process, crash)


def _chat_result(settings: BenchSettings, scenario: Scenario, side: PlatformSide, model: BenchModelServer, run: _Run,
                 workers: list[WorkerProcess]) -> dict[str, Any]:
    """The scenario's section of the report: latencies, the model's pace, calls, what was left live, the floor."""
    floors = scenario_floors(settings, scenario)
    result = {
        "scenario": {"name": scenario.name, "platform": scenario.platform, "mode": scenario.mode, "n": scenario.n,
                     "arrival": scenario.arrival, "replicas": scenario.replicas, "variant": scenario.variant},
        **turn_latencies(side.watches),
        "model": model_numbers(model.generations, side.watches, settings.gen_s),
        "calls": run.calls,
        "methods": list(side.methods),
        "timeline": run.timeline,
        "live_left": run.live,
        "floors": floors["plans"],
        "floor": floors["best"],
        "answers_ended_after_s": run.ended - run.start,
        "process": run.process,
        "fakes_cpu_s": run.fakes_cpu_s,
        "worker_warnings": marked_warnings(workers),
    }
    result.update(floor_distance(result))
    return result


def _slack_numbers(side: SlackSide, scenario: Scenario, result: dict[str, Any], generations: list[Generation],
                   crash: dict[str, Any] | None) -> dict[str, Any]:
    """What only Slack counts: throttles per channel, turns answered twice, the deliveries to a fleet, a crash's."""
    numbers: dict[str, Any] = {
        "throttles_per_channel": side.throttles_per_channel(),
        "stream_starts_counted": scenario.stream_starts_counted,
        "deliveries": {"replicas": side.replicas, "posted": side.delivered,
                       "failed_count": len(side.delivery_failures), "failed": side.delivery_failures[:10]},
    }
    if crash is None:
        numbers["answered_twice"] = answered_twice(generations, side.answer_messages())
        return numbers
    # A resumed question is asked twice by design: twice is two whole answers.
    exact = [answer["exact"] for answer in result["per_answer"]]
    whole = side.whole_answer_messages()
    numbers["crash"] = crash_numbers(crash["timing"], crash["start"], generations, exact, whole,
                                     result["live_left"]["count"])
    numbers["answered_twice"] = answered_twice([g for g in generations if g.completed], whole)
    return numbers


async def run_benchmark(settings: BenchSettings, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every scenario of ``settings``; the report (not yet written to disk)."""
    say = progress or (lambda _message: None)
    answers = make_answers(settings.seed, max(s.n for s in settings.scenarios()), settings.answer_chars)
    machine = machine_info()
    started = dt.datetime.now(dt.UTC)
    results: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="botgateway-bench-") as tmp:
        for scenario in settings.scenarios():
            say(f"{scenario.name}: running …")
            t0 = time.monotonic()
            goals: list[Goal]
            try:
                if scenario.platform == "core":
                    result = await run_core_scenario(settings, scenario, answers, Path(tmp) / scenario.key)
                    goals = core_goals(result)
                elif scenario.platform == "estate":
                    result = await run_estate_scenario(settings, scenario, Path(tmp) / scenario.key)
                    goals = estate_goals(result)
                elif scenario.platform == "charts":
                    result = await run_charts_scenario(settings, scenario, Path(tmp) / scenario.key,
                                                       run_platform=run_scenario)
                    goals = charts_goals(result)
                else:
                    result = await run_scenario(settings, scenario, answers, Path(tmp) / scenario.key)
                    # A fleet next to the same scenario on one replica, which ran before it.
                    goals = chat_goals(result, results, settings.gen_s, settings.live_check_s)
            except WorkerFailed as exc:
                failures[scenario.name] = str(exc)
                say(f"{scenario.name} FAILED: {exc}")
                continue
            result["goals"] = [g.to_dict() for g in goals]
            results.append(result)
            say(_progress_line(result, time.monotonic() - t0))
    machine["loadavg_after"] = list(os.getloadavg())
    # Judged over the core scenarios together: whichever of them streamed fast enough, or ran 1,000 turns.
    core = [r for r in results if r["scenario"]["platform"] == "core"]
    run_goals = [goal.to_dict() for goal in (throughput_goal(core), fleet_goal(core)) if goal is not None]
    argv = settings.to_argv()
    return jsonable({
        "schema": 5,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": (dt.datetime.now(dt.UTC) - started).total_seconds(),
        "machine": machine,
        "settings": settings.to_dict(),
        "reproduce": {"python": "python -m bench " + " ".join(argv), "make": "make bench BENCH_ARGS='" + " ".join(argv) + "'"},
        "scenarios": results,
        "goals": run_goals,
        "failures": failures,
        "passed": not failures and all(g["passed"] for r in results for g in r["goals"]) and all(g["passed"] for g in run_goals),
    })


def _progress_line(result: dict[str, Any], took: float) -> str:
    if result["scenario"]["platform"] == "estate":
        return estate_progress(result, took)
    if result["scenario"]["platform"] == "charts":
        return charts_progress(result, took)
    if result["scenario"]["platform"] == "core":
        return (f"{result['scenario']['name']} done in {took:.0f} s: {result['exact']}/{result['answers']} exact, "
                f"{result['chunks']} chunks at {result['chunks_per_s']:,.0f}/s, "
                f"{cpu_cores_text(result)}")
    throttled = sum(c.get("throttled", 0) for c in result["calls"].values())
    twice = f", {result['answered_twice']['count']} answered twice" if "answered_twice" in result else ""
    p95, floor_p95 = result["complete_s"]["p95"], result["floor"]["complete_s"]["p95"]
    against = (f"complete p95 {p95:.2f} s, floor {floor_p95:.2f} s" if p95 is not None and not math.isinf(p95)
               else f"complete p95 ∞, floor {floor_p95:.2f} s")
    return (f"{result['scenario']['name']} done in {took:.0f} s: {result['exact']}/{result['answers']} exact, "
            f"{against}, {throttled} throttled, {result['live_left']['count']} live-looking left{twice}")
