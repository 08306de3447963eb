"""The orchestrator: fakes and model here, botgateway in a worker process, one scenario at a time.

Per scenario this process serves a fresh fake platform (:mod:`bench.slack_side`
or :mod:`bench.dingtalk_side`) and a fresh scripted model
(:class:`~bench.model.BenchModelServer`), starts a fresh worker
(:mod:`bench.worker`: the real Gateway and adapter, built as ``botgateway
run`` builds them), waits for its socket, pushes the mentions (all at once or
spread), follows every answer on the platform until all are complete or the
deadline passes, waits ``live_check_s`` more, counts what still looks live,
then stops the worker. Scenarios run one after another, never side by side,
so the worker's CPU time and RSS are its own.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.analysis import model_numbers, scenario_floors, scenario_goals, turn_latencies
from bench.dingtalk_side import DingTalkSide
from bench.model import BenchModelServer, make_answers, make_responder
from bench.settings import BenchSettings, Scenario
from bench.side import PlatformSide
from bench.slack_side import SlackSide
from bench.stats import jsonable

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 60.0


class WorkerFailed(RuntimeError):
    """A scenario's worker crashed, did not start or timed out; the message carries its last stderr lines."""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_info() -> dict[str, Any]:
    """What the numbers ran on."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
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


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return ("\n" + "\n".join(text[-lines:])) if text else ""


class WorkerProcess:
    """``python -m bench.worker`` for one scenario: start, wait for ``ready``, ``stop``, read its numbers."""

    def __init__(self, job: dict[str, Any], folder: Path) -> None:
        self._job = job
        self._folder = folder
        self._errors = folder / "worker.stderr.txt"
        self._result = folder / "worker.result.json"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Spawn the worker and wait until its adapter is up."""
        job = self._folder / "worker.job.json"
        job.write_text(json.dumps(self._job))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        with self._errors.open("wb") as stderr:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.worker", str(job), str(self._result),
                cwd=str(REPO_ROOT), env=env, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            await self.kill()
            raise WorkerFailed(f"the worker did not start{_tail(self._errors)}")

    async def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """Ask the worker to shut down as ``botgateway run`` does; its CPU and RSS numbers."""
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(b"stop\n")
            await self._proc.stdin.drain()
            self._proc.stdin.close()
            code = await asyncio.wait_for(self._proc.wait(), timeout)
        except (TimeoutError, ConnectionError):
            await self.kill()
            raise WorkerFailed(f"the worker did not stop within {timeout:g} s{_tail(self._errors)}") from None
        if code != 0 or not self._result.exists():
            raise WorkerFailed(f"the worker exited with code {code}{_tail(self._errors)}")
        return json.loads(self._result.read_text())

    async def kill(self) -> None:
        """Kill the worker if it still runs (never outlive the fakes it talks to)."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await asyncio.shield(self._proc.wait())

    def warnings(self, limit: int = 5) -> list[str]:
        """The worker's last warning and error lines (botgateway logs them to stderr)."""
        try:
            lines = self._errors.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line[:300] for line in lines if line.strip()][-limit:]


def make_side(settings: BenchSettings, scenario: Scenario, answers: list[str]) -> PlatformSide:
    """The fake platform of ``scenario``."""
    if scenario.platform == "slack":
        return SlackSide(settings, answers)
    return DingTalkSide(settings, answers)


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


async def run_scenario(settings: BenchSettings, scenario: Scenario, answers: list[str], folder: Path) -> dict[str, Any]:
    """One scenario on fresh fakes and a fresh worker; its section of the report."""
    answers = answers[: scenario.n]
    side = make_side(settings, scenario, answers)
    model = BenchModelServer(
        make_responder(answers, gen_s=settings.gen_s, chunk_chars=settings.chunk_chars, tool_rounds=settings.tool_rounds),
        tool_rounds=settings.tool_rounds,
    )
    folder.mkdir(parents=True, exist_ok=True)
    job = {"settings": settings.to_dict(), "platform": scenario.platform, "mode": scenario.mode, "n": scenario.n,
           "tmp": str(folder), "llm_url": await model.start(), **await side.start()}
    worker = WorkerProcess(job, folder)
    try:
        await worker.start()
        await side.wait_connected(30.0)
        cpu_before, start = _cpu_s(), time.monotonic()
        offsets = settings.arrival_offsets(scenario)
        ended = await asyncio.wait_for(_follow(side, settings, offsets, start), settings.worker_timeout_s)
        live, calls, timeline = side.live_left(), side.counts(), side.timeline(start)
        fakes_cpu = _cpu_s() - cpu_before
        process = await worker.stop()
    except TimeoutError:
        raise WorkerFailed(f"the scenario did not finish within {settings.worker_timeout_s:g} s") from None
    finally:
        await worker.kill()
        await model.stop()
        await side.stop()
    return {
        "scenario": {"name": scenario.name, "platform": scenario.platform, "mode": scenario.mode, "n": scenario.n,
                     "arrival": scenario.arrival},
        **turn_latencies(side.watches),
        "model": model_numbers(model.generations, side.watches, settings.gen_s),
        "calls": calls,
        "methods": list(side.methods),
        "timeline": timeline,
        "live_left": live,
        "floors": scenario_floors(settings, scenario),
        "answers_ended_after_s": ended - start,
        "process": process,
        "fakes_cpu_s": fakes_cpu,
        "worker_warnings": worker.warnings(),
    }


async def run_benchmark(settings: BenchSettings, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every scenario of ``settings``; the report (not yet written to disk)."""
    say = progress or (lambda _message: None)
    answers = make_answers(settings.seed, max(settings.ns), settings.answer_chars)
    machine = machine_info()
    started = dt.datetime.now(dt.timezone.utc)
    results: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="botgateway-bench-") as tmp:
        for scenario in settings.scenarios():
            say(f"{scenario.name}: running …")
            t0 = time.monotonic()
            try:
                result = await run_scenario(settings, scenario, answers, Path(tmp) / scenario.key)
            except WorkerFailed as exc:
                failures[scenario.name] = str(exc)
                say(f"{scenario.name} FAILED: {exc}")
                continue
            result["goals"] = [g.to_dict() for g in scenario_goals(result, settings.gen_s, settings.live_check_s)]
            results.append(result)
            say(_progress_line(result, time.monotonic() - t0))
    machine["loadavg_after"] = list(os.getloadavg())
    argv = settings.to_argv()
    return jsonable({
        "schema": 2,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": (dt.datetime.now(dt.timezone.utc) - started).total_seconds(),
        "machine": machine,
        "settings": settings.to_dict(),
        "reproduce": {"python": "python -m bench " + " ".join(argv), "make": "make bench BENCH_ARGS='" + " ".join(argv) + "'"},
        "scenarios": results,
        "failures": failures,
        "passed": not failures and all(g["passed"] for r in results for g in r["goals"]),
    })


def _progress_line(result: dict[str, Any], took: float) -> str:
    throttled = sum(c.get("throttled", 0) for c in result["calls"].values())
    return (f"{result['scenario']['name']} done in {took:.0f} s: {result['exact']}/{result['answers']} exact, "
            f"{throttled} throttled, {result['live_left']['count']} live-looking left")
