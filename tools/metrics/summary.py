"""Numbers, not points: a series reduced to the figures a model can reason about, and their one-line rendering.

The trend is the Theil–Sen slope (the median of the slopes between pairs of
points), so a spike or a few outliers do not tilt it. Noise is measured on the
differences between neighbouring points, so a step or a trend is not mistaken
for noise. A change is notable beyond ``k`` robust standard deviations of
that noise (from the MAD, or from the trimmed mean deviation when larger).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from statistics import median
from typing import Literal

from tools.metrics.series import Series

__all__ = ["MAX_CHANGES", "Change", "SeriesSummary", "Trend", "summarize"]

MAX_CHANGES = 3
"""Notable changes reported per series, the largest first chosen, then told in time order."""
_STEP_K = 5.0
"""A level shift is a step beyond this many noise deviations."""
_SPIKE_K = 6.0
"""A point is a spike beyond this many noise deviations from its neighbourhood's median."""
_FLAT_NOISE_K = 3.0
"""A drift over the window within this many noise deviations is flat."""
_FLAT_RELATIVE = 0.02
"""A drift over the window within this share of the typical level is flat (1000 → 1005 is not "rising")."""
_TREND_SAMPLE = 120
"""Points the pairwise slopes are taken over (evenly spaced), so the trend stays cheap on long series."""
_MAD_SIGMA = 1.4826
_MEAN_SIGMA = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class Trend:
    """Where the series heads over the window."""

    direction: Literal["rising", "falling", "flat"]
    """Its direction, noise discounted."""
    slope_per_hour: float
    """Robust slope, in the series' unit per hour."""


@dataclass(frozen=True)
class Change:
    """One notable moment of a series."""

    time: float
    """Unix time it happened (the first point of a new level, or the spike's point)."""
    kind: Literal["step", "spike"]
    """``step``: the level moved and stayed; ``spike``: a short excursion that came back."""
    before: float
    """The level before (for a spike: the neighbourhood's median)."""
    after: float
    """The level after (for a spike: the spike's value)."""

    def render(self) -> str:
        """``step 20→80 at 2026-01-02T10:32Z``."""
        return f"{self.kind} {_num(self.before)}→{_num(self.after)} at {_clock(self.time)}"


@dataclass(frozen=True)
class SeriesSummary:
    """The figures of one series over the window; empty (``count == 0``) when it had no points."""

    name: str
    """The series as PromQL writes it."""
    unit: str
    """Unit of the values; empty when unknown."""
    count: int
    """Points summarized."""
    min: float = math.nan
    """Smallest value."""
    max: float = math.nan
    """Largest value."""
    mean: float = math.nan
    """Arithmetic mean."""
    p95: float = math.nan
    """95th percentile (linear interpolation)."""
    last: float = math.nan
    """Newest value."""
    last_time: float = 0.0
    """Unix time of the newest value."""
    trend: Trend = Trend("flat", 0.0)
    """Direction and slope."""
    changes: tuple[Change, ...] = ()
    """At most :data:`MAX_CHANGES` notable changes, oldest first."""

    def render(self) -> str:
        """One line for the model: the figures, the trend and the changes; never the points."""
        if not self.count:
            return f"{self.name}: no data in the window"
        unit = f" {self.unit}" if self.unit else ""
        trend: str = self.trend.direction
        if trend != "flat":
            trend += f" {self.trend.slope_per_hour:+.3g}{unit}/h"
        line = (
            f"{self.name}: last {_num(self.last)}{unit} ({_clock(self.last_time)}), min {_num(self.min)}, "
            f"max {_num(self.max)}, mean {_num(self.mean)}, p95 {_num(self.p95)}; {trend}"
        )
        if self.changes:
            line += "; " + ", ".join(c.render() for c in self.changes)
        return line


def summarize(series: Series) -> SeriesSummary:
    """The summary of ``series`` (pure; non-finite values are left out)."""
    points = [(t, v) for t, v in series.points if math.isfinite(v)]
    name = series.name()
    if not points:
        return SeriesSummary(name=name, unit=series.unit, count=0)
    times = [t for t, _ in points]
    values = [v for _, v in points]
    noise = _noise(values)
    slope = _theil_sen(times, values)
    return SeriesSummary(
        name=name,
        unit=series.unit,
        count=len(values),
        min=min(values),
        max=max(values),
        mean=math.fsum(values) / len(values),
        p95=_percentile(sorted(values), 0.95),
        last=values[-1],
        last_time=times[-1],
        trend=_trend(times, values, slope, noise),
        changes=_changes(times, values, slope, noise),
    )


