"""A tool that answers with figures and a real chart, for the front doors' end-to-end tests of pictures.

``chart_probe`` is what a metric tool gives a turn: a line of figures for the
model and an :class:`~botgateway.artifacts.Artifact` drawn by the real renderer
(light and, on the console, dark). Tests register it on a toolset, script the
model to call it, and check what each front door does with the picture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from botgateway.tooling import Tool, ToolContext, ToolOutput, tool
from tools.charts.artifacts import ChartMaker
from tools.charts.attach import with_charts
from tools.charts.render import ChartRenderer
from tools.charts.spec import ChartSpec, LineSeries, Threshold

__all__ = ["CHART_FIGURES", "CHART_TITLE", "chart_maker", "chart_probe_tool", "probe_spec"]

CHART_TITLE = "prod-db-01 cpu · last 1h"
"""The probe chart's title."""
CHART_FIGURES = "cpu{resource=\"prod-db-01\"}: last 62.0 %, min 31.0, max 88.0, mean 55.2, p95 71.0, rising"
"""The figures the probe gives the model (and so the answer quotes)."""


def probe_spec() -> ChartSpec:
    """An hour of a rising CPU series with a spike, and an 80 % threshold."""
    start = 1_700_000_000.0
    points = tuple((start + i * 60, 30.0 + i * 0.5 + (26.0 if i == 40 else 0.0)) for i in range(60))
    return ChartSpec(kind="line", title=CHART_TITLE, unit="%", threshold=Threshold(80.0, "alert"),
                     series=(LineSeries("cpu prod-db-01", points),))


@asynccontextmanager
async def chart_maker() -> AsyncIterator[ChartMaker]:
    """A chart maker on its own renderer, closed on exit."""
    maker = ChartMaker(ChartRenderer(2))
    try:
        yield maker
    finally:
        await maker.aclose()


def chart_probe_tool(maker: ChartMaker) -> Tool:
    """``chart_probe()``: the figures of prod-db-01's CPU, with the chart drawn by ``maker``."""

    async def chart_probe(*, ctx: ToolContext) -> ToolOutput:
        """Figures of prod-db-01's CPU over the last hour, with a chart."""
        output = ToolOutput(content=CHART_FIGURES, summary="1 series over 1h")
        return await with_charts(output, maker, [(probe_spec(), CHART_FIGURES)], ctx)

    return tool(chart_probe, read_only=True)
