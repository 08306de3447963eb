"""The metrics and cost toolsets: offered only when enabled, served by what is configured, and checked."""

from __future__ import annotations

from botgateway.config import PrometheusConfig
from tests.estate_fixtures import estate_toolset, sample_estate_config
from tests.ports import closed_port
from tools.toolsets.readiness import number_providers


async def test_the_number_tools_come_with_their_toolsets_only() -> None:
    async with estate_toolset(sample_estate_config()) as every:
        assert {"resource_metrics"} <= {t.name for t in every.tools}
    async with estate_toolset(sample_estate_config(toolsets=["servers", "cost"])) as without:
        names = {t.name for t in without.tools}
        assert "resource_metrics" not in names and "query_metrics" not in names and "find_server" in names


def test_who_serves_metrics_and_cost() -> None:
    sample = sample_estate_config()
    assert number_providers(sample, "metrics") == ("inventory",)  # the sample estate's recorded hour
    assert number_providers(sample, "cost") == ()
    prometheus = sample_estate_config(prometheus=PrometheusConfig(enabled=True, url="http://127.0.0.1:9"))
    assert number_providers(prometheus, "metrics") == ("prometheus",)  # a real Prometheus replaces the recording


async def test_a_prometheus_that_does_not_answer_is_a_failed_check_with_its_fix() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    config = sample_estate_config(prometheus=PrometheusConfig(enabled=True, url=url, timeout_s=2),
                                  toolsets=["servers", "metrics"])
    async with estate_toolset(config) as toolset:
        statuses = {s.name: s for s in await toolset.readiness(probe=True)}
    metrics = statuses["metrics"]
    assert metrics.enabled and metrics.providers == ("prometheus",) and not metrics.ready
    [failed] = metrics.failed
    assert failed.what.startswith("Prometheus at 127.0.0.1:") and "tools.prometheus.url" in failed.fix
    assert not statuses["cost"].enabled


async def test_a_cost_toolset_asked_for_by_name_without_a_cloud_says_what_to_enable() -> None:
    config = sample_estate_config(toolsets=["servers", "cost"])
    async with estate_toolset(config) as toolset:
        cost = {s.name: s for s in await toolset.readiness()}["cost"]
    assert cost.enabled and not cost.ready
    assert [c.what for c in cost.failed] == ["a provider for cost"] and "tools.aws" in cost.failed[0].fix
