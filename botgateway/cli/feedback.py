"""``botgateway feedback``: the 👍 / 👎 people gave the answers, with the reasons and what the answers used.

One row per vote (one per voter and answer: a changed vote is listed as it is
now), newest last, read from the configured store. ``--since`` and the formats
are those of ``botgateway audit`` (:mod:`botgateway.cli.audit`); in ``jsonl``
the tools and sources stay lists, in ``table`` and ``csv`` they are joined.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from botgateway.config import Config
from botgateway.redaction import redact_text
from botgateway.stores.base import FeedbackRecord

__all__ = ["COLUMNS", "FORMATS", "feedback_rows", "run_feedback", "source_label", "write_rows"]

COLUMNS = (
    "time", "vote", "voter", "reason", "platform", "channel", "asker", "model", "tools", "sources", "turn_id",
    "question",
)
"""The columns of every format, in order."""

FORMATS = ("table", "jsonl", "csv")
"""The output formats."""

_SHOWN = ("time", "vote", "voter", "reason", "model", "tools", "sources", "question")
"""The columns of the table (the others are in jsonl and csv)."""


def source_label(source: Mapping[str, Any]) -> str:
    """One source in a few words: ``Alibaba Cloud prod/cn-hangzhou (DescribeInstances, cached)``."""
    where = "/".join(str(source[k]) for k in ("account", "region") if source.get(k))
    name = " ".join(part for part in (str(source.get("label") or source.get("provider") or ""), where) if part)
    flags = (str(source.get("api") or ""), "cached" if source.get("cached") else "")
    details = ", ".join(part for part in flags if part)
    return f"{name} ({details})" if details else name


def feedback_rows(records: Iterable[FeedbackRecord], *, vote: str = "") -> list[dict[str, Any]]:
    """The rows of ``records`` (only ``vote``'s, when given), in the order given."""
    return [
        {
            "time": datetime.fromtimestamp(record.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "vote": record.vote,
            "voter": record.voter,
            "reason": redact_text(record.reason),
            "platform": record.platform,
            "channel": record.channel,
            "asker": record.asker,
            "model": record.model,
            "tools": list(record.tools),
            "sources": [source_label(source) for source in record.sources],
            "turn_id": record.turn_id,
            "question": redact_text(record.question),
        }
        for record in records
        if not vote or record.vote == vote
    ]


def _flat(row: Mapping[str, Any]) -> dict[str, str]:
    """A row with its lists joined, for the table and csv."""
    return {key: "; ".join(value) if isinstance(value, list) else str(value) for key, value in row.items()}


def write_rows(rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    """Print ``rows`` as a ``table``, ``jsonl`` (one object a line) or ``csv`` (with a header)."""
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_flat(row) for row in rows)
    else:
        _table(rows, out)


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    up = sum(row["vote"] == "up" for row in rows)
    table = Table(title=f"{len(rows)} vote(s): {up} 👍, {len(rows) - up} 👎", show_lines=False)
    for column in _SHOWN:
        table.add_column(column, overflow="fold")
    for row in map(_flat, rows):
        # Plain Text, not markup: a question or reason with "[/x]" in it is shown as typed, never parsed.
        table.add_row(*(Text(("👍" if row["vote"] == "up" else "👎") if c == "vote" else row[c]) for c in _SHOWN))
    # Piped into a file or a pager, 80 columns would fold every id; a terminal keeps its own width.
    width = None if out.isatty() else 200
    Console(file=out, soft_wrap=False, width=width).print(table)


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
