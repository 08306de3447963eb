"""The audit report's rows: one per tool call (or one per turn, refusal or limit hit without calls), filtered.

Turns killed mid-way are listed from the rows their tool calls left (outcome
``unfinished``). Arguments were redacted when written and are redacted again
here, so a record of an older release never shows a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

from botgateway.principal import principal_id
from botgateway.redaction import RedactSecrets, redact_text
from botgateway.stores.base import AuditRecord

__all__ = ["AUDIT_COLUMNS", "audit_rows"]

AUDIT_COLUMNS = (
    "time", "platform", "team", "channel", "principal", "role", "tool", "arguments",
    "outcome", "duration_s", "approval", "turn_id", "turn_outcome", "question",
)
"""The columns of every row, in order."""

_REDACT = RedactSecrets()


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
