"""The orchestrator: serves the fakes, runs each strategy in a fresh worker process, builds the report.

The scripted model (:class:`~botgateway.scripted_server.ScriptedLLMServer`)
and the fake card API (:class:`~botgateway.testing.card_api.FakeCardAPI`) run here, in this
process's event loop; each strategy's pipeline runs in its own subprocess
(:mod:`bench.worker`). So the worker's CPU time and peak RSS are the
pipeline's alone, and every strategy starts from a fresh process, fresh
fakes and a full rate-limit bucket. Strategies run one after another, never
at the same time, so they do not compete for the CPU.
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

from bench.analysis import acceptance, analyze_strategy
from bench.model import make_answers, make_responder
from bench.settings import BenchSettings
from tests.fakes.card_api import FakeCardAPI
from tools.demo.server import ScriptedLLMServer

REPO_ROOT = Path(__file__).resolve().parent.parent


class WorkerFailed(RuntimeError):
    """A strategy's worker process crashed or timed out; the message carries its last stderr lines."""


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


async def _run_worker(settings: BenchSettings, strategy: str, llm_url: str, card_url: str, tmp: Path) -> dict[str, Any]:
    job = tmp / f"{strategy}.job.json"
    result = tmp / f"{strategy}.result.json"
    errors = tmp / f"{strategy}.stderr.txt"
    job.write_text(json.dumps({"settings": settings.to_dict(), "strategy": strategy, "llm_url": llm_url, "card_url": card_url}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    with errors.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.worker", str(job), str(result),
            cwd=str(REPO_ROOT), env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        try:
            async with asyncio.timeout(settings.worker_timeout_s):
                code = await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise WorkerFailed(f"{strategy}: worker did not finish within {settings.worker_timeout_s:g} s{_tail(errors)}") from None
        except BaseException:
            # Ctrl-C of `make bench`: the worker must not outlive us, hammering fakes that are gone.
            if proc.returncode is None:
                proc.kill()
                await asyncio.shield(proc.wait())
            raise
    if code != 0 or not result.exists():
        raise WorkerFailed(f"{strategy}: worker exited with code {code}{_tail(errors)}")
    return json.loads(result.read_text())


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return ("\n" + "\n".join(text[-lines:])) if text else ""


async def run_strategy(settings: BenchSettings, strategy: str, answers: list[str], tmp: Path, index: int) -> dict[str, Any]:
    """Serve fresh fakes, run ``strategy`` in a worker, and analyze what happened."""
    low, high = settings.latency_ms
    api = FakeCardAPI(
        rate_per_s=settings.qps,
        burst=settings.effective_server_burst,
        one_bucket=True,  # one budget for the whole app, like DingTalk's card API
        retry_after_s=1.0,
        latency_s=low / 1000.0,
        jitter_s=(high - low) / 1000.0,
        max_text=8000,
        keep_bodies=False,  # thousands of calls: keep the numbers, not every rendered card
        seed=settings.seed + index,
    )
    llm = ScriptedLLMServer(responder=make_responder(settings, answers), model="bench-model")
    card_url = await api.start()
    llm_url = await llm.start()
    try:
        cpu_before = _cpu_s()
        started = time.monotonic()
        worker = await _run_worker(settings, strategy, llm_url, card_url, tmp)
        fakes_cpu = _cpu_s() - cpu_before
    finally:
        await llm.stop()
        await api.stop()
    return analyze_strategy(
        strategy=strategy,
        settings=settings,
        answers=answers,
        worker=worker,
        api=api,
        fakes_cpu_s=fakes_cpu,
        started_at=worker["process"].get("run_started_at", started),
    )


async def run_benchmark(
    settings: BenchSettings,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every strategy of ``settings`` and return the report (not yet written to disk)."""
    say = progress or (lambda _message: None)
    answers = make_answers(settings)
    machine = machine_info()
    started = dt.datetime.now(dt.timezone.utc)
    strategies: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="botgateway-bench-") as tmp:
        for index, strategy in enumerate(settings.strategies):
            say(f"running {strategy}: {settings.turns} concurrent turns …")
            t0 = time.monotonic()
            try:
                strategies[strategy] = await run_strategy(settings, strategy, answers, Path(tmp), index)
            except WorkerFailed as exc:
                failures[strategy] = str(exc)
                say(f"{strategy} FAILED: {exc}")
                continue
            s = strategies[strategy]
            say(
                f"{strategy} done in {time.monotonic() - t0:.1f} s: {s['api_calls']} calls, "
                f"{s['throttled']} throttled, {s['delivered']}/{s['turns']} final answers exact"
            )
    machine["loadavg_after"] = list(os.getloadavg())
    checks = acceptance(strategies)
    if failures:
        checks["passed"] = False
    argv = settings.to_argv()
    return {
        "schema": 1,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": (dt.datetime.now(dt.timezone.utc) - started).total_seconds(),
        "machine": machine,
        "settings": settings.to_dict(),
        "reproduce": {
            "python": "python -m bench " + " ".join(argv),
            "make": "make bench BENCH_ARGS='" + " ".join(argv) + "'",
        },
        "strategies": strategies,
        "failures": failures,
        "acceptance": checks,
    }
