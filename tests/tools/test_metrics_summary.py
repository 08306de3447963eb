"""summarize on synthetic series: the figures, the trend under noise, the notable changes, and the one line."""

from __future__ import annotations

import math
import random

import pytest

from tools.metrics import Series, choose_step, summarize

T0 = 1_700_000_000.0


def series(values: list[float], **labels: str) -> Series:
    return Series({"__name__": "cpu_percent", **labels}, tuple((T0 + 60 * i, v) for i, v in enumerate(values)), "%")


def noisy(level: float, n: int = 120, sd: float = 1.0, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, sd) for _ in range(n)]


def test_figures_of_a_known_series() -> None:
    s = summarize(series([float(v) for v in range(1, 101)]))
    assert (s.count, s.min, s.max, s.last) == (100, 1.0, 100.0, 100.0)
    assert s.mean == pytest.approx(50.5)
    assert s.p95 == pytest.approx(95.05)
    assert s.last_time == T0 + 60 * 99


def test_noisy_flat_series_is_flat_without_changes() -> None:
    s = summarize(series(noisy(20.0, sd=2.0)))
    assert s.trend.direction == "flat"
    assert s.changes == ()


def test_rising_and_falling_under_noise() -> None:
    rng = random.Random(3)
    up = summarize(series([10 + 0.5 * i + rng.gauss(0, 2) for i in range(120)]))
    down = summarize(series([90 - 0.5 * i + rng.gauss(0, 2) for i in range(120)]))
    assert up.trend.direction == "rising" and up.trend.slope_per_hour == pytest.approx(30, rel=0.15)
    assert down.trend.direction == "falling" and down.trend.slope_per_hour == pytest.approx(-30, rel=0.15)
    assert up.changes == () and down.changes == ()


def test_one_spike_does_not_tilt_the_trend_and_is_found() -> None:
    values = noisy(50.0)
    values[30] = 400.0
    s = summarize(series(values))
    assert s.trend.direction == "flat"
    assert [(c.kind, c.time, c.after) for c in s.changes] == [("spike", T0 + 60 * 30, 400.0)]


def test_step_is_found_at_its_time() -> None:
    values = noisy(20.0, n=70) + noisy(80.0, n=50, seed=8)
    s = summarize(series(values))
    steps = [c for c in s.changes if c.kind == "step"]
    assert len(steps) == 1
    assert abs(steps[0].time - (T0 + 60 * 70)) <= 60 * 2
    assert steps[0].before == pytest.approx(20, abs=2) and steps[0].after == pytest.approx(80, abs=2)


def test_at_most_three_changes_in_time_order() -> None:
    values = noisy(10.0, n=200)
    for i in (20, 60, 100, 140, 180):
        values[i] = 10.0 + i  # five spikes, growing
    s = summarize(series(values))
    assert len(s.changes) == 3
    assert [c.time for c in s.changes] == [T0 + 60 * i for i in (100, 140, 180)]  # the largest, told in order


def test_constant_series_and_non_finite_values() -> None:
    s = summarize(series([5.0] * 50 + [math.nan, math.inf]))
    assert (s.count, s.min, s.max, s.trend.direction, s.changes) == (50, 5.0, 5.0, "flat", ())


def test_empty_series_says_no_data() -> None:
    s = summarize(Series({"instance": "x"}))
    assert s.count == 0 and s.render() == '{instance="x"}: no data in the window'


def test_line_has_the_figures_and_never_the_points() -> None:
    values = noisy(20.0, n=70) + noisy(80.0, n=50, seed=8)
    line = summarize(series(values, instance="web-2")).render()
    assert line.startswith('cpu_percent{instance="web-2"}: last ')
    for word in ("min", "max", "mean", "p95", "rising", "step", "%"):
        assert word in line
    assert "\n" not in line and len(line) < 300
    assert f"{values[10]:.4g}" not in line


def test_step_is_bounded_to_about_500_points() -> None:
    assert choose_step(3600, 60) == 60
    assert choose_step(7 * 86400, 60) == 1800 and 7 * 86400 / 1800 + 1 <= 500
    assert choose_step(3600, None) == 15
    assert all(span / choose_step(span, None) + 1 <= 500 for span in (900, 3600, 6 * 3600, 86400, 7 * 86400))


def test_samples_repeated_by_a_fine_step_are_not_taken_for_calm() -> None:
    wobble = [((i * 37) % 11 - 5) / 10 for i in range(120)]
    repeated = [20 + w for w in wobble for _ in range(2)]  # a 30 s step over 60 s samples
    s = summarize(series(repeated))
    assert s.trend.direction == "flat" and s.changes == ()


def test_a_series_that_moves_twice_shows_both_moves() -> None:
    s = summarize(series([5.0] * 40 + [10.0] * 40 + [60.0] * 40))
    assert [(c.kind, c.before, c.after) for c in s.changes] == [("step", 5.0, 10.0), ("step", 10.0, 60.0)]


def test_a_clean_rise_has_no_changes_at_its_ends() -> None:
    s = summarize(series([10 + 0.5 * i for i in range(120)]))
    assert s.trend.direction == "rising" and s.changes == ()
