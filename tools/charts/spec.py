"""What a chart shows: a validated, immutable description that the renderer turns into pixels.

Construction cleans what the metric and cost tools hand over, so the renderer
never meets bad data: non-finite values are dropped, labels are cut to a
readable length, and more series (or bars) than a chart can show are cut to the
first ones with a note saying how many were left out. What cannot make a chart
(no data at all, an unknown time zone, a silly size) raises :class:`ChartError`.
"""

from __future__ import annotations

import math
import zoneinfo
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "MAX_BARS",
    "MAX_LABEL_CHARS",
    "MAX_SERIES",
    "MAX_TITLE_CHARS",
    "Bar",
    "ChartError",
    "ChartKind",
    "ChartSpec",
    "LineSeries",
    "Theme",
    "Threshold",
]

ChartKind = Literal["line", "bar"]
Theme = Literal["light", "dark"]

MAX_SERIES = 10
MAX_BARS = 15
MAX_LABEL_CHARS = 40
MAX_TITLE_CHARS = 80
_MIN_SIDE, _MAX_SIDE = 200, 4000


class ChartError(ValueError):
    """The input cannot make a chart; the message says what to fix."""


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Threshold:
    """A level worth a line across the chart (an alert rule's threshold, a budget)."""

    value: float
    label: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ChartError(f"threshold must be a finite number, got {self.value!r}")
        object.__setattr__(self, "label", _cut(self.label, MAX_LABEL_CHARS))


@dataclass(frozen=True)
class LineSeries:
    """One time series: (unix time in seconds, value) points; non-finite points are dropped and the rest sorted."""

    label: str
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        kept = sorted((float(t), float(v)) for t, v in self.points if math.isfinite(t) and math.isfinite(v))
        object.__setattr__(self, "points", tuple(kept))
        object.__setattr__(self, "label", _cut(self.label, MAX_LABEL_CHARS))


@dataclass(frozen=True)
class Bar:
    """One bar of a breakdown (a service's cost, an account's total)."""

    label: str
    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", _cut(self.label, MAX_LABEL_CHARS))


@dataclass(frozen=True)
class ChartSpec:
    """A chart to draw: a line chart of `series` or a bar chart of `bars`, with its title, unit and time zone."""

    kind: ChartKind
    title: str
    unit: str = ""
    """The values' unit ("%", "USD", "req/s"), shown on the value axis."""
    tz: str = "UTC"
    """IANA time zone the time axis is drawn in (e.g. "Asia/Shanghai"); named on the axis."""
    theme: Theme = "light"
    width: int = 800
    height: int = 400
    threshold: Threshold | None = None
    series: tuple[LineSeries, ...] = ()
    bars: tuple[Bar, ...] = ()
    omitted: int = field(default=0)
    """How many series (or bars) were left out by the cap; set by construction, shown in the legend."""

    def __post_init__(self) -> None:
        if self.kind not in ("line", "bar"):
            raise ChartError(f"chart kind must be 'line' or 'bar', got {self.kind!r}")
        if self.theme not in ("light", "dark"):
            raise ChartError(f"theme must be 'light' or 'dark', got {self.theme!r}")
        for side, name in ((self.width, "width"), (self.height, "height")):
            if not _MIN_SIDE <= side <= _MAX_SIDE:
                raise ChartError(f"{name} must be between {_MIN_SIDE} and {_MAX_SIDE} pixels, got {side}")
        try:
            zoneinfo.ZoneInfo(self.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ChartError(f"unknown time zone {self.tz!r}: use an IANA name such as 'Asia/Shanghai'") from exc
        object.__setattr__(self, "title", _cut(self.title, MAX_TITLE_CHARS))
        object.__setattr__(self, "unit", _cut(self.unit, MAX_LABEL_CHARS))
        if self.kind == "line":
            self._keep_series()
        else:
            self._keep_bars()

    def _keep_series(self) -> None:
        if self.bars:
            raise ChartError("a line chart takes series, not bars")
        series = tuple(s for s in self.series if s.points)
        if not series:
            raise ChartError("no data: every series is empty (or had only NaN/inf values)")
        object.__setattr__(self, "series", series[:MAX_SERIES])
        object.__setattr__(self, "omitted", self.omitted + max(0, len(series) - MAX_SERIES))

    def _keep_bars(self) -> None:
        if self.series:
            raise ChartError("a bar chart takes bars, not series")
        bars = [b for b in self.bars if math.isfinite(b.value)]
        if not bars:
            raise ChartError("no data: there are no bars with a finite value")
        # The largest bars tell the story of a breakdown; the tail is counted in the note.
        bars.sort(key=lambda b: b.value, reverse=True)
        object.__setattr__(self, "bars", tuple(bars[:MAX_BARS]))
        object.__setattr__(self, "omitted", self.omitted + max(0, len(bars) - MAX_BARS))

    @property
    def note(self) -> str:
        """The legend's note about what was left out, or "" when everything is shown."""
        if not self.omitted:
            return ""
        what = "series" if self.kind == "line" else ("bar" if self.omitted == 1 else "bars")
        return f"+{self.omitted} more {what} not shown"
