"""Dedupe: a platform's redelivery of a message already taken is dropped, unanswered."""

from __future__ import annotations

from botgateway.messages import InboundMessage, Submission
from botgateway.stores.base import ClaimStore
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["FirstDelivery"]


class FirstDelivery:
    """Drops a message id delivered again within ``ttl_s`` (the ``memory.dedupe_ttl_s``), claimed in ``store``."""

    def __init__(self, store: ClaimStore, ttl_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s

    async def first_delivery(self, platform: str, message_id: str) -> bool:
        """True the first time a platform delivers ``message_id`` (within the dedupe TTL)."""
        if not message_id:
            return True
        try:
            first = await self._store.claim(f"{platform}:{message_id}", self._ttl_s)
        except Exception as exc:  # answering twice beats never answering
            log.warning("gateway.dedupe_unavailable", error=type(exc).__name__, detail=str(exc)[:200])
            return True
        if not first:
            log.info("gateway.duplicate", platform=platform, message_id=message_id)
        return first

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless its platform delivered it before."""
        if await self.first_delivery(msg.platform, msg.message_id):
            return msg
        return Verdict.done(Submission(status="duplicate", turn_id=""))
