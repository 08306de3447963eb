"""``/metrics``: the Prometheus registry in the text exposition format.

The workers of ``botgateway run --workers N`` share one port, so a scrape
reaches whichever worker the kernel picks. Each worker therefore writes its
counters to files in one directory (prometheus_client's multiprocess mode,
``PROMETHEUS_MULTIPROC_DIR``, set by the supervisor), and every scrape sums
them: any worker answers for all of them.

The rate budgets' limits are read at scrape time instead (:class:`BudgetLimits`):
per rate key, the configured limit, the limit learned from the platform's
throttles, and the throttles heard, for the keys the answering process used
lately. Workers share their budgets through Redis, where what a key learned
and its throttles are kept for the whole fleet, so the worker that answers
tells the fleet's figures: summing them would count each one once per worker.
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import Iterable, Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from botgateway.budget import Estimate, RateBudget, RateLimit

__all__ = ["BudgetLimits", "WorkerFiles", "metrics_routes"]


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


class BudgetLimits(Collector):
    """Per rate key (the keys used last, :data:`~botgateway.budget.rate_budget.SHOWN_KEYS` at most): the configured and
    the learned limit in calls per second, and the throttles heard; read from ``estimates`` taken on the event loop."""

    def __init__(self, estimates: Sequence[Estimate]) -> None:
        self._estimates = estimates

    def collect(self) -> Iterable[Metric]:
        """Three families labelled by ``key``."""
        configured = GaugeMetricFamily(
            "botgateway_rate_limit_configured_per_s",
            "A rate key's configured limit, in calls per second (a window: its calls over its seconds).", labels=["key"])
        learned = GaugeMetricFamily(
            "botgateway_rate_limit_learned_per_s",
            "A rate key's limit as learned from the platform's throttles, in calls per second: calls are granted by it.",
            labels=["key"])
        throttles = CounterMetricFamily(
            "botgateway_rate_limit_throttles",
            "Throttle answers (429, DingTalk 403 QpsLimit, Slack ratelimited) heard for a rate key; with Redis, the "
            "fleet's.", labels=["key"])
        for estimate in self._estimates:
            configured.add_metric([estimate.key], _per_s(estimate.configured))
            learned.add_metric([estimate.key], _per_s(estimate.learned))
            throttles.add_metric([estimate.key], float(estimate.throttles))
        return [configured, learned, throttles]


def _per_s(limit: RateLimit) -> float:
    return limit.burst / limit.window_s if limit.windowed else limit.rate_per_s


def _sized(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:  # removed meanwhile (a worker that ended): nothing to read
        return False


def metrics_routes(
    registry: CollectorRegistry, *, multiprocess_dir: str | None = None, budget: RateBudget | None = None
) -> list[web.RouteDef]:
    """``GET /metrics`` serving ``registry`` (the process's own, never prometheus_client's global one).

    ``multiprocess_dir``: the workers' metric files; each scrape sums them instead. ``budget``: the rate budgets,
    whose limits (:class:`BudgetLimits`) this process tells in every scrape.
    """

    def collect(estimates: Sequence[Estimate]) -> bytes:
        if multiprocess_dir is None:
            body = generate_latest(registry)
        else:
            every_worker = CollectorRegistry()
            every_worker.register(WorkerFiles(multiprocess_dir))
            body = generate_latest(every_worker)
        if not estimates:
            return body
        limits = CollectorRegistry()
        limits.register(BudgetLimits(estimates))
        return body + generate_latest(limits)

    async def metrics(request: web.Request) -> web.Response:
        # Estimates are read on the event loop (a fleet's are refreshed in the background from there); merging the
        # workers' files reads a file each: off the event loop, which streams the answers.
        estimates = budget.estimates() if budget is not None else ()
        body = collect(estimates) if multiprocess_dir is None else await asyncio.to_thread(collect, estimates)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/metrics", metrics)]
