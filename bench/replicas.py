"""The worker processes of one chat scenario: one (Socket Mode or Stream mode, SQLite), or K replicas sharing Redis.

With one replica (the default) the scenario runs as it always has: one
worker, SQLite. With ``--replicas K`` above 1, K workers are configured as
the replicas of a deployment are: the Redis store under the scenario's key
prefix, ``gateway.replicas: K`` and an instance id of its own
(``bench-r<i>-…``; the ids' lock files go in the scenario's folder); on
Slack in HTTP Events mode behind a load balancer, each on its own port
(``http_ports`` from the Slack side, which posts every mention to each of
them); on DingTalk each with its own Stream connection. Their numbers are
reported together: CPU seconds and peak RSS summed, each replica's own
beside them.

The same call with another ``folder`` builds the workers again as they were
(the same SQLite file, the same instance ids): the crash scenario's restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.fleet import REDIS_URL
from bench.worker_process import WorkerProcess

__all__ = ["fleet_process", "marked_warnings", "replica_workers"]


def replica_workers(job: dict[str, Any], folder: Path, *, replicas: int, prefix: str = "") -> list[WorkerProcess]:
    """The workers of a scenario: ``job``'s one, or ``replicas`` replicas sharing Redis under ``prefix``.

    ``folder`` holds their job, stderr and result files (the one worker's SQLite file is in ``job["tmp"]``)."""
    if replicas == 1:
        folder.mkdir(parents=True, exist_ok=True)
        return [WorkerProcess(job, folder)]
    fleet = []
    for index in range(replicas):
        mine = folder / f"r{index}"
        mine.mkdir(parents=True, exist_ok=True)
        share = {**job, "replicas": replicas, "instance_id": f"bench-r{index}-{prefix.split(':')[1][:8]}",
                 "redis_url": REDIS_URL, "redis_prefix": prefix}
        if "http_ports" in job:  # Slack: events over HTTP, each replica on its port
            share["http_port"] = job["http_ports"][index]
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
