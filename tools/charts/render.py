"""Turn a :class:`ChartSpec` into PNG bytes with matplotlib's Agg backend, and do it off the event loop.

Each chart builds its own :class:`matplotlib.figure.Figure` on its own Agg
canvas and never touches pyplot or rcParams, so renders can run in parallel
threads. :class:`ChartRenderer` is how async code asks for a chart: a small,
dedicated thread pool bounds how many charts draw at once (they are CPU-bound and
hold the GIL for much of the work).
"""

from __future__ import annotations

import asyncio
import io
import zoneinfo
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from matplotlib import dates as mdates
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory
from PIL import Image

from tools.charts.fonts import ChartFonts, chart_fonts
from tools.charts.spec import ChartSpec

__all__ = ["DARK", "LIGHT", "ChartRenderer", "Palette", "build_figure", "palette_for", "render_png"]

_DPI = 100


@dataclass(frozen=True)
class Palette:
    """The colors of one theme. The series colors leave out red, which belongs to the threshold."""

    background: str
    text: str
    muted: str
    grid: str
    threshold: str
    series: tuple[str, ...]


LIGHT = Palette(
    background="#ffffff",
    text="#1f2328",
    muted="#59636e",
    grid="#d8dee4",
    threshold="#d1242f",
    series=("#1f6feb", "#e16f24", "#1a7f37", "#8250df", "#0598bc", "#bf3989", "#7d4e00", "#4d2d8f", "#6e7781",
            "#116329"),
)
DARK = Palette(
    background="#1a1d21",
    text="#e6edf3",
    muted="#9198a1",
    grid="#30363d",
    threshold="#ff6b6b",
    series=("#58a6ff", "#f0883e", "#3fb950", "#bc8cff", "#39c5cf", "#f778ba", "#d29922", "#a5d6ff", "#8b949e",
            "#7ee787"),
)


def palette_for(spec: ChartSpec) -> Palette:
    """The palette the spec's theme draws with."""
    return DARK if spec.theme == "dark" else LIGHT


_SCALES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k"))


def _compact(value: float) -> str:
    """A value label short enough to read: 12.3k, 3.2M; small numbers keep their decimals."""
    for limit, suffix in _SCALES:
        if abs(value) >= limit:
            divisor = 1e3 if suffix == "k" else limit
            return f"{value / divisor:.3g}{suffix}"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _axis_formatter(high: float) -> ticker.Formatter:
    """One scale for every tick of an axis (0, 5k, 10k rather than 8,000 beside 10k), chosen by its largest value."""
    divisor, suffix = next(((1e3 if s == "k" else limit, s) for limit, s in _SCALES if abs(high) >= limit), (1.0, ""))
    return ticker.FuncFormatter(lambda v, _pos: f"{v / divisor:,.4g}{suffix}")


def _style_axes(ax: Axes, palette: Palette, fonts: ChartFonts) -> None:
    ax.set_facecolor(palette.background)
    for side, spine in ax.spines.items():
        spine.set_visible(side in ("left", "bottom"))
        spine.set_color(palette.grid)
    ax.tick_params(colors=palette.muted, labelcolor=palette.text, labelsize=9, labelfontfamily=list(fonts.families))
    ax.grid(True, color=palette.grid, linewidth=0.8)
    ax.set_axisbelow(True)


def _axis_label(ax: Axes, text: str, axis: str, palette: Palette, fonts: ChartFonts) -> None:
    setter = ax.set_xlabel if axis == "x" else ax.set_ylabel
    setter(text, color=palette.muted, fontsize=9, family=list(fonts.families))


def _zone_name(spec: ChartSpec) -> str:
    """The zone as the axis names it: "Asia/Shanghai, UTC+08:00" at the time of the chart's last point."""
    zone = zoneinfo.ZoneInfo(spec.tz)
    last = max(series.points[-1][0] for series in spec.series)
    offset = datetime.fromtimestamp(last, tz=zone).strftime("%z")
    return f"{spec.tz}, UTC{offset[:3]}:{offset[3:]}"


