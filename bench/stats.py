"""Percentiles where a failure counts: an answer that never arrived is +inf, not left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

INF = math.inf
"""The latency of an answer that was never (exactly) delivered."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100), linear interpolation; +inf once it reaches a failure; ``None`` for no values."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    if pos == low or math.isinf(data[low]):
        return float(data[low])
    if math.isinf(data[high]):
        return INF
    return float(data[low] + (data[high] - data[low]) * (pos - low))


def summarize(values: Sequence[float], *, tail: int = 95) -> dict[str, Any]:
    """p50, the ``tail`` percentile (``p95``), max, how many values, and how many of them are failures (+inf)."""
    return {
        "p50": percentile(values, 50),
        f"p{tail}": percentile(values, tail),
        "max": max(values) if values else None,
        "n": len(values),
        "failed": sum(1 for v in values if math.isinf(v)),
    }


def jsonable(value: Any) -> Any:
    """``value`` with every +inf replaced by ``None`` (JSON has no infinity; ``failed`` says how many)."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
