"""The ``resource_metrics`` tool: a resource the estate knows, by name, IP or id, and its cloud's standard metrics.

The resource is resolved within the asker's scopes (the estate view applies
them), so a resource the asker may not see is never asked about. The answer is
the same :class:`~tools.metrics.metric_tools.MetricQueryResult` data as
``query_metrics``: summaries for the model, the points only in the data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

from botgateway.tooling import Source, Tool, ToolContext, ToolError, ToolOutput, tool
from tools.charts.artifacts import ChartMaker
from tools.charts.attach import with_charts
from tools.estate.fanout import Estate
from tools.estate.matching import QueryError, parse_query, rank
from tools.estate.resource import Resource, kind_label
from tools.estate.source import SourceError
from tools.metrics.cloud import METRIC_KINDS, MetricSource, catalog_of
from tools.metrics.metric_tools import MAX_WINDOW_S, MetricQueryResult, parse_duration
from tools.metrics.prometheus import MAX_POINTS, RangeResult, choose_step
from tools.metrics.series import Series
from tools.metrics.summary import summarize

__all__ = ["ResourceMetricsResult", "build_resource_metric_tools"]


@dataclass(frozen=True)
class ResourceMetricsResult(MetricQueryResult):
    """A ``query_metrics`` result read from a cloud's monitoring API for one resource."""

    resource: Resource | None = None
    """The resource the series belong to."""
    cloud_label: str = ""
    """The cloud's name ("AWS")."""
    api: str = ""
    """The monitoring API read (``cloudwatch:GetMetricData``)."""
    failed: tuple[str, ...] = ()
    """Metrics that could not be read, each with why."""

    def notes(self) -> list[str]:
        """The bounds, then the metrics that failed."""
        return super().notes() + [f"not read: {f}" for f in self.failed]

    def render(self) -> str:
        """The model's text: which resource, one line per series, the notes."""
        r, res = self.result, self.resource
        where = f"{res.provider} {res.account}/{res.region}" if res else ""
        what = f"{kind_label(res.kind)} {res.name or res.id} ({res.id}, {where})" if res else ""
        head = f"{self.cloud_label} metrics of {what} over the last {_span(self.window_s)} (step {_span(r.step_s)})"
        lines = [f"{head}:"] + [f"- {s.render()}" for s in self.summaries] if r.series else [f"{head}: no series."]
        return "\n".join(lines + [f"Note: {n}." for n in self.notes()])

    def to_tool_output(self) -> ToolOutput:
        """Rendering, card line, data and the monitoring API as provenance."""
        provider = self.resource.provider if self.resource else ""
        source = Source(provider=provider, label=self.cloud_label, api=self.api, fetched_at=self.result.fetched_at)
        return ToolOutput(content=self.render(), summary=self.card_line(), data=self.data(), sources=(source,))


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _bounded(series: Series) -> Series:
    """At most :data:`MAX_POINTS` points, the newest kept (the step already aims below it)."""
    if len(series.points) <= MAX_POINTS:
        return series
    return Series(series.labels, series.points[-MAX_POINTS:], series.unit)


async def _resolve(estate: Estate, text: str, ctx: ToolContext, providers: list[str]) -> Resource:
    try:
        query = parse_query(text)
    except QueryError as exc:
        raise ToolError(str(exc)) from None
    scopes = ctx.grant.scopes if ctx.grant is not None else ()
    kinds = [k for k in METRIC_KINDS if k in estate.kinds()]
    view = await estate.view(kinds, scopes, fresh=ctx.fresh, providers=providers)
    best, _ = rank(view.resources, query, limit=1)
    if not best:
        failed = "; ".join(f.describe() for f in view.failures)
        unread = f" (not read: {failed})" if failed else ""
        raise ToolError(f"nothing found that you may see matching {text!r}{unread}")
    return best[0].resource


async def _read(source: MetricSource, resource: Resource, names: list[str], start: float, end: float,
                step_s: int) -> tuple[list[Series], list[str]]:
    outcomes = await asyncio.gather(
        *(source.series(resource, name, start, end, step_s) for name in names), return_exceptions=True
    )
    found: list[Series] = []
    failed: list[str] = []
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, SourceError):
            failed.append(f"{name}: {outcome.reason}")
        elif isinstance(outcome, BaseException):
            failed.append(f"{name}: {type(outcome).__name__}")  # never the message: it may quote a request
        else:
            found.extend(_bounded(s) for s in outcome)
    return found, failed


def build_resource_metric_tools(
    estate: Estate, sources_by_provider: Mapping[str, MetricSource], *, timeout_s: float | None,
    charts: ChartMaker | None = None, tz: str = "UTC",
) -> list[Tool]:
    """The ``resource_metrics`` tool over ``estate`` and the clouds' metric sources (by provider key); ``charts``
    draws each answer's chart (in time zone ``tz``)."""
    providers = list(sources_by_provider)

    async def resource_metrics(
        resource: str, window: str = "1h", metrics: list[str] | None = None, *, ctx: ToolContext
    ) -> ToolOutput:
        window_s = parse_duration(window, "window")
        note = f"window bounded to {_span(MAX_WINDOW_S)} (asked {window})" if window_s > MAX_WINDOW_S else ""
        window_s = min(window_s, MAX_WINDOW_S)
        found = await _resolve(estate, resource, ctx, providers)
        source = sources_by_provider[found.provider]
        own = getattr(source, "catalog", None)  # a source with a catalog of its own (Prometheus) names what it reads
        catalog = own(found) if callable(own) else catalog_of(found)
        if not catalog:
            raise ToolError(f"{found.name or found.id} is a {kind_label(found.kind)} on {found.provider}: "
                            "no standard metrics are known for it")
        unknown = [m for m in metrics or [] if m not in catalog]
        if unknown:
            raise ToolError(f"no {', '.join(unknown)} metric for this {kind_label(found.kind)}; "
                            f"it has {', '.join(catalog)}")
        step_s = max(60, choose_step(window_s, None))
        end = time.time()
        series, failed = await _read(source, found, list(metrics or catalog), end - window_s, end, step_s)
        if not series and failed:
            raise ToolError(f"{source.label} monitoring ({source.metric_api}) could not be read for "
                            f"{found.name or found.id}: {'; '.join(failed)}")
        result = RangeResult(tuple(series), end - window_s, end, step_s, None, len(series), time.time())
        query = f"{found.provider}:{found.id} {','.join(metrics or catalog)}"
        answer = ResourceMetricsResult(
            query, window_s, note, result, tuple(summarize(s) for s in series), found, source.label,
            source.metric_api, tuple(failed),
        )
        title = f"{found.name or found.id} {{metrics}} · last {_span(window_s)}"
        return await with_charts(answer.to_tool_output(), charts, answer.chart_specs(title, tz), ctx)

    resource_metrics.__doc__ = """Standard metrics (cpu, memory, network, disk, connections, requests) of one server,
    Kubernetes node, database or load balancer, found by name, IP or id; returns per-series figures, not points.

    Args:
        resource: Its name, IP address or cloud id (prod-db-01, 10.0.3.7, i-0abc).
        window: How far back: 15m, 1h, 6h, 24h or 7d (at most 7d).
        metrics: Only these (cpu, memory, net_in, net_out, disk_read, disk_write, connections, requests).
    """
    return [tool(resource_metrics, timeout_s=timeout_s, read_only=True)]
