"""A metric series as the sources hand it over: its labels, its points and its unit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Series", "unit_of"]

# Prometheus naming conventions put the base unit at the end of the metric name.
_SUFFIX_UNITS = (
    ("_seconds_total", "s"),
    ("_seconds", "s"),
    ("_bytes_total", "B"),
    ("_bytes", "B"),
    ("_percent", "%"),
    ("_ratio", "ratio"),
    ("_celsius", "°C"),
)


def unit_of(metric_name: str) -> str:
    """The unit a Prometheus metric name's suffix declares (``_seconds`` → ``s``); empty when it declares none."""
    for suffix, unit in _SUFFIX_UNITS:
        if metric_name.endswith(suffix):
            return unit
    return ""


@dataclass(frozen=True)
class Series:
    """One time series: what identifies it and its values over time."""

    labels: Mapping[str, str] = field(default_factory=dict)
    """Its labels, ``__name__`` included when the source gave one."""
    points: tuple[tuple[float, float], ...] = ()
    """``(unix time, value)`` pairs, oldest first; only finite values."""
    unit: str = ""
    """Unit of the values (``s``, ``B``, ``%``); empty when unknown."""

    def name(self) -> str:
        """The series as PromQL writes it: ``metric{label="value",…}`` (``{}`` for a series without labels)."""
        metric = self.labels.get("__name__", "")
        rest = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()) if k != "__name__")
        return f"{metric}{{{rest}}}" if rest or not metric else metric

    def peak(self) -> float:
        """The largest value (``-inf`` for a series without points): how series are ranked for a cut."""
        return max((v for _, v in self.points), default=float("-inf"))
