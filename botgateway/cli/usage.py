"""``botgateway usage``: the models' tokens and what they cost, by user, channel, model or day.

Read from the configured store: one usage row per model call, recorded behind
each turn (and the gateway's own history summaries, as principal ``gateway``),
each costed at the prices configured when it was recorded (``usage.prices``).
A group whose calls include some of a model without a price shows the cost of
the others and counts the unpriced calls; a group with none priced has no cost.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from botgateway.cli import tables
from botgateway.cli.tables import FORMATS
from botgateway.config import Config
from botgateway.report_rows import USAGE_COLUMNS, USAGE_GROUPS, usage_totals
from botgateway.report_rows.usage import COST_DIGITS as _COST_DIGITS

__all__ = ["COLUMNS", "FORMATS", "GROUPS", "run_usage", "usage_totals", "write_totals"]

GROUPS = USAGE_GROUPS
"""What ``--by`` may group the calls by."""

COLUMNS = USAGE_COLUMNS
"""The columns after the group's own (named as ``--by``), in every format, in order (the totals are the core's:
:mod:`botgateway.report_rows.usage`)."""


def write_totals(totals: list[dict[str, Any]], by: str, fmt: str, out: TextIO) -> None:
    """Print ``totals`` as a ``table`` (with a total line), ``jsonl`` (one object a line) or ``csv`` (with a header)."""

    def table(to: TextIO) -> None:
        calls = sum(total["calls"] for total in totals)
        grand = _grand_total(totals)
        shown = (by, "calls", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens",
                 "total_tokens", "cost")
        unpriced = grand["unpriced_calls"]
        notes = [(f"* {unpriced} call(s) had no price (their models are not under usage.prices): "
                  "their tokens are counted, their cost is not.")] if unpriced else []
        tables.print_table(
            to, f"Model usage by {by}: {calls} call(s)", shown,
            ([_cell(total, column) for column in shown] for total in totals),
            footer=["total", *(_cell(grand, column) for column in shown[1:])] if totals else None,
            right=shown[1:], notes=notes,
        )

    tables.write_rows(totals, (by, *COLUMNS), fmt, out, table=table)


def _grand_total(totals: list[dict[str, Any]]) -> dict[str, Any]:
    grand: dict[str, Any] = {column: 0 for column in COLUMNS if column not in ("cost", "currency")}
    costs = [total["cost"] for total in totals if total["cost"] is not None]
    for total in totals:
        for column in grand:
            grand[column] += total[column]
    grand["cost"] = round(sum(costs), _COST_DIGITS) if costs else None
    grand["currency"] = ",".join(sorted({c for total in totals for c in total["currency"].split(",") if c}))
    return grand


def _cell(total: dict[str, Any], column: str) -> str:
    value = total[column]
    if column != "cost":
        return f"{value:,}" if isinstance(value, int) else str(value)
    if value is None:
        return "-"
    mark = "*" if total["unpriced_calls"] else ""  # part of the calls had no price: the cost is a floor
    return f"{value:.{_COST_DIGITS}f} {total['currency']}{mark}".rstrip()


async def run_usage(
    config: Config, *, by: str, since: float | None, fmt: str, limit: int, out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Read the newest ``limit`` usage rows of the configured store from ``since`` on, print their totals by ``by``
    (to ``out``; a warning to ``err`` when the limit cut the rows short)."""
    from botgateway.stores import open_store

    store = await open_store(config.memory)
    try:
        rows = await store.usage_rows(since=since, limit=limit)
    finally:
        await store.close()
    if len(rows) >= limit:
        # The totals would silently leave out every older call: say so where a script piping stdout still sees it.
        print(f"warning: only the newest {limit} model calls were read (--limit {limit}); older ones are not in "
              "these totals: raise --limit or narrow --since", file=err or sys.stderr)
    write_totals(usage_totals(rows, by, since=since), by, fmt, out or sys.stdout)
    return 0
