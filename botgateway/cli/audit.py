"""``botgateway audit``: who asked what where, which tools ran, and who was turned away.

One row per tool call (a turn without calls, a refusal or a limit hit is one
row with no tool), newest last, read from the configured store: turns killed
mid-way are listed from the rows their tool calls left (outcome
``unfinished``). Arguments were redacted when written and are redacted again
here, so a record of an older release never prints a secret.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any, TextIO

from botgateway.cli import tables
from botgateway.cli.tables import FORMATS
from botgateway.config import Config
from botgateway.principal import principal_id
from botgateway.redaction import RedactSecrets, redact_text
from botgateway.stores.base import AuditRecord

__all__ = ["COLUMNS", "FORMATS", "audit_rows", "parse_count", "parse_since", "run_audit", "write_rows"]

COLUMNS = (
    "time", "platform", "team", "channel", "principal", "role", "tool", "arguments",
    "outcome", "duration_s", "approval", "turn_id", "turn_outcome", "question",
)
"""The columns of every format, in order."""

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_REDACT = RedactSecrets()


def parse_since(text: str, now: float | None = None) -> float:
    """``1h``, ``30m``, ``2d``, ``1w`` ago, or an ISO date or time (UTC unless it says otherwise), as Unix time.

    Raises ``argparse.ArgumentTypeError`` with what is accepted, so the parser prints it as a usage error.
    """
    now = time.time() if now is None else now
    age = _AGE.match(text)
    if age:
        return now - float(age.group(1)) * _UNIT_S[age.group(2).lower()]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age (30m, 1h, 2d, 1w) nor an ISO date or time (2026-11-30, 2026-11-30T08:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_count(text: str) -> int:
    """A count of records to read: a whole number of at least 1 (``argparse.ArgumentTypeError`` otherwise)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of records (a whole number of at least 1)")
    return count


def audit_rows(
    records: Iterable[AuditRecord], *, since: float | None = None, user: str = "", tool: str = ""
) -> list[dict[str, Any]]:
    """The rows of ``records``: one per tool call, or one per record without calls; filtered.

    ``user`` matches the principal (``slack:U0123``) or the platform's user id;
    ``tool`` is a name or a glob (``k8s__*``); ``since`` keeps rows from that Unix time on.
    """
    rows: list[dict[str, Any]] = []
    for record in records:
        principal = record.principal or principal_id(record.platform, record.user_id)
        if user and user not in (principal, record.user_id):
            continue
        calls: list[Mapping[str, Any]] = list(record.tool_calls) or [{}]
        for call in calls:
            name = str(call.get("name", ""))
            if tool and not fnmatchcase(name, tool):
                continue
            at = float(call.get("started_at") or record.started_at)
            if since is not None and at < since:
                continue
            rows.append(_row(record, principal, call, at))
    return rows


def _row(record: AuditRecord, principal: str, call: Mapping[str, Any], at: float) -> dict[str, Any]:
    arguments = _REDACT.redact(dict(call.get("arguments") or {})) if call else {}
    return {
        "time": datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "platform": record.platform,
        "team": record.team,
        "channel": record.channel,
        "principal": principal,
        "role": record.role,
        "tool": str(call.get("name", "")),
        "arguments": json.dumps(arguments, ensure_ascii=False, sort_keys=True) if call else "",
        "outcome": _call_outcome(record, call),
        "duration_s": call.get("duration_s", "") if call else record.duration_s,
        "approval": str(call.get("approval", "")),
        "turn_id": record.turn_id,
        "turn_outcome": record.outcome,
        "question": redact_text(record.question),
    }


def _call_outcome(record: AuditRecord, call: Mapping[str, Any]) -> str:
    if not call:
        return record.outcome
    ok = call.get("ok")
    if ok is True:
        return "ok"
    if ok is False:
        summary = str(call.get("summary", ""))
        return f"failed: {summary}" if summary else "failed"
    return "unfinished"  # started, never ended: the turn was stopped or its process killed


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
