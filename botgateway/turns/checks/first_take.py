"""A moved question's first take: the fleet's queue delivers at least once, so only the first process to take a
moved question answers it (an entry read again after a failed acknowledgement, or claimed from a process that died
before acknowledging it, is dropped)."""

from __future__ import annotations

from botgateway.messages import InboundMessage, Submission
from botgateway.stores.base import ClaimStore
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["FirstTake"]


class FirstTake:
    """Drops a moved question (by its turn id) already taken, claimed in ``store`` for ``ttl_s``."""

    def __init__(self, store: ClaimStore, ttl_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless a process took turn ``turn_id`` before."""
        try:
            first = await self._store.claim(f"moved:{turn_id}", self._ttl_s)
        except Exception as exc:  # answering twice beats never answering
            log.warning("gateway.dedupe_unavailable", error=type(exc).__name__, detail=str(exc)[:200])
            first = True
        if first:
            return msg
        log.info("gateway.moved_duplicate", turn_id=turn_id, conversation=msg.conversation_id)
        return Verdict.done(Submission(status="duplicate", turn_id=turn_id))
