"""Feedback reasons: a ``reason …`` reply after a 👎 that waits for one is recorded (:mod:`~botgateway.answers`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict

__all__ = ["FeedbackReason"]


class FeedbackReason:
    """Records a typed reason of its sender's recent 👎 and answers them alone.

    Args:
        typed_reason: The note when a message is such a reason (then recorded), else None
            (:meth:`FeedbackDesk.typed_reason`).
    """

    def __init__(self, typed_reason: Callable[[InboundMessage], Awaitable[str | None]]) -> None:
        self._typed_reason = typed_reason

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it gave a waiting 👎 its reason (a conversation's first message never does)."""
        if msg.ctx.fresh:
            return msg
        noted = await self._typed_reason(msg)
        if noted is None:
            return msg
        return Verdict.answered(noted, status="feedback", private=True)
