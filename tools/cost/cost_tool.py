"""The ``cost`` tool: what each cloud account the asker may see cost over a period, by service, account or tag.

Every enabled account any of the asker's scopes covers as a whole (provider and
account, no region or tag narrowing: a bill covers them all) is asked at once;
one that fails is named and the others answer. The model reads each account's
total and top lines with their shares; the card gets a bar chart description
per currency in the data. Totals stay in each account's own currency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from botgateway.budget import RateBudget
from botgateway.config import ToolsConfig
from botgateway.tooling import Source, Tool, ToolContext, ToolError, ToolOutput, tool
from tools.charts.artifacts import ChartMaker
from tools.charts.attach import with_charts
from tools.charts.spec import Bar, ChartSpec
from tools.cost.records import CostReport, CostSource, PeriodError, parse_period
from tools.estate.source import SourceError
from tools.providers.scope import UNRESTRICTED, view_of

__all__ = ["COST_REPORT_KIND", "TOP_LINES", "CostFailure", "CostResult", "build_cost_tools", "cost_sources"]

COST_REPORT_KIND = "cost_report"
"""The ``kind`` of a :class:`CostResult` in tool data."""
TOP_LINES = 10
"""Lines per account the model reads (the rest are summed in one line)."""
CHART_BARS = 15
"""Bars per chart description (the renderer's cap)."""


@dataclass(frozen=True)
class CostFailure:
    """An account whose bill could not be read, and why (short, secret-free)."""

    provider: str
    label: str
    account: str
    reason: str


def _money(amount: float, currency: str) -> str:
    return f"{amount:,.2f} {currency}".strip()


@dataclass(frozen=True)
class CostResult:
    """What one ``cost`` call found: a report per account that answered, and the accounts that did not."""

    by: str
    period: str
    reports: tuple[CostReport, ...]
    failures: tuple[CostFailure, ...]
    labels: tuple[tuple[str, str], ...]
    """Provider key → human name, for the rendering."""

    def _label(self, provider: str) -> str:
        return dict(self.labels).get(provider, provider)

    def render(self) -> str:
        """Per account: the total, then the top lines with their shares; then the failures."""
        out: list[str] = []
        for r in self.reports:
            head = f"{self._label(r.provider)} account {r.account}, {r.period_start} to {r.period_end}, by {r.by}"
            cut = " (cut: more lines than read)" if r.cut else ""
            out.append(f"{head}: total {_money(r.total, r.currency)}{cut}")
            if not r.lines:
                out.append("- no charges in this period")
            for line in r.lines[:TOP_LINES]:
                share = f" ({line.amount / r.total:.1%})" if r.total and line.currency == r.currency else ""
                out.append(f"- {line.key}: {_money(line.amount, line.currency)}{share}")
            rest = [line for line in r.lines[TOP_LINES:] if line.currency == r.currency]
            if rest:
                out.append(f"- {len(rest)} more: {_money(sum(line.amount for line in rest), r.currency)}")
        for f in self.failures:
            out.append(f"{f.label} account {f.account}: not read: {f.reason}")
        currencies = {r.currency for r in self.reports}
        if len(currencies) > 1:
            out.append(f"Note: totals are in each account's own currency ({', '.join(sorted(currencies))}); "
                       "they are not added together.")
        return "\n".join(out)

    def card_line(self) -> str:
        """One line: each account's total, and how many failed."""
        totals = [f"{r.provider}/{r.account} {_money(r.total, r.currency)}" for r in self.reports]
        shown = ", ".join(totals[:3]) + (f" +{len(totals) - 3} more" if len(totals) > 3 else "")
        failed = f"; {len(self.failures)} account(s) not read" if self.failures else ""
        return f"cost {self.period} by {self.by}: {shown or 'no account answered'}{failed}"

    def charts(self) -> list[dict[str, Any]]:
        """A bar chart description per currency (ChartSpec(kind="bar", title, unit, bars) fields), largest first."""
        out: list[dict[str, Any]] = []
        for currency in sorted({r.currency for r in self.reports}):
            same = [r for r in self.reports if r.currency == currency and r.lines]
            bars: list[dict[str, Any]] = [
                {"label": line.key if len(same) == 1 else f"{r.account}: {line.key}", "value": line.amount}
                for r in same for line in r.lines if line.currency == currency
            ]
            bars.sort(key=lambda b: b["value"], reverse=True)
            if not bars:
                continue
            who = f"{same[0].provider}/{same[0].account}" if len(same) == 1 else f"{len(same)} accounts"
            out.append({"kind": "bar", "title": f"Cost by {self.by}, {self.period} ({who})", "unit": currency,
                        "currency": currency, "bars": bars[:CHART_BARS], "omitted": max(0, len(bars) - CHART_BARS)})
        return out

    def chart_specs(self) -> list[tuple[ChartSpec, str]]:
        """The bar chart of each currency's breakdown, with its figures in words."""
        specs: list[tuple[ChartSpec, str]] = []
        for chart in self.charts():
            bars = tuple(Bar(b["label"], b["value"]) for b in chart["bars"])
            spec = ChartSpec(kind="bar", title=chart["title"], unit=chart["unit"], bars=bars, omitted=chart["omitted"])
            alt = ", ".join(f"{b.label} {_money(b.value, chart['currency'])}" for b in spec.bars[:8])
            specs.append((spec, alt))
        return specs

    def data(self) -> dict[str, Any]:
        """JSON-ready: every report with its lines, the failures, and the chart descriptions."""
        charts = self.charts()
        return {
            "kind": COST_REPORT_KIND, "by": self.by, "period": self.period,
            "reports": [
                {"provider": r.provider, "account": r.account, "period_start": r.period_start,
                 "period_end": r.period_end, "by": r.by, "total": r.total, "currency": r.currency, "cut": r.cut,
                 "lines": [{"key": x.key, "amount": x.amount, "currency": x.currency} for x in r.lines]}
                for r in self.reports
            ],
            "failures": [{"provider": f.provider, "account": f.account, "reason": f.reason} for f in self.failures],
            "chart": charts[0] if charts else None,
            "charts": charts,
        }

    def to_tool_output(self) -> ToolOutput:
        """Rendering, card line, data and one source per account that answered."""
        sources = tuple(
            Source(provider=r.provider, label=self._label(r.provider), account=r.account, api=r.api,
                   fetched_at=r.fetched_at)
            for r in self.reports
        )
        return ToolOutput(content=self.render(), summary=self.card_line(), data=self.data(), sources=sources)


def cost_sources(config: ToolsConfig, *, budget: RateBudget | None = None) -> list[CostSource]:
    """A billing source for every enabled cloud (imported only when enabled)."""
    out: list[CostSource] = []
    budget = budget if budget is not None else RateBudget()
    if config.aws.enabled:
        from tools.cost.aws import AwsCost

        out.append(AwsCost(config.aws, budget=budget))
    if config.aliyun.enabled:
        from tools.cost.aliyun import AliyunCost

        out.append(AliyunCost(config.aliyun, budget=budget))
    if config.tencent.enabled:
        from tools.cost.tencent import TencentCost

        out.append(TencentCost(config.tencent, budget=budget))
    return out


async def _one(source: CostSource, account: str, *args: Any) -> CostReport | CostFailure:
    try:
        return await source.report(account, *args)
    except SourceError as exc:
        return CostFailure(source.name, source.label, account, exc.reason)


def build_cost_tools(sources: Sequence[CostSource], *, timeout_s: float | None,
                     charts: ChartMaker | None = None) -> list[Tool]:
    """The ``cost`` tool over the clouds' billing ``sources``; ``charts`` draws the breakdown's bar chart."""

    async def cost(
        by: Literal["service", "account", "tag"] = "service", period: str = "last_month", tag_key: str | None = None,
        *, ctx: ToolContext,
    ) -> ToolOutput:
        try:
            asked = parse_period(period, datetime.now(UTC).date())
        except PeriodError as exc:
            raise ToolError(str(exc)) from None
        if by == "tag" and not (tag_key or "").strip():
            raise ToolError("by=tag needs tag_key, the tag whose values to group by (e.g. tag_key=env)")
        scopes = ctx.grant.scopes if ctx.grant is not None else ()
        # A bill covers every region and resource of the account: only a scope covering the whole account reads it.
        wanted = [
            (source, account.name) for source in sources for account in source.config.accounts
            if view_of(scopes, source.name, account.name, "") == UNRESTRICTED
        ]
        if not wanted:
            raise ToolError("no cloud account with billing that your access covers is configured")
        found = await asyncio.gather(*(_one(s, name, asked, by, (tag_key or "").strip() or None) for s, name in wanted))
        result = CostResult(
            by, asked.label, tuple(r for r in found if isinstance(r, CostReport)),
            tuple(f for f in found if isinstance(f, CostFailure)), tuple((s.name, s.label) for s in sources),
        )
        return await with_charts(result.to_tool_output(), charts, result.chart_specs(), ctx)

    cost.__doc__ = """What cloud accounts cost over a period, broken down by service, linked account or a tag; totals
    are in each account's own currency.

    Args:
        by: Group by service, account (AWS linked accounts; elsewhere the account's total) or tag (AWS only).
        period: this_month, last_month, a month as YYYY-MM, or last_30d (AWS only).
        tag_key: With by=tag, the tag whose values to group by (e.g. env).
    """
    return [tool(cost, timeout_s=timeout_s, read_only=True)]
