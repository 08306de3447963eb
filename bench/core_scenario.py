"""The orchestrator's side of a ``core`` scenario: the model here, botgateway in a worker, no chat platform.

The model (:class:`~bench.model.BenchModelServer` with
:func:`~bench.model.make_core_responder`) streams every turn's answer one
chunk every ``N / core_chunks_per_s`` seconds, so N concurrent streams offer
``core_chunks_per_s`` together whatever N is. The worker
(:mod:`bench.core_worker`) is started, told ``go``, submits the N turns at
once through the real Gateway into the bench's sink, and exits once every card
is final, writing its stamps; :func:`~bench.core_analysis.core_numbers` puts
them next to the model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.core_analysis import core_numbers
from bench.model import BenchModelServer, make_core_responder
from bench.settings import BenchSettings, Scenario
from bench.worker_process import WorkerProcess
from tools.demo.script import text_chunks

__all__ = ["run_core_scenario"]


async def run_core_scenario(settings: BenchSettings, scenario: Scenario, answers: list[str], folder: Path) -> dict[str, Any]:
    """One core scenario on a fresh model server and a fresh worker; its section of the report."""
    answers = answers[: scenario.n]
    interval_s = scenario.n / settings.core_chunks_per_s
    model = BenchModelServer(make_core_responder(answers, interval_s=interval_s, chunk_chars=settings.chunk_chars))
    longest_s = (2 + max(len(text_chunks(a, settings.chunk_chars)) for a in answers)) * interval_s
    profile = Path(settings.out) / f"profile-{scenario.key}.txt" if settings.profile else None
    folder.mkdir(parents=True, exist_ok=True)
    job = {"settings": settings.to_dict(), "platform": "core", "mode": "", "n": scenario.n, "tmp": str(folder),
           "llm_url": await model.start(), "run_timeout_s": longest_s + settings.settle_s,
           "profile_path": str(profile) if profile else ""}
    worker = WorkerProcess(job, folder)
    try:
        await worker.start()
        process = await worker.stop(settings.worker_timeout_s, command="go")
    finally:
        await worker.kill()
        await model.stop()
    numbers = core_numbers(process, model.generations, answers, latency_s=settings.latency_ms / 1000.0,
                           interval_s=interval_s, chunk_chars=settings.chunk_chars)
    return {
        "scenario": {"name": scenario.name, "platform": "core", "mode": "", "n": scenario.n, "arrival": scenario.arrival},
        **numbers,
        "offered_chunks_per_s": settings.core_chunks_per_s,
        "process": {key: process[key] for key in ("pid", "cpu_s", "wall_s", "rss_ready_bytes", "peak_rss_bytes")},
        "profile": str(profile) if profile else None,
        "worker_warnings": worker.warnings(),
    }
