"""``botgateway feedback``: the 👍 / 👎 people gave the answers, with the reasons and what the answers used.

One row per vote (one per voter and answer: a changed vote is listed as it is
now), newest last, read from the configured store. ``--since`` and the formats
are those of ``botgateway audit`` (:mod:`botgateway.cli.audit`); in ``jsonl``
the tools and sources stay lists, in ``table`` and ``csv`` they are joined.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from botgateway.cli import tables
from botgateway.cli.tables import FORMATS
from botgateway.config import Config
from botgateway.report_rows import FEEDBACK_COLUMNS, feedback_rows, source_label

__all__ = ["COLUMNS", "FORMATS", "feedback_rows", "run_feedback", "source_label", "write_rows"]

COLUMNS = FEEDBACK_COLUMNS
"""The columns of every format, in order (the rows are the core's: :mod:`botgateway.report_rows.feedback`)."""

_SHOWN = ("time", "vote", "voter", "reason", "model", "tools", "sources", "question")
"""The columns of the table (the others are in jsonl and csv)."""


def write_rows(rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    """Print ``rows`` as a ``table``, ``jsonl`` (one object a line, lists kept) or ``csv`` (with a header, lists
    joined)."""

    def table(to: TextIO) -> None:
        up = sum(row["vote"] == "up" for row in rows)
        cells = ([("👍" if row["vote"] == "up" else "👎") if c == "vote" else str(tables.csv_cell(row[c]))
                  for c in _SHOWN] for row in rows)
        # Plain text, not markup (print_table): a question or reason with "[/x]" in it is shown as typed.
        tables.print_table(to, f"{len(rows)} vote(s): {up} 👍, {len(rows) - up} 👎", _SHOWN, cells)

    tables.write_rows(rows, COLUMNS, fmt, out, table=table)


async def run_feedback(
    config: Config, *, since: float | None, vote: str, fmt: str, limit: int, out: TextIO | None = None
) -> int:
    """Read the newest ``limit`` votes of the configured store (from ``since`` on) and print them; the exit code."""
    from botgateway.stores import open_store

    store = await open_store(config.memory)
    try:
        records = await store.feedback_records(since=since, limit=limit)
    finally:
        await store.close()
    write_rows(feedback_rows(records, vote=vote), fmt, out or sys.stdout)
    return 0
