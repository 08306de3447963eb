"""``/metrics``: the Prometheus registry in the text exposition format.

The workers of ``botgateway run --workers N`` share one port, so a scrape
reaches whichever worker the kernel picks. Each worker therefore writes its
counters to files in one directory (prometheus_client's multiprocess mode,
``PROMETHEUS_MULTIPROC_DIR``, set by the supervisor), and every scrape sums
them: any worker answers for all of them.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = ["metrics_routes"]


def metrics_routes(registry: CollectorRegistry, *, multiprocess_dir: str | None = None) -> list[web.RouteDef]:
    """``GET /metrics`` serving ``registry`` (the process's own, never prometheus_client's global one).

    ``multiprocess_dir``: the workers' metric files; each scrape sums them instead.
    """

    def collect() -> bytes:
        if multiprocess_dir is None:
            return generate_latest(registry)
        every_worker = CollectorRegistry()
        MultiProcessCollector(every_worker, path=multiprocess_dir)
        return generate_latest(every_worker)

    async def metrics(request: web.Request) -> web.Response:
        # Merging the workers' files reads a file each: off the event loop, which streams the answers.
        body = collect() if multiprocess_dir is None else await asyncio.to_thread(collect)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/metrics", metrics)]
