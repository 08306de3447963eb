"""The usage report's rows: the models' calls, tokens and cost, by user, channel, model or day.

One usage row per model call is recorded behind each turn, costed at the
prices configured then (``usage.prices``). A group whose calls include some of
a model without a price shows the cost of the others and counts the unpriced
calls; a group with none priced has no cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botgateway.stores.base import UsageRow

__all__ = ["COST_DIGITS", "USAGE_COLUMNS", "USAGE_GROUPS", "usage_totals"]

USAGE_GROUPS = ("user", "channel", "model", "day")
"""What the calls may be grouped by."""

USAGE_COLUMNS = (
    "calls", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens", "total_tokens",
    "cost", "currency", "unpriced_calls",
)
"""The columns after the group's own (named as the grouping), in order."""

COST_DIGITS = 6
"""Costs are rounded to a millionth: a cheap model's call costs a fraction of a cent."""

_KEYS: dict[str, Callable[[UsageRow], str]] = {
    "user": lambda row: row.principal or "(unknown)",
    "channel": lambda row: f"{row.platform}:{row.channel}" if row.channel else (row.platform or "(none)"),
    "model": lambda row: row.model or "(unknown)",
    "day": lambda row: datetime.fromtimestamp(row.at, UTC).strftime("%Y-%m-%d"),
}


# Mutable on purpose: it sums one group's rows as they are read.
@dataclass
class _Sum:
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float | None = None
    currencies: set[str] = field(default_factory=set)
    unpriced_calls: int = 0

    def add(self, row: UsageRow) -> None:
        self.calls += 1
        self.prompt_tokens += row.prompt_tokens
        self.cached_tokens += row.cached_tokens
        self.completion_tokens += row.completion_tokens
        self.reasoning_tokens += row.reasoning_tokens
        if row.cost is None:
            self.unpriced_calls += 1
        else:
            self.cost = (self.cost or 0.0) + row.cost
            if row.currency:
                self.currencies.add(row.currency)

    def columns(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "cost": None if self.cost is None else round(self.cost, COST_DIGITS),
            "currency": ",".join(sorted(self.currencies)),
            "unpriced_calls": self.unpriced_calls,
        }


def usage_totals(rows: Iterable[UsageRow], by: str, *, since: float | None = None) -> list[dict[str, Any]]:
    """One row per group of ``rows`` (``by``: user, channel, model or day), with its calls, tokens and cost.

    Days come in order; other groups by their tokens, most first. ``since`` keeps rows from that Unix time on.
    """
    key_of = _KEYS[by]
    sums: dict[str, _Sum] = {}
    for row in rows:
        if since is not None and row.at < since:
            continue
        sums.setdefault(key_of(row), _Sum()).add(row)
    if by == "day":
        order = sorted(sums)
    else:
        order = sorted(sums, key=lambda key: (-(sums[key].prompt_tokens + sums[key].completion_tokens), key))
    return [{by: key, **sums[key].columns()} for key in order]
