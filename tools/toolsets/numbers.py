"""Build the number tools from config: ``query_metrics`` (Prometheus), ``resource_metrics`` (the clouds' monitoring)
and ``cost`` (the clouds' billing), with what must be closed with them.

Cloud SDKs are imported on demand, as the estate's sources are.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from botgateway.budget import RateBudget
from botgateway.config import ToolsConfig
from botgateway.tooling import Tool
from tools.cost import build_cost_tools, cost_sources
from tools.estate.fanout import Estate
from tools.metrics import PrometheusSource, build_metric_tools
from tools.metrics.cloud import MetricSource
from tools.metrics.resource_tools import build_resource_metric_tools

__all__ = ["NumberTools", "build_number_tools"]

log = structlog.get_logger(__name__)


@dataclass
class NumberTools:
    """The number tools of one toolset, and the clients behind them."""

    tools: list[Tool] = field(default_factory=list)
    """Every tool to offer."""
    prometheus: PrometheusSource | None = None
    """The Prometheus source, when configured."""
    closables: list[Any] = field(default_factory=list)
    """Cloud monitoring and billing sources (each has ``aclose``)."""

    async def aclose(self) -> None:
        """Close every client; one failing does not stop the others."""
        if self.prometheus is not None:
            await self.prometheus.close()
        for source in self.closables:
            try:
                await source.aclose()
            except Exception:  # closing must finish for every source
                log.exception("number_source_close_failed", provider=getattr(source, "name", "?"))


def _monitoring(config: ToolsConfig, budget: RateBudget) -> dict[str, MetricSource]:
    found: dict[str, MetricSource] = {}
    if config.aws.enabled:
        from tools.metrics.cloudwatch import CloudWatchSource

        found["aws"] = CloudWatchSource(config.aws, budget=budget)
    if config.aliyun.enabled:
        from tools.metrics.cloudmonitor import CloudMonitorSource

        found["aliyun"] = CloudMonitorSource(config.aliyun, budget=budget)
    if config.tencent.enabled:
        from tools.metrics.tencent_monitor import TencentMonitorSource

        found["tencent"] = TencentMonitorSource(config.tencent, budget=budget)
    return found


async def build_number_tools(config: ToolsConfig, estate: Estate, *, budget: RateBudget, default_timeout_s: float,
                             estate_timeout_s: float) -> NumberTools:
    """The metric and cost tools ``config`` enables; close the result with the toolset."""
    out = NumberTools()
    prometheus = config.prometheus
    if prometheus.enabled:
        headers = {key: value.get_secret_value() for key, value in prometheus.headers.items()}
        out.prometheus = PrometheusSource(prometheus.url, timeout_s=prometheus.timeout_s, headers=headers)
        out.tools += build_metric_tools(out.prometheus, timeout_s=max(default_timeout_s, prometheus.timeout_s + 5))
    monitoring = _monitoring(config, budget)
    out.closables += monitoring.values()
    if monitoring:
        slowest = max(_timeout(s) for s in monitoring.values())
        out.tools += build_resource_metric_tools(estate, monitoring, timeout_s=max(default_timeout_s, estate_timeout_s + slowest + 5))
    billing = cost_sources(config, budget=budget)
    out.closables += billing
    if billing:
        try:
            await asyncio.gather(*(source.start() for source in billing))
        except BaseException:
            await out.aclose()
            raise
        slowest = max(s.config.timeout_s for s in billing)
        out.tools += build_cost_tools(billing, timeout_s=max(default_timeout_s, slowest + 5))
    return out


def _timeout(source: Any) -> float:
    return float(getattr(source, "timeout_s", 10.0))

