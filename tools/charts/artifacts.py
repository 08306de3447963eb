"""From series and breakdowns to the card's pictures: a chart drawn off the loop, with its sparkline and its words.

Tools hand over what they found; :class:`ChartMaker` draws it (light, and dark
too for a front door that has a dark theme) on its bounded renderer and wraps
the PNG in an :class:`~botgateway.artifacts.Artifact` whose reference the tool
gives the model.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from botgateway.artifacts import Artifact, new_ref
from tools.charts.spec import ChartSpec

if TYPE_CHECKING:  # the renderer (matplotlib) is the composition's to import, when charts are on
    from tools.charts.render import ChartRenderer

__all__ = ["DARK_PLATFORMS", "ChartMaker", "sparkline"]

DARK_PLATFORMS = frozenset({"web", "api"})
"""Front doors with a dark theme (the console, whether its session came from a login or an API key): their charts
are drawn in both themes."""

_BLOCKS = "▁▂▃▄▅▆▇█"
_SPARK_WIDTH = 24


def sparkline(values: Sequence[float], width: int = _SPARK_WIDTH) -> str:
    """The shape of ``values`` in ``width`` block characters (each the mean of its slice); "" without values."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    if len(finite) > width:
        size = len(finite) / width
        finite = [sum(chunk) / len(chunk) for i in range(width)
                  if (chunk := finite[int(i * size): max(int((i + 1) * size), int(i * size) + 1)])]
    low, high = min(finite), max(finite)
    if high == low:
        return _BLOCKS[len(_BLOCKS) // 2] * len(finite)
    scale = (len(_BLOCKS) - 1) / (high - low)
    return "".join(_BLOCKS[round((v - low) * scale)] for v in finite)


def _file_name(title: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:60]
    return f"{slug or 'chart'}.png"


class ChartMaker:
    """Draws a tool's charts on a shared :class:`ChartRenderer` and makes them artifacts."""

    def __init__(self, renderer: ChartRenderer) -> None:
        self._renderer = renderer

    async def artifact(self, spec: ChartSpec, *, alt: str, platform: str = "") -> Artifact:
        """``spec`` drawn (also in the dark theme on a front door that has one), with ``alt`` as its words.

        Raises :class:`~tools.charts.spec.ChartError` when the input cannot make a chart.
        """
        light = replace(spec, theme="light") if spec.theme != "light" else spec
        if platform in DARK_PLATFORMS:
            png, dark = await asyncio.gather(self._renderer.render(light), self._renderer.render(replace(spec, theme="dark")))
        else:
            png, dark = await self._renderer.render(light), b""
        spark = sparkline([v for _, v in spec.series[0].points]) if spec.kind == "line" and spec.series else ""
        return Artifact(ref=new_ref(), title=spec.title, png=png, width=spec.width, height=spec.height, alt=alt,
                        sparkline=spark, dark_png=dark, filename=_file_name(spec.title))

    async def aclose(self) -> None:
        """Stop the renderer (waits for charts being drawn)."""
        await self._renderer.aclose()
