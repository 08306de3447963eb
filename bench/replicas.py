"""The worker processes of one Slack scenario: one in Socket Mode, or K replicas of a fleet sharing Redis.

With one replica (the default) the scenario runs as it always has: one
worker, Socket Mode, SQLite. With ``--replicas K`` above 1, K workers are
configured as the replicas of a deployment behind a load balancer are: Slack
in HTTP Events mode, each on its own port (``http_ports`` from the Slack
side, which posts every mention to each of them), the Redis store under the
scenario's key prefix, ``gateway.replicas: K`` and an instance id of its own
(``bench-r<i>-…``; the ids' lock files go in the scenario's folder). Their
numbers are reported together: CPU seconds and peak RSS summed, each
replica's own beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.fleet import REDIS_URL
from bench.worker_process import WorkerProcess

__all__ = ["fleet_process", "marked_warnings", "replica_workers"]


def replica_workers(job: dict[str, Any], folder: Path, *, replicas: int, prefix: str = "") -> list[WorkerProcess]:
    """The workers of a scenario: ``job``'s one, or ``replicas`` replicas sharing Redis under ``prefix``."""
    if replicas == 1:
        return [WorkerProcess(job, folder)]
    fleet = []
    for index in range(replicas):
        mine = folder / f"r{index}"
        mine.mkdir(parents=True, exist_ok=True)
        share = {**job, "replicas": replicas, "instance_id": f"bench-r{index}-{prefix.split(':')[1][:8]}",
                 "http_port": job["http_ports"][index], "redis_url": REDIS_URL, "redis_prefix": prefix}
        fleet.append(WorkerProcess(share, mine, env={"TMPDIR": str(folder)}))
    return fleet


def fleet_process(processes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One worker's numbers as they are; several replicas' together (CPU and RSS summed), each one's in ``replicas``."""
    if len(processes) == 1:
        return dict(processes[0])
    return {
        "pids": [p["pid"] for p in processes],
        "cpu_s": sum(p["cpu_s"] for p in processes),
        "wall_s": max(p["wall_s"] for p in processes),
        "rss_ready_bytes": sum(p["rss_ready_bytes"] for p in processes),
        "peak_rss_bytes": sum(p["peak_rss_bytes"] for p in processes),
        "replicas": [{"index": i, "pid": p["pid"], "cpu_s": p["cpu_s"], "peak_rss_bytes": p["peak_rss_bytes"]}
                     for i, p in enumerate(processes)],
    }


def marked_warnings(workers: Sequence[WorkerProcess]) -> list[str]:
    """The workers' last warning lines, each marked ``r<i>:`` when there are several replicas."""
    if len(workers) == 1:
        return workers[0].warnings()
    return [f"r{i}: {line}" for i, worker in enumerate(workers) for line in worker.warnings()]
