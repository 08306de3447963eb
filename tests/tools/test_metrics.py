"""query_metrics against a real Prometheus whose history promtool loaded from an OpenMetrics file."""

from __future__ import annotations

import asyncio
import io
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from botgateway.grant import Grant, Scope
from botgateway.tooling import Tool, ToolContext, ToolError, ToolRegistry
from tests.ports import closed_port
from tests.prometheus_process import running_prometheus
from tools.metrics import METRIC_QUERY_KIND, PrometheusSource, build_metric_tools

CTX = ToolContext(user_id="U1", platform="cli")
TOKEN = "Bearer prom-token-do-not-print"
CpuHistory = dict[str, list[tuple[int, float]]]
STEP_AGO_S = 50 * 60
"""web-2 jumps from 20 to 80 this long before the newest sample."""


def _history(end: int) -> tuple[str, CpuHistory]:
    """Two hours of samples a minute apart, ending at ``end``: flat, stepped and rising CPU; 14 queues."""
    times = [end - 60 * i for i in range(119, -1, -1)]
    wobble = [((i * 37) % 11 - 5) / 10 for i in range(len(times))]  # ±0.5, deterministic
    cpu = {
        'instance="web-1"': [(t, 20 + w) for t, w in zip(times, wobble, strict=True)],
        'instance="web-2"': [
            (t, (80 if t >= end - STEP_AGO_S else 20) + w) for t, w in zip(times, wobble, strict=True)
        ],
        'instance="web-3"': [(t, 10 + 0.5 * i + w) for i, (t, w) in enumerate(zip(times, wobble, strict=True))],
    }
    queues = {f'queue="q{n:02d}"': [(t, float(n)) for t in times] for n in range(14)}
    lines = ["# TYPE demo_cpu_percent gauge"]
    lines += [f"demo_cpu_percent{{{labels}}} {v} {t}" for labels, points in cpu.items() for t, v in points]
    lines += ["# TYPE demo_queue_depth gauge"]
    lines += [f"demo_queue_depth{{{labels}}} {v} {t}" for labels, points in queues.items() for t, v in points]
    return "\n".join([*lines, "# EOF", ""]), cpu


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CpuHistory, int]]:
    """A real Prometheus serving the history; yields its URL, the CPU samples written and the newest time."""
    end = int(time.time()) // 60 * 60 - 60
    text, cpu = _history(end)
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), text) as url:
        yield url, cpu, end


@pytest.fixture
async def query(prometheus: tuple[str, Any, int]) -> AsyncIterator[Tool]:
    source = PrometheusSource(prometheus[0], headers={"Authorization": TOKEN}, timeout_s=10)
    try:
        yield build_metric_tools(source, timeout_s=30)[0]
    finally:
        await source.close()


