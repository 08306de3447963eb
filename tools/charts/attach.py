"""Give a tool's output its chart: draw it, name it to the model, and never fail the call over a picture.

The model reads a line naming the chart's reference, not the picture; the
card gets the :class:`~botgateway.artifacts.Artifact`. A chart that cannot be
drawn (bad data, the renderer closed or failing) leaves the output as it was,
with a line saying there is no chart, so the answer goes on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import structlog

from botgateway.artifacts import Artifact
from botgateway.tooling import ToolContext, ToolOutput
from tools.charts.artifacts import ChartMaker
from tools.charts.spec import ChartError, ChartSpec

__all__ = ["with_charts"]

log = structlog.get_logger(__name__)


async def with_charts(output: ToolOutput, maker: ChartMaker | None, specs: Sequence[tuple[ChartSpec, str]],
                      ctx: ToolContext) -> ToolOutput:
    """``output`` with a chart per ``(spec, alt)`` drawn for the card, and a line per chart for the model.

    Without a ``maker`` (charts off) or specs, ``output`` is returned as it is.
    """
    if maker is None or not specs:
        return output
    drawn: list[Artifact] = []
    notes: list[str] = []
    for spec, alt in specs:
        try:
            artifact = await maker.artifact(spec, alt=alt, platform=ctx.platform)
        except ChartError as exc:
            notes.append(f"No chart: {exc}.")
            continue
        except Exception as exc:  # a picture must never fail the call; the numbers stand on their own
            log.warning("chart.draw_failed", title=spec.title, error=type(exc).__name__)
            notes.append("No chart: it could not be drawn.")
            continue
        drawn.append(artifact)
        notes.append(f"Chart {artifact.ref} (\"{artifact.title}\") is shown to the user with this answer; refer to "
                     "it as the chart, and quote the figures above rather than describing the picture.")
    content = "\n".join([output.content, *notes])
    return dataclasses.replace(output, content=content, artifacts=(*output.artifacts, *drawn))
