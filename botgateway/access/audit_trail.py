"""Audit records of questions that never became a turn: refusals and limit hits.

A turn's own record is written when it ends (:mod:`botgateway.turns.runner`);
a question refused (by the access check, for its size, by a closing process or
a full line) or by a limit is written here, so that ``botgateway audit`` shows
who was turned away, why, and when.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from botgateway.access.asker_limits import asker_of
from botgateway.messages import InboundMessage
from botgateway.redaction import redact_text
from botgateway.stores.base import AuditRecord, AuditStore

__all__ = ["REFUSAL_WRITE_TIMEOUT_S", "refusal_record", "write_refusal"]

log = structlog.get_logger(__name__)

REFUSAL_WRITE_TIMEOUT_S = 2.0
"""Longest wait for a refusal's record: it is written before the asker is answered, but never holds them up long."""


def refusal_record(
    msg: InboundMessage, *, turn_id: str, outcome: str, note: str, at: float, question_chars: int | None = None
) -> AuditRecord:
    """The record of ``msg`` turned away as ``outcome`` (``refused``, ``refused:<why>``, ``limit:<name>``), ``note``
    being what the asker was told; the question is kept up to ``question_chars`` characters when given."""
    question = redact_text(msg.text)  # people paste tokens into chat; masked before cutting, so no half token stays
    if question_chars is not None and len(question) > question_chars:
        # A question refused for its size must not fill the audit with what it was refused for.
        question = question[:question_chars] + "…"
    return AuditRecord(
        turn_id=turn_id,
        platform=msg.platform,
        conversation_id=msg.conversation_id,
        user_id=msg.ctx.user_id or msg.target.user_id,
        question=question,
        outcome=outcome,
        answer=redact_text(note),
        started_at=at,
        principal=asker_of(msg),
        team=msg.target.workspace_id,
        channel=msg.ctx.chat_id or msg.target.chat_id,
        role=",".join(sorted(msg.ctx.roles)),
    )


async def write_refusal(
    store: AuditStore, msg: InboundMessage, *, turn_id: str, outcome: str, note: str, question_chars: int | None = None
) -> None:
    """Write the record of a refusal (the question kept up to ``question_chars`` characters when given); a store
    failure is logged, never raised (the note is what matters)."""
    record = refusal_record(msg, turn_id=turn_id, outcome=outcome, note=note, at=time.time(),
                            question_chars=question_chars)
    try:
        async with asyncio.timeout(REFUSAL_WRITE_TIMEOUT_S):
            await store.record_audit(record)
    except Exception as exc:  # TimeoutError included
        log.warning("audit.refusal_not_recorded", outcome=outcome, error=type(exc).__name__)