def _draw_lines(ax: Axes, spec: ChartSpec, palette: Palette, fonts: ChartFonts) -> None:
    zone = zoneinfo.ZoneInfo(spec.tz)
    for index, series in enumerate(spec.series):
        times = np.array([t for t, _ in series.points]) * 1e6
        x = mdates.date2num(times.astype("datetime64[us]"))
        y = np.array([v for _, v in series.points])
        color = palette.series[index % len(palette.series)]
        ax.plot(x, y, color=color, linewidth=1.6, label=series.label, marker="o" if len(x) == 1 else None)
        if len(spec.series) == 1:
            ax.fill_between(x, y, color=color, alpha=0.12, linewidth=0)
    locator = mdates.AutoDateLocator(tz=zone, minticks=4, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=zone, show_offset=False))
    _axis_label(ax, f"Time ({_zone_name(spec)})", "x", palette, fonts)
    _axis_label(ax, spec.unit, "y", palette, fonts)
    low = min(v for s in spec.series for _, v in s.points)
    high = max(v for s in spec.series for _, v in s.points)
    if spec.threshold is not None:
        high = max(high, spec.threshold.value)
        low = min(low, spec.threshold.value)
    # Values that are all positive read honestly from zero, unless they sit in a narrow band far above it.
    bottom = 0.0 if 0 <= low <= 0.5 * high else low
    span = (high - bottom) or abs(high) or 1.0
    ax.set_ylim(bottom - (0 if bottom == 0 else 0.08 * span), high + 0.12 * span)
    ax.yaxis.set_major_formatter(_axis_formatter(max(abs(bottom), abs(high))))


def _draw_bars(ax: Axes, spec: ChartSpec, palette: Palette, fonts: ChartFonts) -> None:
    bars = sorted(spec.bars, key=lambda b: b.value, reverse=True)
    labels = [b.label for b in bars]
    values = [b.value for b in bars]
    # Horizontal bars keep long (and CJK) names readable; the largest sits on top.
    container = ax.barh(range(len(bars)), values, color=palette.series[0], height=0.65)
    ax.set_yticks(range(len(bars)), labels)
    ax.invert_yaxis()
    ax.grid(False, axis="y")
    ax.bar_label(container, labels=[_compact(v) for v in values], padding=4, color=palette.text, fontsize=9,
                 family=list(fonts.families))
    high = max([*values, 0.0] + ([spec.threshold.value] if spec.threshold else []))
    low = min([*values, 0.0])
    ax.set_xlim(low * 1.15, high * 1.15 or 1.0)
    ax.xaxis.set_major_formatter(_axis_formatter(max(abs(low), abs(high))))
    _axis_label(ax, spec.unit, "x", palette, fonts)


def _draw_threshold(ax: Axes, spec: ChartSpec, palette: Palette, fonts: ChartFonts) -> None:
    if spec.threshold is None:
        return
    value, label = spec.threshold.value, spec.threshold.label or _compact(spec.threshold.value)
    dashes, color, family = (0, (6, 4)), palette.threshold, list(fonts.families)
    if spec.kind == "line":
        ax.axhline(value, color=color, linestyle=dashes, linewidth=1.6, zorder=3)
        where = blended_transform_factory(ax.transAxes, ax.transData)
        ax.text(0.995, value, f" {label}", transform=where, ha="right", va="bottom", color=color, fontsize=9,
                family=family)
    else:
        ax.axvline(value, color=color, linestyle=dashes, linewidth=1.6, zorder=3)
        where = blended_transform_factory(ax.transData, ax.transAxes)
        ax.text(value, 1.0, f" {label}", transform=where, ha="left", va="bottom", color=color, fontsize=9,
                family=family)


def _draw_legend(fig: Figure, ax: Axes, spec: ChartSpec, palette: Palette, fonts: ChartFonts) -> None:
    if spec.kind == "bar":
        if spec.note:
            fig.text(0.99, 0.01, spec.note, ha="right", va="bottom", color=palette.muted, fontsize=8,
                     family=list(fonts.families))
        return
    if len(spec.series) < 2 and not spec.note:
        return
    handles, labels = ax.get_legend_handles_labels()
    legend = fig.legend(handles, labels, loc="lower center", ncols=min(len(handles), 5), frameon=False,
                        fontsize=8, labelcolor=palette.text, prop={"family": list(fonts.families), "size": 8},
                        title=spec.note or None)
    legend.get_title().set_color(palette.muted)
    legend.get_title().set_fontfamily(list(fonts.families))


