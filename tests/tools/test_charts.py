"""The server-side chart renderer, checked as pixels: size, threshold line, ink in the plot, themes, CJK glyphs."""

from __future__ import annotations

import asyncio
import io
import math
import threading
import warnings

import numpy as np
import pytest
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text
from PIL import Image

from tools.charts import (
    Bar,
    ChartError,
    ChartFonts,
    ChartRenderer,
    ChartSpec,
    LineSeries,
    Threshold,
    chart_fonts,
    cjk_available,
    render_png,
)
from tools.charts.render import DARK, LIGHT, build_figure
from tools.charts.spec import MAX_LABEL_CHARS, MAX_SERIES

NOW = 1_760_000_000  # 2025-10-09 08:53:20 UTC


def _points(scale: float = 1.0, n: int = 240) -> tuple[tuple[float, float], ...]:
    return tuple((NOW - 3600 + i * 15, scale * (40 + 30 * math.sin(i / 20))) for i in range(n))


def _line_spec(**overrides: object) -> ChartSpec:
    fields: dict[str, object] = {
        "kind": "line",
        "title": "prod-db-01 CPU",
        "unit": "%",
        "tz": "Asia/Shanghai",
        "threshold": Threshold(80, "alert at 80%"),
        "series": (LineSeries("prod-db-01", _points()),),
    }
    fields.update(overrides)
    return ChartSpec(**fields)  # type: ignore[arg-type]


def _pixels(png: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG"
    return np.asarray(image.convert("RGB")).astype(int)


def _rgb(color: str) -> np.ndarray:
    return np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])


def _near(pixels: np.ndarray, color: str, tolerance: int = 60) -> np.ndarray:
    return np.abs(pixels - _rgb(color)).sum(axis=-1) <= tolerance


def _axes_box(fig: Figure) -> tuple[Axes, int, int, int, int]:
    """The plot area as image rows and columns (image rows count from the top, display y from the bottom)."""
    ax = fig.axes[0]
    box = ax.get_window_extent()
    height = fig.canvas.get_width_height()[1]
    return ax, int(height - box.y1) + 2, int(height - box.y0) - 2, int(box.x0) + 2, int(box.x1) - 2


def test_png_decodes_at_the_requested_size() -> None:
    for width, height in ((800, 400), (640, 360)):
        pixels = _pixels(render_png(_line_spec(width=width, height=height)))
        assert pixels.shape == (height, width, 3)


def test_threshold_is_a_dashed_line_of_its_color_at_its_value() -> None:
    spec = _line_spec()
    fig = build_figure(spec)
    ax, top, bottom, left, right = _axes_box(fig)
    row = int(fig.canvas.get_width_height()[1] - ax.transData.transform((ax.get_xlim()[0], 80.0))[1])
    pixels = _pixels(render_png(spec))
    on_line = _near(pixels[row - 2 : row + 3, left:right], LIGHT.threshold).any(axis=0)
    width = right - left
    assert on_line.sum() > 0.5 * width, "the threshold line should cross most of the plot"
    assert on_line.sum() < 0.9 * width, "the threshold line should be dashed, with gaps"
    # Nowhere else in the plot is a long run of the threshold color: the line is where the value says.
    elsewhere = _near(pixels[top:bottom, left:right], LIGHT.threshold).sum(axis=1)
    elsewhere[row - top - 3 : row - top + 4] = 0
    assert elsewhere.max() < 0.2 * width


def test_plot_area_has_ink() -> None:
    spec = _line_spec(threshold=None)
    _, top, bottom, left, right = _axes_box(build_figure(spec))
    plot = _pixels(render_png(spec))[top:bottom, left:right]
    series_ink = _near(plot, LIGHT.series[0], tolerance=90).sum()
    assert series_ink > 0.004 * plot.shape[0] * plot.shape[1], "the series line is drawn across the plot"
    assert (~_near(plot, LIGHT.background, tolerance=30)).mean() > 0.05


def _luminance(rgb: np.ndarray) -> float:
    return float((0.2126 * rgb[..., 0] + 0.7152 * rgb[..., 1] + 0.0722 * rgb[..., 2]).mean())


