"""The audit trail of the door's calls: each call is written down like a chat turn's tool call.

A call that runs is written as it starts (a :class:`ToolCallRow`, so a process
killed mid-call still has it audited), then as one audit record once it ended,
which replaces the row. A refused call (no role, an approval it cannot get, a
limit) is one record too. The record's platform is ``mcp``, its principal the
caller's (``api:ci``), its channel the door's place (``mcp:api:ci``), its
question ``tools/call <tool>``; the call keeps its redacted arguments, outcome
and sources, so ``botgateway audit`` lists it beside the chat's calls. Writes
are bounded and never fail the call: a store failure is logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.mcp.grants import PLATFORM, place_of
from adapters.mcp.results import source_fields
from botgateway.principal import Principal
from botgateway.redaction import RedactSecrets, redact_text
from botgateway.stores.base import AuditRecord, AuditStore, ToolCallRow
from botgateway.tooling import ToolOutcome

__all__ = ["AUDIT_WRITE_TIMEOUT_S", "CallAudit", "DoorCall"]

log = structlog.get_logger(__name__)

AUDIT_WRITE_TIMEOUT_S = 2.0
"""Longest wait for one audit write (the answer waits for its record, so the record exists once it is read)."""

_REDACT = RedactSecrets()
"""Masks secrets in arguments before they are written (a password passed to a tool stays out of the audit)."""


@dataclass(frozen=True, kw_only=True)
class DoorCall:
    """One call at the door, as its audit names it."""

    call_id: str
    """The call's id: its record's turn id and its row's call id."""
    principal: Principal
    """Who called."""
    tool: str
    """The tool called."""
    arguments: Mapping[str, Any]
    """The arguments as sent."""
    roles: tuple[str, ...]
    """The caller's roles under the policy (empty when refused)."""
    transport: str
    """``http`` or ``stdio``."""
    started_at: float
    """Unix time the call arrived."""

    @property
    def question(self) -> str:
        """What the record says was asked."""
        return f"tools/call {self.tool}"


class CallAudit:
    """Writes the door's calls to the audit trail."""

    def __init__(self, store: AuditStore) -> None:
        self._store = store

    async def started(self, call: DoorCall) -> None:
        """Write that ``call`` started running."""
        await self._write(self._store.record_tool_call(_row(call)), call, "started")

    async def ended(self, call: DoorCall, outcome: ToolOutcome, status: str, *, approval: str = "") -> None:
        """Write ``call``'s record: it ended as ``outcome``, the record's outcome ``status`` (``done``,
        ``failed:tool``, ``refused:<why>``, ``limit:<name>``); ``approval`` says why no approver decided."""
        await self._write(self._store.record_audit(_record(call, outcome, status, approval)), call, status)

    async def _write(self, write: Any, call: DoorCall, what: str) -> None:
        try:
            async with asyncio.timeout(AUDIT_WRITE_TIMEOUT_S):
                await write
        except Exception as exc:  # TimeoutError included: the answer matters more than its record
            log.warning("mcp.audit_not_written", call_id=call.call_id, what=what, error=type(exc).__name__)


def _row(call: DoorCall) -> ToolCallRow:
    return ToolCallRow(
        turn_id=call.call_id, call_id=call.call_id, phase="started", name=call.tool, at=call.started_at,
        platform=PLATFORM, conversation_id=place_of(call.principal).channel, user_id=call.principal.user,
        question=call.question, arguments=_REDACT.redact(dict(call.arguments)), principal=call.principal.id,
        channel=place_of(call.principal).channel, role=",".join(sorted(call.roles)),
    )


def _record(call: DoorCall, outcome: ToolOutcome, status: str, approval: str) -> AuditRecord:
    entry: dict[str, Any] = {
        "name": call.tool, "arguments": _REDACT.redact(dict(call.arguments)), "started_at": call.started_at,
        "ok": outcome.ok, "summary": redact_text(outcome.summary), "duration_s": round(outcome.duration_s, 3),
    }
    if outcome.sources:
        entry["sources"] = [source_fields(source) for source in outcome.sources]
    if approval:
        entry["approval"] = approval
    channel = place_of(call.principal).channel
    return AuditRecord(
        turn_id=call.call_id, platform=PLATFORM, conversation_id=channel, user_id=call.principal.user,
        question=call.question, outcome=status, answer=redact_text(outcome.summary), tool_calls=(entry,),
        started_at=call.started_at, duration_s=round(outcome.duration_s, 3), extra={"transport": call.transport},
        principal=call.principal.id, channel=channel, role=",".join(sorted(call.roles)),
    )
