"""Build the number tools from config: ``query_metrics`` (Prometheus), ``resource_metrics`` (the clouds' monitoring;
Prometheus for on-prem hosts and Kubernetes nodes) and ``cost`` (the clouds' billing), with what must be closed with
them.

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
from tools.charts.artifacts import ChartMaker
from tools.cost import build_cost_tools, cost_sources
from tools.demo import recorded_metrics
from tools.demo.recorded_metrics import RecordedSeries, sample_recording
from tools.estate.fanout import Estate
from tools.metrics import PrometheusSource, build_metric_tools
from tools.metrics.alert_graphs import PrometheusAlertGrapher
from tools.metrics.cloud import MetricSource
from tools.metrics.prometheus_hosts import PrometheusHostSource
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
    charts: ChartMaker | None = None
    """What draws the tools' charts; None when charts are off or nothing draws."""
    timezone: str = "UTC"
    """The charts' time zone."""

    def alert_grapher(self) -> PrometheusAlertGrapher | None:
        """What draws alert cards' graphs: the configured Prometheus and the charts; None without either."""
        if self.prometheus is None or self.charts is None:
            return None
        return PrometheusAlertGrapher(self.prometheus, self.charts, tz=self.timezone)

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
    metrics_on, cost_on = "metrics" in config.toolsets, "cost" in config.toolsets
    # The sample estate without a Prometheus answers its hosts' metrics from its recorded hour.
    recorded = sample_recording(config.inventory) if metrics_on and not prometheus.enabled else None
    clouds = config.aws.enabled or config.aliyun.enabled or config.tencent.enabled
    drawn = prometheus.enabled or recorded is not None or (clouds and (metrics_on or cost_on))
    charts = _charts(config, out) if drawn else None
    tz = config.charts.timezone
    if prometheus.enabled:  # also for alert cards' graphs, whether or not the model gets the metric tools
        headers = {key: value.get_secret_value() for key, value in prometheus.headers.items()}
        out.prometheus = PrometheusSource(prometheus.url, timeout_s=prometheus.timeout_s, headers=headers)
        if metrics_on:
            out.tools += build_metric_tools(out.prometheus, timeout_s=max(default_timeout_s, prometheus.timeout_s + 5),
                                            charts=charts, tz=tz)
    monitoring = _monitoring(config, budget) if metrics_on else {}
    out.closables += monitoring.values()
    if metrics_on:
        monitoring.update(_host_metrics(config, out.prometheus, recorded, covered=set(monitoring)))
    if monitoring:
        slowest = max(_timeout(s) for s in monitoring.values())
        out.tools += build_resource_metric_tools(
            estate, monitoring, timeout_s=max(default_timeout_s, estate_timeout_s + slowest + 5), charts=charts, tz=tz
        )
    billing = cost_sources(config, budget=budget) if cost_on else []
    out.closables += billing
    if billing:
        try:
            await asyncio.gather(*(source.start() for source in billing))
        except BaseException:
            await out.aclose()
            raise
        slowest = max(s.config.timeout_s for s in billing)
        out.tools += build_cost_tools(billing, timeout_s=max(default_timeout_s, slowest + 5), charts=charts)
    return out


def _charts(config: ToolsConfig, out: NumberTools) -> ChartMaker | None:
    """The chart maker the number tools share (closed with them), or None when charts are off."""
    if not config.charts.enabled:
        return None
    from tools.charts.render import ChartRenderer  # matplotlib, loaded only when charts are drawn

    maker = ChartMaker(ChartRenderer(config.charts.max_concurrent))
    out.closables.append(maker)
    out.charts, out.timezone = maker, config.charts.timezone
    return maker


def _host_metrics(config: ToolsConfig, prometheus: PrometheusSource | None, recorded: RecordedSeries | None, *,
                  covered: set[str]) -> dict[str, MetricSource]:
    """Host metrics for the providers no cloud monitoring covers (the static inventory, Kubernetes nodes): from
    Prometheus, else from the sample estate's recording."""
    if prometheus is not None:
        source = PrometheusHostSource(prometheus, timeout_s=config.prometheus.timeout_s)
        providers = [key for key in ("inventory", "kubernetes") if getattr(config, key).enabled]
    elif recorded is not None:
        source = PrometheusHostSource(recorded, label=recorded_metrics.LABEL, metric_api=recorded_metrics.API)
        providers = ["inventory"]
    else:
        return {}
    return {key: source for key in providers if key not in covered}


def _timeout(source: Any) -> float:
    return float(getattr(source, "timeout_s", 10.0))