def _percentile(ordered: list[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _noise(values: list[float]) -> float:
    """Robust standard deviation of the point-to-point noise (a difference of two noisy points has √2 of it)."""
    if len(values) < 3:
        return 0.0
    diffs = [b - a for a, b in pairwise(values)]
    moved = [d for d in diffs if d != 0]
    # A step finer than the scrape interval repeats each sample; those repeats are not a lack of noise. A series
    # that mostly stands still and moves a few times is another matter: there every move may be notable.
    if len(moved) >= max(10, len(diffs) // 4):
        diffs = moved
    centre = median(diffs)
    spread = sorted(abs(d - centre) for d in diffs)
    # The MAD is blind to a regular pattern (most differences equal); the mean of the spread without its top
    # tenth (where steps and spikes are) is not.
    kept = spread[: max(1, len(spread) * 9 // 10)]
    return max(_MAD_SIGMA * median(spread), _MEAN_SIGMA * math.fsum(kept) / len(kept)) / math.sqrt(2)


def _theil_sen(times: list[float], values: list[float]) -> float:
    """Median pairwise slope, per second, over at most :data:`_TREND_SAMPLE` evenly spaced points."""
    n = len(values)
    if n < 2:
        return 0.0
    picks: Sequence[int] = range(n)
    if n > _TREND_SAMPLE:
        picks = sorted({round(i * (n - 1) / (_TREND_SAMPLE - 1)) for i in range(_TREND_SAMPLE)})
    ts = [times[i] for i in picks]
    vs = [values[i] for i in picks]
    slopes = [
        (vs[j] - vs[i]) / (ts[j] - ts[i]) for i in range(len(ts)) for j in range(i + 1, len(ts)) if ts[j] > ts[i]
    ]
    return median(slopes) if slopes else 0.0


def _trend(times: list[float], values: list[float], slope: float, noise: float) -> Trend:
    drift = slope * (times[-1] - times[0])
    level = abs(median(values))
    if abs(drift) <= max(_FLAT_NOISE_K * noise, _FLAT_RELATIVE * level, 1e-12):
        return Trend("flat", slope * 3600)
    return Trend("rising" if drift > 0 else "falling", slope * 3600)


def _changes(times: list[float], values: list[float], slope: float, noise: float) -> tuple[Change, ...]:
    """The largest steps and spikes (scored in noise deviations), at most :data:`MAX_CHANGES`, oldest first."""
    width = max(3, min(10, len(values) // 10))
    # An exactly constant stretch has no noise; any move then is notable, but not a float's last digit.
    floor = max(noise, 1e-9 * max(abs(v) for v in values), 1e-12)
    found = _steps(times, values, slope, width, floor) + _spikes(times, values, width, floor)
    chosen: list[tuple[float, Change]] = []
    for score, change in sorted(found, key=lambda item: -item[0]):
        if all(abs(change.time - other.time) > _spacing(times) * width for _, other in chosen):
            chosen.append((score, change))
        if len(chosen) == MAX_CHANGES:
            break
    return tuple(sorted((c for _, c in chosen), key=lambda c: c.time))


def _spacing(times: list[float]) -> float:
    return (times[-1] - times[0]) / max(1, len(times) - 1)


def _steps(
    times: list[float], values: list[float], slope: float, width: int, floor: float
) -> list[tuple[float, Change]]:
    """Level shifts: the median of ``width`` points after a point against the ``width`` before."""
    shifts: list[tuple[float, int, float, float]] = []
    for i in range(width, len(values) - width + 1):
        before, after = median(values[i - width : i]), median(values[i : i + width])
        expected = slope * (median(times[i : i + width]) - median(times[i - width : i]))
        # The trend explains a rising series' shifts, yet a step tilts the trend itself: the smaller of both counts.
        score = min(abs(after - before), abs(after - before - expected)) / floor
        shifts.append((score, i, before, after))
    found: list[tuple[float, Change]] = []
    taken: list[int] = []
    for score, i, before, after in sorted(shifts, reverse=True):
        if score < _STEP_K:
            break
        if all(abs(i - j) > width for j in taken):
            taken.append(i)
            found.append((score, Change(times[i], "step", before, after)))
    return found


def _spikes(times: list[float], values: list[float], width: int, floor: float) -> list[tuple[float, Change]]:
    """Points far from the median of their neighbourhood (which a one- or two-point excursion does not move).

    The neighbourhood is centred, so that on a trend its median is the point's own level; near the ends it shrinks.
    """
    found: list[tuple[float, Change]] = []
    for i, value in enumerate(values):
        reach = min(width, i, len(values) - 1 - i)
        if reach < 2:
            continue
        around = median(values[i - reach : i + reach + 1])
        score = abs(value - around) / floor
        if score >= _SPIKE_K:
            found.append((score, Change(times[i], "spike", around, value)))
    return found


def _num(value: float) -> str:
    return f"{value:.4g}"


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")
