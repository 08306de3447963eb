"""Charts drawn on the server: describe one with a ChartSpec, get PNG bytes from render_png or a ChartRenderer."""

from tools.charts.fonts import ChartFonts, chart_fonts, cjk_available
from tools.charts.render import ChartRenderer, render_png
from tools.charts.spec import Bar, ChartError, ChartSpec, LineSeries, Threshold

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
