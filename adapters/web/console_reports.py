"""The console's Audit, Usage and Feedback tables: the rows ``botgateway audit``, ``usage`` and ``feedback`` print.

``GET /console/api/{audit,usage,feedback}`` with the same filters as the
commands (``since``, ``user``, ``tool``, ``vote``, ``by``, ``limit``) answers
``{"columns": [...], "rows": [...], "cut_at": <limit or null>}`` (``cut_at``: the
limit left older records out, as ``botgateway usage`` warns), or with ``format=csv`` a CSV download
with a header line, written as the commands write it (a cell a spreadsheet would run as a formula starts
with ``'``). A filter that makes no sense is a 400 saying why.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web

from botgateway.report_rows import (
    AUDIT_COLUMNS,
    FEEDBACK_COLUMNS,
    USAGE_COLUMNS,
    USAGE_GROUPS,
    audit_rows,
    feedback_rows,
    flat_row,
    parse_since,
    usage_totals,
)
from botgateway.report_rows.csv_rows import write_csv
from botgateway.stores.base import AuditStore, FeedbackStore, UsageStore

__all__ = [
    "MAX_LIMIT", "BadFilter", "Report", "ReportStore", "audit_report", "feedback_report", "report_response",
    "usage_report",
]

MAX_LIMIT = 100_000
"""The most records one page may ask the Store for."""


class ReportStore(AuditStore, UsageStore, FeedbackStore, Protocol):
    """The part of the Store the tables are read from: audit records, usage rows and votes."""


class BadFilter(ValueError):
    """A query parameter that makes no sense; its message says what is accepted."""


@dataclass(frozen=True)
class Report:
    """One table of the console."""

    columns: Sequence[str]
    """The columns, in order."""
    rows: list[dict[str, Any]]
    """The rows, each a column → value mapping."""
    cut_at: int | None = None
    """The ``limit`` of records read when it cut them short (older ones are left out), else None."""


def _since(query: Mapping[str, str]) -> float | None:
    text = query.get("since", "").strip()
    if not text:
        return None
    try:
        return parse_since(text)
    except ValueError as exc:
        raise BadFilter(f"since: {exc}") from None


def _limit(query: Mapping[str, str], default: int) -> int:
    text = query.get("limit", "").strip()
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadFilter(f"limit: {text!r} is not a number of records from 1 to {MAX_LIMIT}")
    return int(text)


def _cut(read: int, limit: int) -> int | None:
    return limit if read >= limit else None


async def audit_report(store: AuditStore, query: Mapping[str, str]) -> Report:
    """The audit rows matching ``query`` (``since``, ``user``, ``tool``, ``limit``), as ``botgateway audit``."""
    since, limit = _since(query), _limit(query, 1000)
    records = await store.audit_records(limit=limit)
    rows = audit_rows(records, since=since, user=query.get("user", "").strip(), tool=query.get("tool", "").strip())
    return Report(AUDIT_COLUMNS, rows, _cut(len(records), limit))


async def usage_report(store: UsageStore, query: Mapping[str, str]) -> Report:
    """The usage totals matching ``query`` (``by``, ``since``, ``limit``), as ``botgateway usage``."""
    by = query.get("by", "").strip() or "model"
    if by not in USAGE_GROUPS:
        raise BadFilter(f"by: {by!r} is none of {', '.join(USAGE_GROUPS)}")
    since, limit = _since(query), _limit(query, MAX_LIMIT)
    rows = await store.usage_rows(since=since, limit=limit)
    return Report((by, *USAGE_COLUMNS), usage_totals(rows, by, since=since), _cut(len(rows), limit))


async def feedback_report(store: FeedbackStore, query: Mapping[str, str]) -> Report:
    """The votes matching ``query`` (``since``, ``vote``, ``limit``), as ``botgateway feedback``."""
    vote = query.get("vote", "").strip()
    if vote not in ("", "up", "down"):
        raise BadFilter(f"vote: {vote!r} is neither up nor down")
    since, limit = _since(query), _limit(query, 1000)
    records = await store.feedback_records(since=since, limit=limit)
    rows = [flat_row(row) for row in feedback_rows(records, vote=vote)]
    return Report(FEEDBACK_COLUMNS, rows, _cut(len(records), limit))


def _csv(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    write_csv(out, columns, rows)  # the CLI's writer: lists joined, formulas defused
    return out.getvalue()


def report_response(name: str, report: Report, fmt: str) -> web.Response:
    """``report`` as JSON, or with ``fmt == "csv"`` as a download named ``<name>-<UTC time>.csv``."""
    columns, rows = report.columns, report.rows
    if fmt == "csv":
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        return web.Response(
            text=_csv(columns, rows), content_type="text/csv", charset="utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}-{stamp}.csv"'},
        )
    return web.json_response({"columns": list(columns), "rows": rows, "cut_at": report.cut_at})
