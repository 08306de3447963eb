"""resource_metrics against CloudWatch (moto's server) and sign-checking CloudMonitor / Cloud Monitor loopback fakes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from botgateway.config import CloudAccount, CloudProviderConfig
from botgateway.grant import Grant, Scope
from botgateway.tooling import Tool, ToolContext, ToolError
from tests.fakes.clouds import start_moto
from tests.fakes.monitoring import FakeCloudMonitor, FakeTencentMonitor, Points
from tests.tools.test_estate_core import ListedSource
from tools.estate.fanout import Estate
from tools.estate.resource import Resource
from tools.metrics import METRIC_QUERY_KIND
from tools.metrics.cloud import MetricSource
from tools.metrics.cloudmonitor import CloudMonitorSource
from tools.metrics.cloudwatch import CloudWatchSource
from tools.metrics.resource_tools import build_resource_metric_tools
from tools.metrics.tencent_monitor import TencentMonitorSource

CTX = ToolContext(user_id="U1", platform="cli")
KEY, SECRET = "AKIDmonitortest", "monitor-secret-do-not-print"
AWS_REGION, ALI_REGION, TC_REGION = "us-east-1", "cn-hangzhou", "ap-guangzhou"
WEB = Resource(kind="server", provider="aws", account="prod", region=AWS_REGION, id="i-0abc1234", name="web-aws-01",
               state="running", private_ips=("10.0.1.5",))
DB = Resource(kind="database", provider="aliyun", account="prod", region=ALI_REGION, id="rm-bp1abc",
              name="prod-db-01", state="running", private_ips=("10.1.0.7",), tags={"env": "prod"})
HIDDEN = Resource(kind="server", provider="aliyun", account="prod", region=ALI_REGION, id="i-bp1hidden",
                  name="vault-01", state="running", private_ips=("10.1.0.9",), tags={"env": "prod"})
CVM = Resource(kind="server", provider="tencent", account="prod", region=TC_REGION, id="ins-abc123", name="cvm-web",
               state="running", private_ips=("10.2.0.9",), tags={"env": "staging"})
STEP_AT = 20
"""The Tencent series steps from 20 to 80 at this sample."""


def _times() -> list[float]:
    """50 minute-aligned samples, all well inside a 1h window read now."""
    end = (int(time.time()) // 60) * 60 - 120
    return [float(end - 60 * i) for i in range(49, -1, -1)]


def _wobble(i: int) -> float:
    return ((i * 37) % 11 - 5) / 10


@dataclass
class Clouds:
    tool: Tool
    aws: list[float]
    aliyun: list[float]
    tencent: list[float]
    cms: FakeCloudMonitor
    monitor: FakeTencentMonitor


def _account(endpoint: str, secret: str = SECRET, region: str = AWS_REGION) -> CloudProviderConfig:
    account = CloudAccount(
        name="prod", access_key_id=KEY, access_key_secret=secret, regions=[region], endpoint=endpoint
    )
    return CloudProviderConfig(enabled=True, accounts=[account], timeout_s=20)


def _seed_cloudwatch(endpoint: str, times: list[float], values: list[float]) -> None:
    client = boto3.client("cloudwatch", region_name=AWS_REGION, endpoint_url=endpoint,
                          aws_access_key_id=KEY, aws_secret_access_key=SECRET)
    data = [
        {"MetricName": "CPUUtilization", "Dimensions": [{"Name": "InstanceId", "Value": WEB.id}],
         "Timestamp": datetime.fromtimestamp(t, UTC), "Value": v, "Unit": "Percent"}
        for t, v in zip(times, values, strict=True)
    ]
    for i in range(0, len(data), 20):
        client.put_metric_data(Namespace="AWS/EC2", MetricData=data[i : i + 20])


@pytest.fixture
def moto() -> Iterator[str]:
    server = start_moto()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def fakes() -> Iterator[tuple[FakeCloudMonitor, FakeTencentMonitor, dict[str, list[float]]]]:
    times = _times()
    seeded = {
        "aliyun": [10 + 0.5 * i + _wobble(i) for i in range(len(times))],
        "tencent": [(80.0 if i >= STEP_AT else 20.0) + _wobble(i) for i in range(len(times))],
    }
    cms_points: Points = {("acs_rds_dashboard", "CpuUsage", DB.id): list(zip(times, seeded["aliyun"], strict=True)),
                          ("acs_ecs_dashboard", "CPUUtilization", HIDDEN.id): [(t, 99.0) for t in times]}
    tc_points: Points = {("QCE/CVM", "CPUUsage", CVM.id): list(zip(times, seeded["tencent"], strict=True))}
    with FakeCloudMonitor(cms_points, access_key=KEY, secret=SECRET) as cms, \
            FakeTencentMonitor(tc_points, access_key=KEY, secret=SECRET) as monitor:
        yield cms, monitor, seeded


def _estate() -> Estate:
    return Estate([
        ListedSource("aws", {("prod", AWS_REGION, "server"): [WEB]}),
        ListedSource("aliyun", {("prod", ALI_REGION, "database"): [DB], ("prod", ALI_REGION, "server"): [HIDDEN]}),
        ListedSource("tencent", {("prod", TC_REGION, "server"): [CVM]}),
    ])


@pytest.fixture
async def clouds(moto: str, fakes: Any) -> AsyncIterator[Clouds]:
    cms, monitor, seeded = fakes
    times = _times()
    aws_values = [20 + _wobble(i) for i in range(len(times))]
    _seed_cloudwatch(moto, times, aws_values)
    sources: dict[str, MetricSource] = {
        "aws": CloudWatchSource(_account(moto)),
        "aliyun": CloudMonitorSource(_account(cms.endpoint, region=ALI_REGION)),
        "tencent": TencentMonitorSource(_account(monitor.endpoint, region=TC_REGION)),
    }
    (tool,) = build_resource_metric_tools(_estate(), sources, timeout_s=60)
    yield Clouds(tool, aws_values, seeded["aliyun"], seeded["tencent"], cms, monitor)
    for source in sources.values():
        await source.aclose()  # type: ignore[attr-defined]


def _only(data: dict[str, Any]) -> dict[str, Any]:
    assert data["kind"] == METRIC_QUERY_KIND and len(data["summaries"]) == 1, data
    summary: dict[str, Any] = data["summaries"][0]
    return summary


def _matches(summary: dict[str, Any], seeded: list[float]) -> None:
    assert summary["count"] == len(seeded)
    assert summary["min"] == pytest.approx(min(seeded), abs=0.01)
    assert summary["max"] == pytest.approx(max(seeded), abs=0.01)
    assert summary["last"] == pytest.approx(seeded[-1], abs=0.01)


async def test_each_cloud_summaries_match_what_was_seeded(clouds: Clouds) -> None:
    aws = await clouds.tool.invoke({"resource": "web-aws-01", "window": "1h", "metrics": ["cpu"]}, CTX)
    summary = _only(aws.data)
    _matches(summary, clouds.aws)
    assert summary["trend"] == "flat" and summary["unit"] == "%"
    assert [(s.provider, s.api) for s in aws.sources] == [("aws", "cloudwatch:GetMetricData")]

    ali = await clouds.tool.invoke({"resource": "10.1.0.7", "metrics": ["cpu"]}, CTX)  # by IP
    summary = _only(ali.data)
    _matches(summary, clouds.aliyun)
    assert summary["trend"] == "rising"
    assert [(s.provider, s.api) for s in ali.sources] == [("aliyun", "cms:DescribeMetricList")]
    assert clouds.cms.requests[-1]["params"]["Dimensions"] == '[{"instanceId": "rm-bp1abc"}]'

    tc = await clouds.tool.invoke({"resource": "ins-abc123", "metrics": ["cpu"]}, CTX)  # by cloud id
    summary = _only(tc.data)
    _matches(summary, clouds.tencent)
    steps = [c for c in summary["changes"] if c["kind"] == "step"]
    assert len(steps) == 1 and steps[0]["after"] == pytest.approx(80, abs=1)
    assert [(s.provider, s.api) for s in tc.sources] == [("tencent", "monitor:GetMonitorData")]
    # Numbers for the model, points only in the data for a chart.
    assert "prod-db-01" in ali.content and "rm-bp1abc" in ali.content
    assert str(round(clouds.aliyun[5], 4)) not in ali.content
    assert len(ali.data["series"][0]["points"]) == len(clouds.aliyun)


async def test_every_standard_metric_of_the_kind_is_read(clouds: Clouds) -> None:
    out = await clouds.tool.invoke({"resource": "prod-db-01"}, CTX)
    names = sorted(s["name"].split("{", 1)[0] for s in out.data["summaries"])
    assert names == ["connections", "cpu"]
    asked = sorted(r["params"]["MetricName"] for r in clouds.cms.requests)
    assert asked == ["ConnectionUsage", "CpuUsage"]


async def test_a_resource_outside_the_scopes_is_not_found_and_not_asked(clouds: Clouds) -> None:
    grant = Grant(roles=("viewer",), tools=frozenset({"resource_metrics"}), scopes=(Scope(tags={"env": "!prod"}),))
    ctx = ToolContext(user_id="U2", platform="cli", grant=grant)
    with pytest.raises(ToolError, match="nothing found that you may see"):
        await clouds.tool.invoke({"resource": "vault-01"}, ctx)
    with pytest.raises(ToolError, match="nothing found that you may see"):
        await clouds.tool.invoke({"resource": "10.1.0.9"}, ctx)
    assert clouds.cms.requests == []
    # The same asker still reads what the scope shows.
    out = await clouds.tool.invoke({"resource": "cvm-web", "metrics": ["cpu"]}, ctx)
    assert _only(out.data)["count"] == len(clouds.tencent)


async def test_a_failing_cloud_is_named_without_its_key(fakes: Any) -> None:
    _, monitor, _ = fakes
    source = TencentMonitorSource(_account(monitor.endpoint, secret="wrong-secret-do-not-print", region=TC_REGION))
    (tool,) = build_resource_metric_tools(_estate(), {"tencent": source}, timeout_s=60)
    try:
        with pytest.raises(ToolError) as caught:
            await tool.invoke({"resource": "cvm-web", "metrics": ["cpu"]}, CTX)
    finally:
        await source.aclose()
    message = str(caught.value)
    assert "Tencent Cloud" in message and "monitor:GetMonitorData" in message and "credentials" in message, message
    assert monitor.requests, "the request reached the fake"
    for secret in ("wrong-secret", SECRET, KEY):
        assert secret not in message


async def test_an_unknown_metric_names_the_ones_there_are(clouds: Clouds) -> None:
    with pytest.raises(ToolError, match="it has cpu, connections"):
        await clouds.tool.invoke({"resource": "prod-db-01", "metrics": ["memory"]}, CTX)
