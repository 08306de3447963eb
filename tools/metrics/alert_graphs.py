"""Alert cards' graphs drawn from Prometheus: the firing expression over the last hour, with the rule's threshold.

The expression comes from the alert's ``generatorURL``
(:func:`~tools.metrics.alert_expr.alert_graph`); it is queried on the
*configured* Prometheus, never on the host a webhook names (a payload must not
make the gateway fetch an address of its choosing).
"""

from __future__ import annotations

import time

import structlog

from botgateway.alerts.graphs import DrawnGraph
from botgateway.alerts.group import AlertGroup
from botgateway.tooling import ToolContext, ToolOutput
from tools.charts.artifacts import ChartMaker
from tools.charts.attach import with_charts
from tools.metrics.alert_expr import alert_graph
from tools.metrics.charting import line_chart
from tools.metrics.prometheus import MetricsError, PrometheusSource
from tools.metrics.summary import summarize

__all__ = ["GRAPH_WINDOW_S", "PrometheusAlertGrapher"]

log = structlog.get_logger(__name__)

GRAPH_WINDOW_S = 3600
"""How far back an alert's graph reads."""


class PrometheusAlertGrapher:
    """Draws an alert group's firing expression from the configured Prometheus (an ``AlertGrapher``)."""

    def __init__(self, source: PrometheusSource, charts: ChartMaker, *, tz: str = "UTC") -> None:
        self._source = source
        self._charts = charts
        self._tz = tz

    async def graph(self, group: AlertGroup, *, locale: str) -> DrawnGraph | None:
        """The graph of the first alert of ``group`` whose ``generatorURL`` names an expression; None otherwise."""
        found = next((g for g in (alert_graph(a.generator_url) for a in group.alerts if a.generator_url) if g), None)
        if found is None:
            return None
        end = time.time()
        try:
            result = await self._source.range(found.expr, end - GRAPH_WINDOW_S, end, None)
        except MetricsError as exc:
            log.warning("alerts.graph_query_failed", kind=exc.kind, reason=exc.reason)
            return None
        name = group.common_labels.get("alertname") or next(
            (a.labels.get("alertname", "") for a in group.alerts), "")
        state = "resolved" if group.status == "resolved" else "firing"
        title = f"{name} ({state}): {found.expr}" if name else f"{found.expr} ({state})"
        label = f"{found.comparison} {found.threshold:g}" if found.threshold is not None else ""
        drawn = line_chart(title, result.series, [summarize(s) for s in result.series], tz=self._tz,
                           threshold=found.threshold, threshold_label=label)
        if drawn is None:
            return None
        output = await with_charts(ToolOutput(content="", summary=""), self._charts, [drawn],
                                   ToolContext(platform="alerts"))
        return DrawnGraph(output.artifacts[0], found.expr) if output.artifacts else None