def build_figure(spec: ChartSpec, fonts: ChartFonts | None = None) -> Figure:
    """The chart as a figure on its own Agg canvas, drawn once (so its transforms are final) but not encoded."""
    fonts = fonts or chart_fonts()
    palette = palette_for(spec)
    # No layout engine: constrained layout measures every text twice and cost most of a chart's time; one
    # measurement, then the axes placed inside the margins it found (_fit), does the same for a chart this simple.
    fig = Figure(figsize=(spec.width / _DPI, spec.height / _DPI), dpi=_DPI, facecolor=palette.background)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    _style_axes(ax, palette, fonts)
    if spec.kind == "line":
        _draw_lines(ax, spec, palette, fonts)
    else:
        _draw_bars(ax, spec, palette, fonts)
    _draw_threshold(ax, spec, palette, fonts)
    _draw_legend(fig, ax, spec, palette, fonts)
    ax.set_title(spec.title, loc="left", color=palette.text, fontsize=13, fontweight="bold", pad=10,
                 family=list(fonts.families))
    _fit(fig, ax)
    fig.canvas.draw()
    return fig


_PAD_PX = 8


def _fit(fig: Figure, ax: Axes) -> None:
    """Place the axes so its title, labels and tick labels, and the legend below, fit the figure with a small pad."""
    canvas = fig.canvas
    assert isinstance(canvas, FigureCanvasAgg)
    renderer = canvas.get_renderer()
    width, height = canvas.get_width_height()
    inner = ax.get_window_extent(renderer)
    outer = ax.get_tightbbox(renderer)
    if outer is None:
        return
    below = sum(legend.get_window_extent(renderer).height + _PAD_PX for legend in fig.legends)
    below += sum(text.get_window_extent(renderer).height + _PAD_PX for text in fig.texts)
    left = (inner.x0 - outer.x0 + _PAD_PX) / width
    right = 1 - (outer.x1 - inner.x1 + _PAD_PX) / width
    bottom = (inner.y0 - outer.y0 + below + _PAD_PX) / height
    top = 1 - (outer.y1 - inner.y1 + _PAD_PX) / height
    if right - left > 0.2 and top - bottom > 0.2:  # an absurd label never squeezes the plot away
        ax.set_position((left, bottom, right - left, top - bottom))
    for legend in fig.legends:
        legend.set_bbox_to_anchor((0.5, _PAD_PX / height), transform=fig.transFigure)


def render_png(spec: ChartSpec, fonts: ChartFonts | None = None) -> bytes:
    """The chart as PNG bytes of exactly `spec.width` × `spec.height` pixels. Thread-safe; no global state."""
    fig = build_figure(spec, fonts)
    canvas = fig.canvas
    assert isinstance(canvas, FigureCanvasAgg)
    # Encode the pixels already drawn: savefig would lay out and draw the whole figure a second time.
    image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    out = io.BytesIO()
    image.convert("RGB").save(out, format="png", optimize=False, compress_level=1)  # fast; a chart is flat colour
    return out.getvalue()


class ChartRenderer:
    """Renders charts for async callers on a bounded pool of threads, so the event loop never draws."""

    def __init__(self, max_concurrent: int = 2, render: Callable[[ChartSpec], bytes] = render_png) -> None:
        """`render` is the drawing function (tests pass an instrumented one); at most `max_concurrent` run at once."""
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        self.max_concurrent = max_concurrent
        self._render = render
        self._pool = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="chart-render")
        self._closed = False
        if render is render_png:
            chart_fonts()  # the one-time font lookup happens here, before worker threads race for it

    async def render(self, spec: ChartSpec) -> bytes:
        """The chart's PNG bytes, drawn on the pool; raises ChartError for bad input, RuntimeError once closed."""
        if self._closed:
            raise RuntimeError("chart renderer is closed")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._render, spec)

    async def aclose(self) -> None:
        """Refuse new charts and wait, off the loop, for the ones drawing to finish."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)
