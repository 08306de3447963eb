"""Quoted alerts: a message quoting an alert card is asked in that alert's conversation, which holds its context."""

from __future__ import annotations

from botgateway.alerts.context import quoted_conversation
from botgateway.messages import InboundMessage
from botgateway.stores.base import DocumentStore
from botgateway.turns.checks.base import Verdict

__all__ = ["QuotedAlert"]


class QuotedAlert:
    """Moves a message into the conversation of the alert card it quotes (:func:`quoted_conversation`); passes all."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, in the quoted alert's conversation when it quotes one posted in the same chat."""
        return await quoted_conversation(self._store, msg)
