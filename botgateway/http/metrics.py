"""``/metrics``: the Prometheus registry in the text exposition format.

The workers of ``botgateway run --workers N`` share one port, so a scrape
reaches whichever worker the kernel picks. Each worker therefore writes its
counters to files in one directory (prometheus_client's multiprocess mode,
``PROMETHEUS_MULTIPROC_DIR``, set by the supervisor), and every scrape sums
them: any worker answers for all of them.
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

__all__ = ["WorkerFiles", "metrics_routes"]


class WorkerFiles(Collector):
    """The sum of every worker's metric files in one directory, leaving out a file its worker is still creating.

    A worker creates its file empty and sizes it a moment later: read in between, prometheus_client's own
    collector fails the whole scrape on it. An empty file holds no sample yet, so it is simply not read.
    """

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        """The merged samples of the workers' files that hold any."""
        files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _sized(f)]
        return MultiProcessCollector.merge(files, accumulate=True)


def _sized(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:  # removed meanwhile (a worker that ended): nothing to read
        return False


def metrics_routes(registry: CollectorRegistry, *, multiprocess_dir: str | None = None) -> list[web.RouteDef]:
    """``GET /metrics`` serving ``registry`` (the process's own, never prometheus_client's global one).

    ``multiprocess_dir``: the workers' metric files; each scrape sums them instead.
    """

    def collect() -> bytes:
        if multiprocess_dir is None:
            return generate_latest(registry)
        every_worker = CollectorRegistry()
        every_worker.register(WorkerFiles(multiprocess_dir))
        return generate_latest(every_worker)

    async def metrics(request: web.Request) -> web.Response:
        # Merging the workers' files reads a file each: off the event loop, which streams the answers.
        body = collect() if multiprocess_dir is None else await asyncio.to_thread(collect)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/metrics", metrics)]
