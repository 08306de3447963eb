"""The feedback report's rows: one per vote (a changed vote as it is now), with the reason and what the answer used.

Tools and sources stay lists (``jsonl`` keeps them so); :func:`flat_row` joins
them for a table or CSV.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from botgateway.redaction import redact_text
from botgateway.stores.base import FeedbackRecord

__all__ = ["FEEDBACK_COLUMNS", "feedback_rows", "flat_row", "source_label"]

FEEDBACK_COLUMNS = (
    "time", "vote", "voter", "reason", "platform", "channel", "asker", "model", "tools", "sources", "turn_id",
    "question",
)
"""The columns of every row, in order."""


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


def flat_row(row: Mapping[str, Any]) -> dict[str, str]:
    """``row`` with its lists joined by ``; ``, for a table or CSV."""
    return {key: "; ".join(value) if isinstance(value, list) else str(value) for key, value in row.items()}
