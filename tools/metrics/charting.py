"""What a metric result's chart shows: the series that share the first one's unit, titled, with their figures as words."""

from __future__ import annotations

from collections.abc import Sequence

from tools.charts.spec import ChartSpec, LineSeries, Threshold
from tools.metrics.series import Series
from tools.metrics.summary import SeriesSummary

__all__ = ["ALT_CHARS", "line_chart", "series_label"]

ALT_CHARS = 400
"""The figures' words a chart carries at most (what stands in where the picture cannot be shown)."""


def series_label(series: Series) -> str:
    """A short legend label: the labels that tell series apart, else the metric's name."""
    labels = {k: v for k, v in series.labels.items() if k not in ("__name__", "job", "source", "id")}
    if "resource" in labels and len(labels) == 1:
        return f"{series.labels.get('__name__', '')} {labels['resource']}".strip()
    shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())[:3])
    return shown or series.labels.get("__name__", "") or series.name()


def line_chart(title: str, series: Sequence[Series], summaries: Sequence[SeriesSummary], *, tz: str = "UTC",
               threshold: float | None = None, threshold_label: str = "") -> tuple[ChartSpec, str] | None:
    """The line chart of the series sharing the first series' unit, and its figures in words; None without points.
    ``{metrics}`` in ``title`` becomes the names of the metrics drawn.

    Mixed units on one axis would mislead, so series of another unit are left to the model's figures.
    """
    drawn = [s for s in series if s.points]
    if not drawn:
        return None
    unit = drawn[0].unit
    same = [s for s in drawn if s.unit == unit]
    lines = tuple(LineSeries(series_label(s), s.points) for s in same)
    # "{metrics}" in a title names what the chart shows (the series of another unit are left out of it).
    title = title.replace("{metrics}", ", ".join(dict.fromkeys(s.labels.get("__name__", "") for s in same)).strip(", "))
    limit = Threshold(threshold, threshold_label) if threshold is not None else None
    spec = ChartSpec(kind="line", title=title, unit=unit, tz=tz, threshold=limit, series=lines)
    names = {s.name() for s in same}
    alt = "; ".join(s.render() for s in summaries if s.name in names)
    return spec, alt[:ALT_CHARS]
