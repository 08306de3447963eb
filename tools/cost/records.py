"""What a cost answer is made of: the period asked, one account's breakdown, and what a billing source offers.

Amounts stay in the currency the bill states: a report's total sums only the
lines in its own currency, and nothing here ever adds two currencies together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal, Protocol

from botgateway.config import CloudProviderConfig

__all__ = ["PERIODS", "By", "CostLine", "CostReport", "CostSource", "Period", "PeriodError", "parse_period"]

By = Literal["service", "account", "tag"]
"""What a breakdown groups by."""

PERIODS = ("this_month", "last_month", "YYYY-MM", "last_30d")
"""The periods the tool understands, as the model may write them."""

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_OLDEST_YEAR = 2000


class PeriodError(ValueError):
    """The period is not understood; the message says which ones are."""


@dataclass(frozen=True)
class Period:
    """Days a cost question covers: ``start`` inclusive, ``end`` exclusive (as Cost Explorer takes them)."""

    label: str
    """What was asked (``last_month``, ``2026-10``)."""
    start: date
    end: date
    month: str = ""
    """``YYYY-MM`` when the period lies within one calendar month (what monthly-only bills need), else ""."""

    @property
    def last_day(self) -> date:
        """The last day included."""
        return self.end - timedelta(days=1)


def _month_after(first: date) -> date:
    return date(first.year + (first.month == 12), first.month % 12 + 1, 1)


def parse_period(text: str, today: date) -> Period:
    """``this_month``, ``last_month``, ``YYYY-MM`` or ``last_30d`` as days up to ``today``.

    Raises :class:`PeriodError` for anything else, or a month after ``today``'s.
    """
    asked = (text or "").strip().lower()
    this_month = today.replace(day=1)
    if asked == "this_month":
        return Period(asked, this_month, today + timedelta(days=1), this_month.strftime("%Y-%m"))
    if asked == "last_month":
        first = (this_month - timedelta(days=1)).replace(day=1)
        return Period(asked, first, this_month, first.strftime("%Y-%m"))
    if asked == "last_30d":
        return Period(asked, today - timedelta(days=29), today + timedelta(days=1))
    match = _MONTH.match(asked)
    if match and 1 <= int(match.group(2)) <= 12 and int(match.group(1)) >= _OLDEST_YEAR:
        first = date(int(match.group(1)), int(match.group(2)), 1)
        if first > today:
            raise PeriodError(f"period {text!r} is in the future; the latest is {this_month:%Y-%m}")
        end = min(_month_after(first), today + timedelta(days=1))
        return Period(asked, first, end, asked)
    raise PeriodError(f"period {text!r} is not understood; give one of {', '.join(PERIODS)} (e.g. {this_month:%Y-%m})")


@dataclass(frozen=True)
class CostLine:
    """One row of a breakdown: a service, a linked account or a tag value, and what it cost."""

    key: str
    amount: float
    currency: str


@dataclass(frozen=True)
class CostReport:
    """One account's bill for a period, broken down one way, largest line first."""

    provider: str
    account: str
    period_start: str
    """First day, ``YYYY-MM-DD``."""
    period_end: str
    """Last day included, ``YYYY-MM-DD``."""
    by: str
    lines: tuple[CostLine, ...]
    total: float
    """The sum of the lines in :attr:`currency` (lines in another currency are not added)."""
    currency: str
    cut: bool = False
    """The API had more lines than were read."""
    api: str = ""
    """The API that answered (``ce:GetCostAndUsage``)."""
    fetched_at: float = 0.0
    """Unix time of the answer."""

    @classmethod
    def of(cls, provider: str, account: str, period: Period, by: str, lines: Sequence[CostLine], *,
           cut: bool = False, api: str = "", fetched_at: float = 0.0, currency: str = "") -> CostReport:
        """Merge lines of the same key and currency, sort them, and total the report's currency.

        ``currency``: the bill's own when it states one apart from the lines; else the lines' most frequent.
        """
        merged: dict[tuple[str, str], float] = {}
        for line in lines:
            merged[(line.key, line.currency)] = merged.get((line.key, line.currency), 0.0) + line.amount
        kept = sorted((CostLine(k, round(v, 2), c) for (k, c), v in merged.items()), key=lambda x: (-x.amount, x.key))
        currencies = [line.currency for line in kept]
        main = currency or (max(set(currencies), key=currencies.count) if currencies else "")
        total = round(sum(line.amount for line in kept if line.currency == main), 2)
        return cls(provider, account, period.start.isoformat(), period.last_day.isoformat(), by, tuple(kept), total,
                   main, cut, api, fetched_at)


class CostSource(Protocol):
    """One cloud's billing: a report per configured account."""

    config: CloudProviderConfig
    """The provider's section: its accounts."""

    @property
    def name(self) -> str:
        """Provider key (``aws``)."""
        ...

    @property
    def label(self) -> str:
        """Human name ("AWS")."""
        ...

    async def report(self, account: str, period: Period, by: str, tag_key: str | None) -> CostReport:
        """The account's breakdown; raises :class:`~tools.estate.source.SourceError` with a short reason."""
        ...

    async def start(self) -> None:
        """Import the SDK and build the clients now, outside any question's timeout."""
        ...

    async def aclose(self) -> None:
        """Stop the source's threads."""
        ...
