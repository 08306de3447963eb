"""``/metrics``: the Prometheus registry in the text exposition format."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["metrics_routes"]


def metrics_routes(registry: CollectorRegistry) -> list[web.RouteDef]:
    """``GET /metrics`` serving ``registry`` (the process's own, never prometheus_client's global one)."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/metrics", metrics)]
