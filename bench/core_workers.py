"""The worker processes of one ``core`` scenario: one with SQLite, or K sharing Redis as ``botgateway run --workers K``.

With one worker (the default) the scenario runs as it always has: one
process, the SQLite store in the scenario's folder. With ``--workers K`` above
1, K workers are built as the supervisor of ``botgateway run --workers K``
builds its workers (:func:`botgateway.cli.runtime.build_runtime` with
``worker_index=i``): the Redis store on the machine's Redis
(:data:`REDIS_URL`) under a key prefix of this scenario alone, so they share
the fleet's state and its rate budget (:mod:`botgateway.budget.ledgers`), with
``gateway.workers: K`` and each its own instance id (``…-w<i>``). Turn *i*
goes to worker ``i % K``. Every worker is started and warmed up first; then
all are told ``go`` at the same moment and run their turns at once. The
prefix's keys are deleted afterwards, whatever happened.

The Redis server's own CPU seconds over the run (``INFO cpu``) are noted
next to the workers': the fleet's state costs Redis work the workers' CPU
does not show (the whole server's, so another client's work counts too).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bench.fleet import REDIS_URL, every, scenario_redis
from bench.worker_process import WorkerProcess

__all__ = ["REDIS_URL", "CoreRun", "run_core_workers", "turns_of"]


@dataclass(frozen=True)
class CoreRun:
    """What the workers of one core scenario wrote, and what the orchestrator saw around them."""

    workers: list[dict[str, Any]]
    """Each worker's result (its stamps, CPU, loop lag…), in worker order."""
    redis_cpu_s: float | None
    """The Redis server's CPU seconds from ``go`` until the last worker exited; ``None`` with one worker (SQLite)."""
    warnings: list[str]
    """The workers' last warning and error lines, each marked with its worker when there are several."""
    profiles: list[str]
    """The cProfile reports the workers wrote (``--profile``), one per worker."""
    redis_prefix: str = ""
    """The key prefix the workers shared in Redis (deleted afterwards); empty with one worker."""


def turns_of(index: int, workers: int, n: int) -> list[int]:
    """The turns worker ``index`` of ``workers`` answers: turn *i* goes to worker ``i % workers``."""
    return list(range(index, n, workers))


async def run_core_workers(job: dict[str, Any], folder: Path, *, workers: int, timeout_s: float) -> CoreRun:
    """Start ``workers`` workers of ``job`` (see the module docstring), tell all ``go`` at once, collect their
    results."""
    if workers == 1:
        return await _run([(job, WorkerProcess(job, folder))], timeout_s, None)
    async with scenario_redis("--workers above 1") as (client, prefix):
        fleet = []
        for index in range(workers):
            mine = folder / f"w{index}"
            mine.mkdir(parents=True, exist_ok=True)
            share = {**job, "worker_index": index, "workers": workers, "turns": turns_of(index, workers, job["n"]),
                     "redis_url": REDIS_URL, "redis_prefix": prefix,
                     "profile_path": _own(job["profile_path"], index)}
            # The instance ids' lock files go with the scenario's folder, not the machine's /tmp.
            fleet.append((share, WorkerProcess(share, mine, env={"TMPDIR": str(folder)})))
        return await _run(fleet, timeout_s, client, prefix)


async def _run(
    jobs: list[tuple[dict[str, Any], WorkerProcess]], timeout_s: float, redis: aioredis.Redis | None, prefix: str = ""
) -> CoreRun:
    fleet = [worker for _, worker in jobs]
    try:
        await every(worker.start() for worker in fleet)
        cpu_before = await _redis_cpu_s(redis)
        for worker in fleet:  # every worker is ready and warmed up: all start at once
            worker.tell("go")
        results = await every(worker.finish(timeout_s) for worker in fleet)
        cpu_after = await _redis_cpu_s(redis)
    finally:
        await asyncio.gather(*(worker.kill() for worker in fleet))
    redis_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    warnings = [f"w{i}: {line}" if len(fleet) > 1 else line for i, w in enumerate(fleet) for line in w.warnings()]
    profiles = [job["profile_path"] for job, _ in jobs if job.get("profile_path")]
    return CoreRun(results, redis_cpu, warnings, profiles, prefix)


def _own(path: str, index: int) -> str:
    """Worker ``index``'s file of ``path`` (``profile-….txt`` → ``profile-…-w<index>.txt``); empty stays empty."""
    if not path:
        return ""
    file = Path(path)
    return str(file.with_name(f"{file.stem}-w{index}{file.suffix}"))


async def _redis_cpu_s(client: aioredis.Redis | None) -> float | None:
    if client is None:
        return None
    try:
        info = await client.info("cpu")
    except (RedisError, OSError):  # a figure on the side: the run's own numbers do not depend on it
        return None
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