def test_dark_theme_is_dark_and_light_is_light() -> None:
    dark = _pixels(render_png(_line_spec(theme="dark")))
    light = _pixels(render_png(_line_spec(theme="light")))
    assert _luminance(dark) < 60
    assert _luminance(light) > 200
    assert (dark[0, 0] == _rgb(DARK.background)).all()
    fig = build_figure(_line_spec(theme="dark"))
    ax, _top, _bottom, left, right = _axes_box(fig)
    row = int(fig.canvas.get_width_height()[1] - ax.transData.transform((ax.get_xlim()[0], 80.0))[1])
    assert _near(dark[row - 2 : row + 3, left:right], DARK.threshold).any(axis=0).sum() > 0.5 * (right - left)


def test_time_axis_is_in_the_charts_zone_and_names_it() -> None:
    fig = build_figure(_line_spec())
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Time (Asia/Shanghai, UTC+08:00)"
    ticks = [label.get_text() for label in ax.get_xticklabels()]
    # The hour before 08:53 UTC is 15:53-16:53 in Shanghai.
    assert "16:00" in ticks, ticks
    assert ax.get_ylabel() == "%"


CJK_TITLE = "数据库 CPU 使用率"


@pytest.mark.skipif(not cjk_available(), reason="no CJK font on this machine (install Debian's fonts-noto-cjk)")
def test_cjk_title_draws_glyphs_not_boxes() -> None:
    fonts = chart_fonts()
    assert fonts.cjk_family is not None
    path = font_manager.fontManager.findfont(font_manager.FontProperties(family=fonts.cjk_family),
                                             fallback_to_default=False)
    font = FT2Font(path)
    assert all(font.get_char_index(ord(ch)) != 0 for ch in CJK_TITLE if not ch.isascii())

    spec = _line_spec(title=CJK_TITLE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with_cjk = _pixels(render_png(spec, fonts))
        assert not [w for w in caught if "missing from font" in str(w.message)]
        without = _pixels(render_png(spec, ChartFonts.without_cjk()))
        # The test can see the difference: DejaVu alone says it lacks the glyphs and draws boxes instead.
        assert [w for w in caught if "missing from font" in str(w.message)]

    (title_text,) = [t for t in build_figure(spec, fonts).findobj(Text) if t.get_text() == CJK_TITLE]
    title = title_text.get_window_extent()
    height = with_cjk.shape[0]
    rows = slice(int(height - title.y1), int(height - title.y0) + 1)
    cols = slice(int(title.x0), int(title.x1) + 1)
    region = with_cjk[rows, cols]
    assert (~_near(region, LIGHT.background, tolerance=30)).mean() > 0.05, "the title has ink"
    assert np.abs(region - without[rows, cols]).sum(axis=-1).astype(bool).mean() > 0.05


def test_renders_without_a_cjk_font() -> None:
    with pytest.warns(UserWarning, match="missing from font"):
        pixels = _pixels(render_png(_line_spec(title=CJK_TITLE), ChartFonts.without_cjk()))
    assert pixels.shape == (400, 800, 3)


def test_bars_sorted_descending_with_value_labels() -> None:
    bars = (Bar("RDS", 8400), Bar("云服务器 ECS", 12345.6), Bar("SLB", 900), Bar("OSS", 2300))
    spec = ChartSpec(kind="bar", title="上月费用", unit="CNY", bars=bars, threshold=Threshold(10000, "budget"))
    ax = build_figure(spec).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["云服务器 ECS", "RDS", "OSS", "SLB"]
    assert [t.get_text() for t in ax.texts if t.get_text() not in (" budget",)] == ["12.3k", "8,400", "2,300", "900"]
    assert ax.get_xlabel() == "CNY"
    _, top, bottom, left, right = _axes_box(build_figure(spec))
    plot = _pixels(render_png(spec))[top:bottom, left:right]
    assert _near(plot, LIGHT.series[0], tolerance=30).mean() > 0.1
    # The budget is a vertical dashed line: some column holds many threshold-colored pixels with gaps.
    column = _near(plot, LIGHT.threshold).sum(axis=0).max()
    assert 0.5 * plot.shape[0] < column < 0.95 * plot.shape[0]


def test_bad_input_is_refused_with_a_reason() -> None:
    with pytest.raises(ChartError, match="no data"):
        _line_spec(series=())
    with pytest.raises(ChartError, match="NaN/inf"):
        _line_spec(series=(LineSeries("a", ((NOW, math.nan), (NOW + 15, math.inf))),))
    with pytest.raises(ChartError, match="no data"):
        ChartSpec(kind="bar", title="cost", bars=(Bar("a", math.nan),))
    with pytest.raises(ChartError, match="time zone"):
        _line_spec(tz="Mars/Olympus")
    with pytest.raises(ChartError, match="width"):
        _line_spec(width=10)
    with pytest.raises(ChartError, match="not bars"):
        _line_spec(bars=(Bar("a", 1),))
    with pytest.raises(ChartError, match="kind"):
        _line_spec(kind="pie")
    with pytest.raises(ChartError, match="threshold"):
        Threshold(math.nan)


def test_input_is_cleaned_capped_and_noted() -> None:
    noisy = LineSeries("x" * 100, ((NOW + 30, 2.0), (NOW, 1.0), (NOW + 15, math.nan)))
    assert noisy.points == ((NOW, 1.0), (NOW + 30, 2.0))
    assert len(noisy.label) == MAX_LABEL_CHARS and noisy.label.endswith("…")
    many = tuple(LineSeries(f"host-{i}", _points(1 + i / 10, n=20)) for i in range(MAX_SERIES + 2))
    spec = _line_spec(series=(*many, LineSeries("empty", ())))
    assert len(spec.series) == MAX_SERIES and spec.omitted == 2
    assert spec.note == "+2 more series not shown"
    legend = build_figure(spec).legends[0]
    assert legend.get_title().get_text() == "+2 more series not shown"
    assert [t.get_text() for t in legend.get_texts()] == [f"host-{i}" for i in range(MAX_SERIES)]


async def test_renderer_bounds_concurrency_off_the_loop() -> None:
    lock, gate, entered = threading.Lock(), threading.Event(), threading.Semaphore(0)
    running, peak, threads = [0], [0], set()

    def instrumented(spec: ChartSpec) -> bytes:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            threads.add(threading.get_ident())
        entered.release()
        try:
            assert gate.wait(timeout=30)
            return spec.title.encode()
        finally:
            with lock:
                running[0] -= 1

    renderer = ChartRenderer(max_concurrent=2, render=instrumented)
    tasks = [asyncio.create_task(renderer.render(_line_spec(title=f"chart {i}"))) for i in range(5)]
    # Two renders start and block; the loop keeps running (this test's code runs while they draw).
    assert await asyncio.to_thread(entered.acquire, timeout=30)
    assert await asyncio.to_thread(entered.acquire, timeout=30)
    # A third would start at once were the pool not bounded; it must not (waiting long only slows a passing run).
    assert not await asyncio.to_thread(entered.acquire, timeout=1.0)
    assert running[0] == 2 and threading.get_ident() not in threads
    gate.set()
    assert await asyncio.gather(*tasks) == [f"chart {i}".encode() for i in range(5)]
    assert peak[0] == 2
    await renderer.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await renderer.render(_line_spec())


async def test_renderer_draws_real_charts_concurrently() -> None:
    renderer = ChartRenderer(max_concurrent=2)
    try:
        specs = [_line_spec(theme="dark"), _line_spec(width=600, height=300),
                 ChartSpec(kind="bar", title="cost", unit="USD", bars=(Bar("ec2", 10), Bar("s3", 3)))]
        pngs = await asyncio.gather(*(renderer.render(spec) for spec in specs))
        assert [_pixels(png).shape[:2] for png in pngs] == [(400, 800), (300, 600), (400, 800)]
        assert pngs[0] != render_png(_line_spec(theme="light"))
    finally:
        await renderer.aclose()
