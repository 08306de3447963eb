"""Question size: a question longer than ``gateway.max_question_chars`` is refused (audited), saying what fits."""

from __future__ import annotations

from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["QuestionSize"]


class QuestionSize:
    """Refuses a question of more than ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        self._limit = limit

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it is too long."""
        limit = self._limit
        if len(msg.text) <= limit:
            return msg
        # One huge question would be sent again with every later turn of the conversation.
        log.info("gateway.too_long", platform=msg.platform, user=msg.ctx.user_id, chars=len(msg.text), limit=limit)
        note = t(msg.target.locale, "question_too_long", length=len(msg.text), limit=limit)
        return Verdict.refusal(note, audit="refused:too_long")
