"""Metrics for the model: series from a source (Prometheus), reduced to numbers the model reads, never points."""

from tools.metrics.alert_expr import AlertGraph, alert_graph
from tools.metrics.metric_tools import METRIC_QUERY_KIND, MetricQueryResult, build_metric_tools, parse_duration
from tools.metrics.prometheus import MAX_POINTS, MAX_SERIES, MetricsError, PrometheusSource, RangeResult, choose_step
from tools.metrics.scoping import grant_matchers, scope_query
from tools.metrics.series import Series, unit_of
from tools.metrics.summary import Change, SeriesSummary, Trend, summarize

__all__ = [
    "MAX_POINTS",
    "MAX_SERIES",
    "METRIC_QUERY_KIND",
    "AlertGraph",
    "Change",
    "MetricQueryResult",
    "MetricsError",
    "PrometheusSource",
    "RangeResult",
    "Series",
    "SeriesSummary",
    "Trend",
    "alert_graph",
    "build_metric_tools",
    "choose_step",
    "grant_matchers",
    "parse_duration",
    "scope_query",
    "summarize",
    "unit_of",
]
