"""``botgateway audit``: who asked what where, which tools ran, and who was turned away.

One row per tool call (a turn without calls, a refusal or a limit hit is one
row with no tool), newest last, read from the configured store: turns killed
mid-way are listed from the rows their tool calls left (outcome
``unfinished``). Arguments were redacted when written and are redacted again
here, so a record of an older release never prints a secret.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from botgateway.cli import tables
from botgateway.cli.tables import FORMATS
from botgateway.config import Config
from botgateway.report_rows import AUDIT_COLUMNS, audit_rows
from botgateway.report_rows import parse_since as _parse_since

__all__ = ["COLUMNS", "FORMATS", "audit_rows", "parse_count", "parse_since", "run_audit", "write_rows"]

COLUMNS = AUDIT_COLUMNS
"""The columns of every format, in order (the rows are the core's: :mod:`botgateway.report_rows.audit`)."""


def parse_since(text: str, now: float | None = None) -> float:
    """``1h``, ``30m``, ``2d``, ``1w`` ago, or an ISO date or time (UTC unless it says otherwise), as Unix time.

    Raises ``argparse.ArgumentTypeError`` with what is accepted, so the parser prints it as a usage error.
    """
    try:
        return _parse_since(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_count(text: str) -> int:
    """A count of records to read: a whole number of at least 1 (``argparse.ArgumentTypeError`` otherwise)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of records (a whole number of at least 1)")
    return count


def write_rows(rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    """Print ``rows`` as a ``table``, ``jsonl`` (one object a line) or ``csv`` (with a header)."""
    shown = ("time", "principal", "channel", "role", "tool", "arguments", "outcome", "duration_s", "approval")

    def table(to: TextIO) -> None:
        tables.print_table(to, f"{len(rows)} audit row(s)", shown, ([str(row[c]) for c in shown] for row in rows))

    tables.write_rows(rows, COLUMNS, fmt, out, table=table)


async def run_audit(
    config: Config, *, since: float | None, user: str, tool: str, fmt: str, limit: int, out: TextIO | None = None
) -> int:
    """Read the newest ``limit`` records of the configured store and print the matching rows; returns the exit code."""
    from botgateway.stores import open_store

    store = await open_store(config.memory)
    try:
        records = await store.audit_records(limit=limit)
    finally:
        await store.close()
    write_rows(audit_rows(records, since=since, user=user, tool=tool), fmt, out or sys.stdout)
    return 0
