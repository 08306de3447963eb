"""The ``query_metrics`` tool: a PromQL range query handed to the model as one summary line per series.

The points themselves travel only in the tool's data (for a chart renderer),
never in what the model reads.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botgateway.tooling import Source, Tool, ToolContext, ToolError, ToolOutput, TTLCache, tool
from tools.charts.artifacts import ChartMaker
from tools.charts.attach import with_charts
from tools.charts.spec import ChartSpec
from tools.metrics.charting import line_chart
from tools.metrics.prometheus import MetricsError, PrometheusSource, RangeResult
from tools.metrics.scoping import grant_matchers, scope_query
from tools.metrics.summary import SeriesSummary, summarize

__all__ = [
    "MAX_CHART_POINTS",
    "MAX_WINDOW_S",
    "METRIC_QUERY_KIND",
    "MetricQueryResult",
    "build_metric_tools",
    "parse_duration",
]

METRIC_QUERY_KIND = "metric_query"
"""The ``kind`` of a :class:`MetricQueryResult` in tool data."""
MAX_WINDOW_S = 7 * 86400
"""The longest window a query reads back."""
CACHE_TTL_S = 30.0
"""How long a range's answer is reused for the same question."""
CACHE_ALIGN_S = 15
"""A range ends on a multiple of this many seconds, so a question repeated within it asks the same range."""
MAX_CHART_POINTS = 5000
"""Points carried in the data for a chart, over all series; series past it carry none."""

