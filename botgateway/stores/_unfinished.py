"""Audit records of turns that never ended, made from their tool-call rows; shared by every back-end.

A turn's tool calls are written as they start and end
(:meth:`~botgateway.stores.base.Store.record_tool_call`); when the turn ends,
its audit record replaces those rows. Rows still there belong to a turn that is
running or whose process was killed: :func:`unfinished_records` folds them into
one :data:`~botgateway.stores.base.UNFINISHED` record per turn, and
:func:`merged` places those among the written records by time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from botgateway.stores.base import UNFINISHED, AuditRecord, ToolCallRow

__all__ = ["merged", "unfinished_records"]


def unfinished_records(rows: Iterable[ToolCallRow]) -> list[AuditRecord]:
    """One record per turn of ``rows`` (in time order), its calls in the order they started."""
    turns: dict[str, list[ToolCallRow]] = {}
    for row in sorted(rows, key=lambda row: row.at):
        turns.setdefault(row.turn_id, []).append(row)
    records = [_record(turn_rows) for turn_rows in turns.values()]
    return sorted(records, key=_ended_at)


def merged(written: Sequence[AuditRecord], unfinished: Sequence[AuditRecord], limit: int) -> list[AuditRecord]:
    """The newest ``limit`` of both, oldest first; written records keep their order, a turn listed twice is written."""
    done = {record.turn_id for record in written}
    # A turn that ended between the two reads is in both: its own record wins.
    open_turns = sorted((record for record in unfinished if record.turn_id not in done), key=_ended_at)
    both = list(heapq.merge(written, open_turns, key=_ended_at))
    return both[-limit:] if limit > 0 else []


def _record(rows: list[ToolCallRow]) -> AuditRecord:
    first, last = rows[0], rows[-1]
    asked = next((row for row in rows if row.question), first)
    calls: dict[str, dict[str, Any]] = {}
    for row in rows:
        call = calls.setdefault(row.call_id, {"name": row.name, "arguments": {}})
        if row.phase == "started":
            call.update(arguments=dict(row.arguments), started_at=row.at)
        else:
            call.update(ok=row.ok, summary=row.summary, duration_s=row.duration_s)
        if row.approval:
            call["approval"] = row.approval
    return AuditRecord(
        turn_id=first.turn_id,
        platform=asked.platform,
        conversation_id=asked.conversation_id,
        user_id=asked.user_id,
        question=asked.question,
        outcome=UNFINISHED,
        tool_calls=tuple(calls.values()),
        started_at=first.at,
        duration_s=round(last.at - first.at, 3),
        principal=asked.principal,
        team=asked.team,
        channel=asked.channel,
        role=asked.role,
    )


def _ended_at(record: AuditRecord) -> float:
    """When a record's turn ended (or, unfinished, last did something)."""
    return record.started_at + record.duration_s
