"""Hosts' metrics: the demo answers "how is prod-db-01 doing?" with the recorded hour's figures, offline; the
Prometheus host source reads node_exporter series from a real Prometheus by the ``instance`` label."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from botgateway.config import InventoryConfig, PrometheusConfig, ToolsConfig
from botgateway.tooling import ToolContext, ToolRegistry
from tests.paths import SAMPLE_INVENTORY
from tests.ports import closed_port
from tests.prometheus_process import running_prometheus
from tests.tools.test_demo_estate import _answer, _ask, _calls
from tools.catalog import build_toolset
from tools.demo.metric_questions import read_metric_question
from tools.demo.recorded_metrics import load_recording
from tools.estate.resource import Resource
from tools.estate.source import SourceError
from tools.metrics import METRIC_QUERY_KIND, PrometheusSource
from tools.metrics.prometheus_hosts import HOST_QUERIES, PrometheusHostSource, instance_matcher, recognize

CTX = ToolContext(user_id="U1", platform="cli")
DB01 = "10.0.1.100:9100"
"""prod-db-01's node_exporter in the recording."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _peak_clocks(values: list[float], before: float, after: float) -> set[str]:
    """When the peak was, as the answer writes it: the newest value stands at the minute of the question."""
    back = (len(values) - 1 - values.index(max(values))) * 60
    return {datetime.fromtimestamp(t // 60 * 60 - back, UTC).strftime("%H:%M UTC") for t in (before, after)}


# --- the demo, offline, on the sample estate ------------------------------------------------------------------


async def test_how_is_prod_db_01_doing_answers_with_the_recorded_figures(tmp_path: Path) -> None:
    recorded = load_recording().instances[DB01]
    cpu, memory = list(recorded["cpu"]), list(recorded["memory"])
    before = time.time()
    english, chinese, cpu_question = await _ask(
        tmp_path, "how is prod-db-01 doing?", "prod-db-01 怎么样？", "what did CPU do on prod-db-01?"
    )
    after = time.time()
    for events in (english, chinese, cpu_question):
        assert _calls(events) == [("resource_metrics", {"resource": "prod-db-01", "window": "1h"})]
    answer = _answer(english)
    head = answer.splitlines()[0]
    assert head.startswith(f"**prod-db-01** over the last 1h: CPU {cpu[-1]:.1f}% now "
                           f"(p95 {_percentile(cpu, 0.95):.1f}%, max {max(cpu):.1f}% at "), head
    assert re.search(r"max [\d.]+% at (\d\d:\d\d UTC)\)", head).group(1) in _peak_clocks(cpu, before, after)  # type: ignore[union-attr]
    assert f"; memory {memory[-1]:.1f}%, flat." in head
    # "high" comes with its number; the CPU burst of the recording is told with its levels
    assert f"CPU ran high: peaked at {max(cpu):.1f}% at " in answer
    assert re.search(rf"CPU spike [\d.]+% → {max(cpu):.1f}% at \d\d:\d\d UTC", answer), answer
    assert "- **Disk read:** " in answer and " MB/s now" in answer
    assert "Source: Recorded demo (recorded node_exporter series)." in answer
    zh = _answer(chinese)
    assert zh.startswith(f"**prod-db-01** 过去 1h：CPU 当前 {cpu[-1]:.1f}%（p95 {_percentile(cpu, 0.95):.1f}%，"
                         f"最高 {max(cpu):.1f}%，"), zh
    assert f"内存 {memory[-1]:.1f}%，平稳" in zh and f"CPU 偏高：峰值 {max(cpu):.1f}%" in zh
    assert _answer(cpu_question).splitlines()[0] == head


async def test_a_database_answers_with_its_connections(tmp_path: Path) -> None:
    connections = list(load_recording().instances["10.0.3.7:9104"]["connections"])
    [events] = await _ask(tmp_path, "how is orders-db doing?")
    assert _calls(events) == [("resource_metrics", {"resource": "orders-db", "window": "1h"})]
    line = next(x for x in _answer(events).splitlines() if x.startswith("- **Connections:**"))
    assert line.startswith(f"- **Connections:** {connections[-1]:.0f} now · ") and f"max {max(connections):.0f} · " in line


async def test_without_the_metrics_tool_the_demo_looks_the_host_up(tmp_path: Path) -> None:
    [events] = await _ask(tmp_path, "how is prod-db-01 doing?", keep=("find_server", "find_resource"))
    assert _calls(events) == [("find_server", {"query": "prod-db-01"})]
    assert "%" not in _answer(events)


def test_which_questions_are_about_metrics() -> None:
    hosts = ["prod-db-01", "bastion"]
    asked = read_metric_question("prod-db-01 最近 6 小时的 CPU 和内存", hosts)
    assert asked is not None and (asked.subject, asked.window, asked.focus) == ("prod-db-01", "6h", ("cpu", "memory"))
    assert read_metric_question("how's 10.0.3.7 been over the last 30 minutes?", hosts).window == "30m"  # type: ignore[union-attr]
    for other in ("who stopped prod-db-03?", "which server is 10.0.1.100?", "what's behind api.example.com?",
                  "what is api-lb.lb.example.net?", "list the load balancers", "how is the weather?",
                  "is port 443 of api.example.com reachable from the internet?", "sg-bp1web 允许哪些入站流量？",
                  "which traffic does sg-web allow?"):
        assert read_metric_question(other, hosts) is None, other


async def test_only_the_sample_estate_has_a_recording(tmp_path: Path) -> None:
    other = tmp_path / "hosts.yaml"
    other.write_text(SAMPLE_INVENTORY.read_text())  # the same hosts, but an operator's own file
    for path, offered in ((SAMPLE_INVENTORY, True), (other, False)):
        toolset = await build_toolset(ToolsConfig(inventory=InventoryConfig(path=str(path))))
        try:
            assert (toolset.get("resource_metrics") is not None) is offered, path
        finally:
            await toolset.aclose()


def test_the_recording_answers_only_the_host_expressions() -> None:
    db = Resource(kind="database", provider="inventory", account="on-prem", region="", id="rds-orders-01",
                  name="orders-db", private_ips=("10.0.3.7",))
    expr = HOST_QUERIES["cpu"].expr.format(sel=instance_matcher(db), window="300s")
    assert 'instance=~"(?:10\\\\.0\\\\.3\\\\.7|' in expr  # re.escape's backslashes, doubled for a PromQL string
    found = recognize(expr)
    assert found is not None and found[0] == "cpu"
    assert found[1].fullmatch("10.0.3.7:9100") and found[1].fullmatch("orders-db.corp.example:9100")
    assert not found[1].fullmatch("10.0.3.70:9100") and not found[1].fullmatch("10a0b3c7:9100")
    assert recognize("up") is None and recognize(expr.replace("node_cpu_seconds_total", "x")) is None


# --- the host source over a real Prometheus ------------------------------------------------------------------

BUSY_BEFORE, BUSY_AFTER, STEP_AGO_S = 0.30, 0.70, 60 * 60
"""db-a's CPUs go from 30% to 70% busy this long before the newest sample (40 minutes before now)."""
MEM_TOTAL, MEM_AVAILABLE = 64 * 2**30, 24 * 2**30
RX, TX, READ, WRITE, CONNECTIONS = 1.25e6, 2.5e6, 4e6, 1e6, 150.0


def _node_exporter(instance: str, end: int, *, busy_scale: float = 1.0) -> list[str]:
    """Two hours of one node_exporter's standard series a minute apart, counters counting, as it exports them."""
    lines: list[str] = []
    times = [end - 60 * i for i in range(119, -1, -1)]
    for cpu in ("0", "1"):
        idle = user = 0.0
        for t in times:
            busy = (BUSY_AFTER if t > end - STEP_AGO_S else BUSY_BEFORE) * busy_scale
            idle, user = idle + 60 * (1 - busy), user + 60 * busy
            lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",instance="{instance}",mode="idle"}} {idle} {t}')
            lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",instance="{instance}",mode="user"}} {user} {t}')
    for n, t in enumerate(times):
        lines += [f'node_memory_MemTotal_bytes{{instance="{instance}"}} {MEM_TOTAL} {t}',
                  f'node_memory_MemAvailable_bytes{{instance="{instance}"}} {MEM_AVAILABLE} {t}']
        # lo and the device-mapper volume carry traffic already counted (or never on the wire): left out
        for name, device, per_s in (("network_receive", "eth0", RX), ("network_receive", "lo", 1e9),
                                    ("network_transmit", "eth0", TX), ("disk_read", "sda", READ),
                                    ("disk_read", "dm-0", READ), ("disk_written", "sda", WRITE)):
            lines.append(f'node_{name}_bytes_total{{device="{device}",instance="{instance}"}} {per_s * 60 * n} {t}')
    return lines


def _history(end: int) -> str:
    """The node_exporters' series and a mysqld_exporter's, as an OpenMetrics text (each family's samples together)."""
    families: dict[str, list[str]] = {}
    # db-a by its IP; web-a by its FQDN; two look-alikes of db-a's IP that an unanchored or unescaped match would take
    for instance, scale in (("10.0.3.7:9100", 1.0), ("web-a.corp.example:9100", 0.5), ("10.0.3.70:9100", 0.1),
                            ("10a0b3c7:9100", 0.1)):
        for line in _node_exporter(instance, end, busy_scale=scale):
            families.setdefault(line.split("{", 1)[0], []).append(line)
    families["mysql_global_status_threads_connected"] = [
        f'mysql_global_status_threads_connected{{instance="10.0.3.7:9104"}} {CONNECTIONS} {end - 60 * i}'
        for i in range(119, -1, -1)
    ]
    text: list[str] = []
    for name, samples in families.items():
        counter = name.endswith("_total")
        text += [f"# TYPE {name.removesuffix('_total')} {'counter' if counter else 'gauge'}", *samples]
    return "\n".join([*text, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # The exporters' samples run on past every query's end, as a scraped exporter's would: a rate read at the end of
    # its window then finds samples there, not a gap it would extrapolate over.
    end = int(time.time()) // 60 * 60 + 20 * 60
    with running_prometheus(tmp_path_factory.mktemp("node-exporter"), _history(end)) as url:
        yield url


@pytest.fixture
async def registry(prometheus: str, tmp_path: Path) -> AsyncIterator[ToolRegistry]:
    """The toolset of an on-prem inventory with Prometheus configured: resource_metrics goes through it."""
    estate = {
        "name": "dc1",
        "hosts": [{"name": "db-a", "ip": "10.0.3.7", "status": "running"},
                  {"name": "web-a", "ip": "10.9.9.9", "status": "running"},
                  {"name": "ghost-01", "ip": "10.5.5.5", "status": "running"}],
        "databases": [{"name": "orders-db", "id": "rds-orders-01", "engine": "mysql 8.0", "ip": "10.0.3.7"}],
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(estate))
    config = ToolsConfig(inventory=InventoryConfig(path=str(path)), prometheus=PrometheusConfig(enabled=True, url=prometheus))
    toolset = await build_toolset(config)
    try:
        yield ToolRegistry(toolset.tools)
    finally:
        await toolset.aclose()


def _summaries(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"].split("{", 1)[0]: s for s in data["summaries"]}


async def test_a_host_is_read_by_its_ip_from_node_exporter(registry: ToolRegistry) -> None:
    out = await registry.execute("resource_metrics", {"resource": "db-a", "window": "1h"}, CTX)
    assert out.ok, out.error
    assert out.data["kind"] == METRIC_QUERY_KIND
    assert {s["labels"]["instance"] for s in out.data["series"]} == {"10.0.3.7:9100"}  # never the look-alikes
    got = _summaries(out.data)
    assert set(got) == set(HOST_QUERIES)
    cpu = got["cpu"]
    assert cpu["last"] == pytest.approx(100 * BUSY_AFTER, abs=0.5) and cpu["min"] == pytest.approx(100 * BUSY_BEFORE, abs=0.5)
    assert cpu["unit"] == "%" and [c["kind"] for c in cpu["changes"]] == ["step"]
    assert got["memory"]["last"] == pytest.approx(100 * (1 - MEM_AVAILABLE / MEM_TOTAL), abs=0.01)
    for metric, per_s in (("net_in", RX), ("net_out", TX), ("disk_read", READ), ("disk_write", WRITE)):
        assert got[metric]["unit"] == "B/s" and got[metric]["last"] == pytest.approx(per_s, rel=0.01), metric
    assert "Prometheus metrics of server db-a" in out.content
    assert [(s.provider, s.label, s.api) for s in out.sources] == [("inventory", "Prometheus", "query_range")]


async def test_a_host_is_read_by_its_name_and_a_database_with_its_connections(registry: ToolRegistry) -> None:
    web = await registry.execute("resource_metrics", {"resource": "web-a", "metrics": ["cpu"]}, CTX)
    assert web.ok, web.error
    assert [s["labels"]["instance"] for s in web.data["series"]] == ["web-a.corp.example:9100"]
    assert _summaries(web.data)["cpu"]["last"] == pytest.approx(50 * BUSY_AFTER, abs=0.5)
    db = await registry.execute("resource_metrics", {"resource": "orders-db", "metrics": ["connections", "memory"]}, CTX)
    assert db.ok, db.error
    got = _summaries(db.data)
    assert got["connections"]["last"] == CONNECTIONS and got["connections"]["unit"] == "count"
    assert "database orders-db" in db.content


async def test_a_host_without_series_and_an_unknown_metric_say_why(registry: ToolRegistry) -> None:
    ghost = await registry.execute("resource_metrics", {"resource": "ghost-01"}, CTX)
    assert not ghost.ok and "cpu: no node_exporter series with instance 10.5.5.5|ghost-01" in ghost.error
    wrong = await registry.execute("resource_metrics", {"resource": "db-a", "metrics": ["connections"]}, CTX)
    assert not wrong.ok and "no connections metric for this server; it has cpu, memory" in wrong.error


async def test_an_unreachable_prometheus_is_a_source_error() -> None:
    port = closed_port()
    querier = PrometheusSource(f"http://127.0.0.1:{port}", timeout_s=5)
    host = Resource(kind="server", provider="inventory", account="dc1", region="", id="db-a", name="db-a",
                    private_ips=("10.0.3.7",))
    try:
        with pytest.raises(SourceError) as caught:
            await PrometheusHostSource(querier).series(host, "cpu", time.time() - 3600, time.time(), 60)
    finally:
        await querier.close()
    assert caught.value.kind == "unreachable" and f"cannot connect to Prometheus at 127.0.0.1:{port}" in caught.value.reason
