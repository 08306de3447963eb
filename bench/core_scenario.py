"""The orchestrator's side of a ``core`` scenario: the model here, botgateway in a worker, no chat platform.

The model (:class:`~bench.model.BenchModelServer` with
:func:`~bench.model.make_core_responder`) streams every turn's answer one
chunk every ``N / core_chunks_per_s`` seconds, so N concurrent streams offer
``core_chunks_per_s`` together whatever N is. The worker
(:mod:`bench.core_worker`) is started, told ``go``, submits the N turns at
once through the real Gateway into the bench's sink, and exits once every card
is final, writing its stamps; :func:`~bench.core_analysis.core_numbers` puts
them next to the model's. With ``--workers K`` the turns are split over K
workers sharing Redis, all told ``go`` at once (:mod:`bench.core_workers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.core_analysis import core_numbers
from bench.core_workers import run_core_workers
from bench.model import BenchModelServer, make_core_responder
from bench.process_stats import usable_cpus
from bench.settings import BenchSettings, Scenario
from tools.demo.script import text_chunks

__all__ = ["run_core_scenario"]


async def run_core_scenario(settings: BenchSettings, scenario: Scenario, answers: list[str], folder: Path) -> dict[str, Any]:
    """One core scenario on a fresh model server and fresh workers; its section of the report."""
    answers = answers[: scenario.n]
    interval_s = scenario.n / settings.core_chunks_per_s
    model = BenchModelServer(make_core_responder(answers, interval_s=interval_s, chunk_chars=settings.chunk_chars))
    longest_s = (2 + max(len(text_chunks(a, settings.chunk_chars)) for a in answers)) * interval_s
    profile = Path(settings.out) / f"profile-{scenario.key}.txt" if settings.profile else None
    folder.mkdir(parents=True, exist_ok=True)
    job = {"settings": settings.to_dict(), "platform": "core", "mode": "", "n": scenario.n, "tmp": str(folder),
           "llm_url": await model.start(), "run_timeout_s": longest_s + settings.settle_s,
           "profile_path": str(profile) if profile else ""}
    try:
        run = await run_core_workers(job, folder, workers=scenario.workers, timeout_s=settings.worker_timeout_s)
    finally:
        await model.stop()
    numbers = core_numbers(run.workers, model.generations, answers, latency_s=settings.latency_ms / 1000.0,
                           interval_s=interval_s, chunk_chars=settings.chunk_chars,
                           cores=min(scenario.workers, usable_cpus()))
    return {
        "scenario": {"name": scenario.name, "platform": "core", "mode": "", "n": scenario.n,
                     "arrival": scenario.arrival, "workers": scenario.workers},
        **numbers,
        "offered_chunks_per_s": settings.core_chunks_per_s,
        "redis_cpu_s": run.redis_cpu_s,
        "redis_prefix": run.redis_prefix,
        "profiles": run.profiles,
        "worker_warnings": run.warnings,
    }
