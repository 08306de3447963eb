"""An alert's graph from its generatorURL: the firing expression split into the series and its threshold."""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest

from tools.metrics.alert_expr import AlertGraph, alert_graph

PROM = "http://prom:9090"


def _url(expr: str, base: str = PROM) -> str:
    return f"{base}/graph?g0.expr={quote_plus(expr)}&g0.tab=1"


SPLITS = [
    # (rule expression, graphed expression, threshold, comparison with the series on the left)
    ("node_load1 > 0.9", "node_load1{}", 0.9, ">"),
    ("avg by (instance) (rate(cpu_seconds_total[5m])) * 100 >= 80",
     "avg by (instance)(rate(cpu_seconds_total{}[5m])) * 100", 80.0, ">="),
    ("0.9 < node_load1", "node_load1{}", 0.9, ">"),  # read from the series' side
    ("10 >= free_bytes", "free_bytes{}", 10.0, "<="),
    ("errors > bool 2", "errors{}", 2.0, ">"),
    ("up == 0", "up{}", 0.0, "=="),
    ("(disk_used > (80 * 1024))", "disk_used{}", 81920.0, ">"),
    ("temperature < -5", "temperature{}", -5.0, "<"),
    ('rate(http_errors{path=~"/api/.*\\\\.json"}[5m]) > 1',  # the regex's escaped backslash survives
     'rate(http_errors{path=~"/api/.*\\\\.json"}[5m])', 1.0, ">"),
    # `and` / `unless` chains: the first comparison with a number side.
    ("rate(errors[5m]) > 0.5 and on(instance) up == 1", "rate(errors{}[5m])", 0.5, ">"),
    ("up unless on(job) (load > 4)", "load{}", 4.0, ">"),
]


@pytest.mark.parametrize(("rule", "expr", "threshold", "comparison"), SPLITS, ids=[s[0] for s in SPLITS])
def test_a_numeric_comparison_splits_into_series_and_threshold(rule: str, expr: str, threshold: float,
                                                               comparison: str) -> None:
    assert alert_graph(_url(rule)) == AlertGraph(expr, threshold, comparison, PROM)


@pytest.mark.parametrize("rule", [
    "absent(up{job=\"db\"})",
    "errors > on(instance) limits",  # compared with another series, not a number
    "rate(errors[5m])",
    "up and on() vector(1)",
])
def test_without_a_numeric_comparison_the_whole_expression_is_graphed(rule: str) -> None:
    assert alert_graph(_url(rule)) == AlertGraph(rule, None, "", PROM)


def test_the_prometheus_url_keeps_its_route_prefix() -> None:
    graph = alert_graph(_url("up == 0", base="https://ops.example.test/prometheus"))
    assert graph is not None and graph.prometheus_url == "https://ops.example.test/prometheus"


@pytest.mark.parametrize("url", [
    f"{PROM}/graph?g0.tab=1",  # no expression
    f"{PROM}/graph?g0.expr=&g0.tab=1",
    _url("rate(errors[5m]"),  # does not parse
    _url("nosuchfunction(up) > 1"),
    "/graph?g0.expr=up",  # no server to ask
    "not a url",
    "",
    "http://[::1/graph?g0.expr=up",
])
def test_no_expression_or_an_unparseable_one_gives_none(url: str) -> None:
    assert alert_graph(url) is None