def _by_instance(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"].split('instance="')[1].split('"')[0]: s for s in data["summaries"]}


async def test_summaries_match_what_was_written(query: Tool, prometheus: tuple[str, Any, int]) -> None:
    _, cpu, end = prometheus
    out = await query.invoke({"promql": "demo_cpu_percent", "window": "2h"}, CTX)
    data = out.data
    assert data["kind"] == METRIC_QUERY_KIND and data["query"] == "demo_cpu_percent" and data["window"] == "2h"
    got = _by_instance(data)
    assert set(got) == {"web-1", "web-2", "web-3"}
    for instance, summary in got.items():
        written = [v for _, v in cpu[f'instance="{instance}"']]
        assert summary["min"] == pytest.approx(min(written), abs=0.01)
        assert summary["max"] == pytest.approx(max(written), abs=0.01)
        assert summary["last"] == pytest.approx(written[-1], abs=0.01)
    assert got["web-1"]["trend"] == "flat" and got["web-3"]["trend"] == "rising"
    steps = [c for c in got["web-2"]["changes"] if c["kind"] == "step"]
    assert len(steps) == 1
    when = time.mktime(time.strptime(steps[0]["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(when - (end - STEP_AGO_S)) <= 5 * 60
    assert steps[0]["before"] == pytest.approx(20, abs=1) and steps[0]["after"] == pytest.approx(80, abs=1)
    # The model reads one line per series; the points go only to the chart data.
    lines = out.content.splitlines()
    assert len(lines) == 4 and "; step 19" in lines[1] and "web-2" in lines[1], out.content
    assert "step" not in lines[2] and "spike" not in lines[2] and "step" not in lines[3] and "spike" not in lines[3]
    assert all(len(s["points"]) >= 100 for s in data["series"])
    assert str(cpu['instance="web-3"'][5][1]) not in out.content
    assert [(s.provider, s.api) for s in out.sources] == [("prometheus", "query_range")]
    assert out.sources[0].fetched_at == pytest.approx(time.time(), abs=120)


async def test_a_week_is_stepped_down_and_says_so(query: Tool) -> None:
    out = await query.invoke({"promql": "demo_cpu_percent", "window": "30d", "step": "1m"}, CTX)
    assert out.data["step_s"] * 500 >= 7 * 86400 and out.data["window"] == "7d"
    assert all(len(s["points"]) <= 500 for s in out.data["series"])
    assert "step raised from 1m to 30m" in out.content and "window bounded to 7d" in out.content
    assert "step 30m" in out.summary


async def test_many_series_are_cut_to_the_top_ten_by_max(query: Tool) -> None:
    out = await query.invoke({"promql": "demo_queue_depth", "window": "1h"}, CTX)
    names = [s["name"] for s in out.data["summaries"]]
    assert len(names) == 10 and out.data["left_out"] == 4 and out.data["total_series"] == 14
    assert names[0] == 'demo_queue_depth{queue="q13"}' and 'demo_queue_depth{queue="q03"}' not in names
    assert "4 more series left out" in out.content and "(of 14)" in out.summary


async def test_invalid_promql_comes_back_as_prometheus_error(query: Tool) -> None:
    with pytest.raises(ToolError) as caught:
        await query.invoke({"promql": "rate(demo_cpu_percent[5m]", "window": "1h"}, CTX)
    message = str(caught.value)
    assert message.startswith("Prometheus rejected the query: bad_data: ") and "parse error" in message
    assert len(message) < 400 and "prom-token" not in message


async def test_unreachable_prometheus_gives_a_clear_reason() -> None:
    port = closed_port()
    source = PrometheusSource(f"http://admin:hunter2@127.0.0.1:{port}", headers={"Authorization": TOKEN}, timeout_s=5)
    registry = ToolRegistry(build_metric_tools(source, timeout_s=20))
    try:
        outcome = await registry.execute("query_metrics", '{"promql": "up"}', CTX)
    finally:
        await source.close()
    assert not outcome.ok
    assert f"cannot connect to Prometheus at 127.0.0.1:{port}" in outcome.error
    for secret in ("hunter2", "admin", "prom-token"):
        assert secret not in outcome.content and secret not in outcome.error


async def test_a_scoped_asker_is_refused(query: Tool) -> None:
    grant = Grant(roles=("viewer",), tools=frozenset({"query_metrics"}), scopes=(Scope(tags={"env": "!prod"}),))
    with pytest.raises(ToolError, match="resource scopes"):
        await query.invoke({"promql": "demo_cpu_percent"}, ToolContext(user_id="U2", grant=grant))


async def test_series_and_label_lookups(prometheus: tuple[str, Any, int]) -> None:
    url, _, end = prometheus
    source = PrometheusSource(url)
    try:
        instances = await source.label_values("instance", ['demo_cpu_percent{instance=~"web-.*"}'])
        found = await source.series(["demo_cpu_percent"], end - 3600, end)
        now = await source.instant('demo_cpu_percent{instance="web-1"}', at=end)
    finally:
        await source.close()
    assert instances == ("web-1", "web-2", "web-3")
    assert sorted(s["instance"] for s in found) == ["web-1", "web-2", "web-3"]
    assert len(now) == 1 and len(now[0].points) == 1 and math.isclose(now[0].points[0][0], end)


def test_unreadable_window_is_a_tool_error() -> None:
    source = PrometheusSource("http://127.0.0.1:9")
    tool = build_metric_tools(source, timeout_s=5)[0]
    with pytest.raises(ToolError, match="give 15m, 1h"):
        asyncio.run(tool.invoke({"promql": "up", "window": "yesterday"}, CTX))



async def test_the_toolset_offers_query_metrics_when_prometheus_is_configured(prometheus: tuple[str, Any, int]) -> None:
    from botgateway.config import PrometheusConfig, ToolsConfig
    from tools.catalog import build_toolset

    url, _, _ = prometheus
    toolset = await build_toolset(ToolsConfig(prometheus=PrometheusConfig(enabled=True, url=url)))
    try:
        registry = ToolRegistry(toolset.tools)
        assert "query_metrics" in registry.names and "query_metrics" in registry.read_only_names()
        outcome = await registry.execute("query_metrics", {"promql": "demo_cpu_percent", "window": "1h"}, CTX)
        assert outcome.ok and outcome.data["kind"] == METRIC_QUERY_KIND
        assert outcome.sources and outcome.sources[0].provider == "prometheus"
    finally:
        await toolset.aclose()
    without = await build_toolset(ToolsConfig())
    try:
        assert without.get("query_metrics") is None
    finally:
        await without.aclose()


async def _range_queries(url: str) -> float:
    """How many range queries the Prometheus at ``url`` has answered (its own request counter, on its /metrics)."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as answer:
        text = await answer.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query_range"' in line)


async def test_the_answer_has_its_chart_and_a_repeat_is_served_from_the_cache(prometheus: tuple[str, Any, int]) -> None:
    from PIL import Image

    from tests.chart_fixtures import chart_maker

    now = [float(prometheus[2])]
    source = PrometheusSource(prometheus[0], headers={"Authorization": TOKEN}, timeout_s=10)
    async with chart_maker() as maker:
        tool_ = build_metric_tools(source, timeout_s=30, charts=maker, clock=lambda: now[0])[0]
        try:
            first = await tool_.invoke({"promql": "demo_cpu_percent", "window": "2h"}, CTX)
            before = await _range_queries(prometheus[0])
            again = await tool_.invoke({"promql": "demo_cpu_percent", "window": "2h"}, CTX)
            after = await _range_queries(prometheus[0])
            fresh = await tool_.invoke({"promql": "demo_cpu_percent", "window": "2h"},
                                       ToolContext(user_id="U1", platform="cli", fresh=True))
        finally:
            await source.close()
    [chart] = first.artifacts
    assert chart.ref in first.content and "demo_cpu_percent" in chart.title
    image = Image.open(io.BytesIO(chart.png))
    assert image.format == "PNG" and image.size == (chart.width, chart.height) == (800, 400)
    assert "web-3" in chart.alt and len(chart.sparkline) == 24
    assert [s.cached for s in first.sources] == [False] and [s.cached for s in again.sources] == [True]
    assert before >= 1 and after == before  # the repeat asked Prometheus nothing
    assert [s.cached for s in fresh.sources] == [False]
    assert again.data["summaries"] == first.data["summaries"]
