"""Charts drawn on the server: describe one with a ChartSpec, get PNG bytes from render_png or a ChartRenderer.

The drawing side (matplotlib) is imported on first use, so a gateway whose tools draw nothing never loads it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tools.charts.spec import Bar, ChartError, ChartSpec, LineSeries, Threshold

if TYPE_CHECKING:
    from tools.charts.fonts import ChartFonts, chart_fonts, cjk_available
    from tools.charts.render import ChartRenderer, render_png

__all__ = [
    "Bar",
    "ChartError",
    "ChartFonts",
    "ChartRenderer",
    "ChartSpec",
    "LineSeries",
    "Threshold",
    "chart_fonts",
    "cjk_available",
    "render_png",
]

_LAZY = {"ChartFonts": "fonts", "chart_fonts": "fonts", "cjk_available": "fonts", "ChartRenderer": "render",
         "render_png": "render"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"tools.charts.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