_DURATION = re.compile(r"^(\d{1,5})\s*(s|m|min|h|d|w)$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, what: str) -> int:
    """``15m``, ``1h``, ``6h``, ``24h``, ``7d`` → seconds; raises :class:`ToolError` when unreadable or zero."""
    match = _DURATION.match((text or "").strip())
    if not match or int(match.group(1)) == 0:
        raise ToolError(f"{what} {text!r} is not understood; give 15m, 1h, 6h, 24h or 7d")
    return int(match.group(1)) * _UNIT_S[match.group(2).lower()]


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@dataclass(frozen=True)
class MetricQueryResult:
    """What one ``query_metrics`` call found: the summaries, and the series behind them for a chart."""

    query: str
    """The PromQL expression."""
    window_s: int
    """How far back it read, in seconds."""
    window_note: str
    """Why the window differs from the one asked (bounded); empty when it does not."""
    result: RangeResult
    """The range query's answer."""
    summaries: tuple[SeriesSummary, ...]
    """One per series kept, in the same order."""

    def notes(self) -> list[str]:
        """What the model should know about how the answer was bounded."""
        notes = [self.window_note] if self.window_note else []
        r = self.result
        if r.step_raised and r.requested_step_s is not None:
            notes.append(f"step raised from {_span(r.requested_step_s)} to {_span(r.step_s)} to keep at most "
                         f"about 500 points per series")
        if r.left_out:
            notes.append(f"{r.left_out} more series left out: showing the top {len(r.series)} of {r.total_series} "
                         f"by max value; narrow the query with label matchers to see others")
        return notes

    def render(self) -> str:
        """The model's text: a header, one line per series, the notes."""
        r = self.result
        head = f"Prometheus `{self.query}` over the last {_span(self.window_s)} (step {_span(r.step_s)})"
        if not r.series:
            return "\n".join([f"{head}: no series matched."] + [f"Note: {n}." for n in self.notes()])
        lines = [f"{head}, {r.total_series} series:"] + [f"- {s.render()}" for s in self.summaries]
        return "\n".join(lines + [f"Note: {n}." for n in self.notes()])

    def card_line(self) -> str:
        """One line for the card."""
        count = len(self.result.series)
        cut = f" (of {self.result.total_series})" if self.result.left_out else ""
        return f"{count} series{cut} over {_span(self.window_s)}, step {_span(self.result.step_s)}"

    def data(self) -> dict[str, Any]:
        """JSON-ready data: the summaries, how the query ran, and the points (capped) for a chart renderer."""
        r = self.result
        budget = MAX_CHART_POINTS
        series: list[dict[str, Any]] = []
        for s in r.series:
            points = [[t, v] for t, v in s.points] if len(s.points) <= budget else []
            budget -= len(points)
            series.append({"name": s.name(), "labels": dict(s.labels), "unit": s.unit, "points": points})
        return {
            "kind": METRIC_QUERY_KIND,
            "query": self.query,
            "window": _span(self.window_s),
            "start": r.start,
            "end": r.end,
            "step": _span(r.step_s),
            "step_s": r.step_s,
            "notes": self.notes(),
            "total_series": r.total_series,
            "left_out": r.left_out,
            "summaries": [_summary_data(s) for s in self.summaries],
            "series": series,
        }

    def chart_specs(self, title: str, tz: str) -> list[tuple[ChartSpec, str]]:
        """The chart of this result (the series sharing the first one's unit) and its words; none without points."""
        drawn = line_chart(title, self.result.series, self.summaries, tz=tz)
        return [drawn] if drawn is not None else []

    def to_tool_output(self) -> ToolOutput:
        """Rendering, card line, data and provenance."""
        source = Source(provider="prometheus", label="Prometheus", api="query_range", fetched_at=self.result.fetched_at)
        return ToolOutput(content=self.render(), summary=self.card_line(), data=self.data(), sources=(source,))


def _summary_data(s: SeriesSummary) -> dict[str, Any]:
    figures = {"min": s.min, "max": s.max, "mean": s.mean, "p95": s.p95, "last": s.last} if s.count else {}
    return {
        "name": s.name,
        "unit": s.unit,
        "count": s.count,
        **figures,
        "last_time": s.last_time,
        "trend": s.trend.direction,
        "slope_per_hour": s.trend.slope_per_hour,
        "changes": [
            {"time": _iso(c.time), "kind": c.kind, "before": c.before, "after": c.after} for c in s.changes
        ],
        "line": s.render(),
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_metric_tools(source: PrometheusSource, *, timeout_s: float | None, charts: ChartMaker | None = None,
                       tz: str = "UTC", clock: Callable[[], float] = time.time) -> list[Tool]:
    """The metric tools over one Prometheus ``source``; ``charts`` draws each answer's chart (in time zone ``tz``).

    A range asked again within :data:`CACHE_TTL_S` (same scoped query, window and step) is answered from the cache,
    and says so in its provenance; Refresh (``ctx.fresh``) asks Prometheus again.
    """
    cache = TTLCache(CACHE_TTL_S, max_entries=128)

    async def read(sent: str, window_s: int, step_s: int | None, fresh: bool) -> tuple[RangeResult, bool]:
        # The end is aligned to the cache's granularity so that the same question asked again hits the same key.
        end = float(int(clock()) // CACHE_ALIGN_S * CACHE_ALIGN_S)
        key = (sent, window_s, step_s, end)
        hit = None if fresh else cache.get(key)
        if hit is not None:
            return hit, True
        result = await source.range(sent, end - window_s, end, step_s)
        cache.put(key, result)
        return result, False

    async def query_metrics(
        promql: str, window: str = "1h", step: str | None = None, *, ctx: ToolContext
    ) -> ToolOutput:
        sent = promql  # what Prometheus runs: the asker's query narrowed to their scopes' label matchers
        if ctx.grant is not None and ctx.grant.scopes:
            try:
                sent = scope_query(promql, grant_matchers(ctx.grant))
            except MetricsError as exc:
                raise ToolError(f"The query was not run: {exc.reason}") from None
        window_s = parse_duration(window, "window")
        note = f"window bounded to {_span(MAX_WINDOW_S)} (asked {window})" if window_s > MAX_WINDOW_S else ""
        window_s = min(window_s, MAX_WINDOW_S)
        step_s = parse_duration(step, "step") if step else None
        try:
            result, cached = await read(sent, window_s, step_s, ctx.fresh)
        except MetricsError as exc:
            prefix = "Prometheus rejected the query" if exc.kind == "bad_query" else "Prometheus is not available"
            raise ToolError(f"{prefix}: {exc.reason}") from None
        found = MetricQueryResult(promql, window_s, note, result, tuple(summarize(s) for s in result.series))
        output = found.to_tool_output()
        if cached:
            output = dataclasses.replace(output, sources=tuple(dataclasses.replace(x, cached=True)
                                                               for x in output.sources))
        return await with_charts(output, charts, found.chart_specs(f"{promql} · last {window}", tz),
                                 ctx)

    query_metrics.__doc__ = """Run a PromQL query over a recent window; returns per-series figures (min, max, mean, p95,
    last, trend, notable changes), not the points.

    Args:
        promql: A PromQL expression, e.g. rate(node_cpu_seconds_total{mode!="idle"}[5m]).
        window: How far back: 15m, 1h, 6h, 24h or 7d (at most 7d).
        step: Resolution such as 30s or 5m; default fits the window.
    """
    return [tool(query_metrics, timeout_s=timeout_s, read_only=True)]
