"""Clear words: "clear" forgets the conversation's history, unless a turn is still using it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict, matches
from botgateway.turns.checks.base import admission_log as log

__all__ = ["ClearWords"]


class ClearWords:
    """Answers a clear word by forgetting the conversation's history when no turn of it is scheduled here.

    Args:
        words: The clear words (``gateway.clear_words``).
        line: The turns of a conversation scheduled in this process (running first, then waiting).
        clear_history: Forgets a conversation's history.
    """

    def __init__(
        self, words: Sequence[str], *, line: Callable[[str], Sequence[object]],
        clear_history: Callable[[str], Awaitable[None]],
    ) -> None:
        self._words = words
        self._line = line
        self._clear_history = clear_history

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it is a clear word: then whether the history was cleared."""
        if not matches(msg.text, self._words):
            return msg
        locale = msg.target.locale
        if self._line(msg.conversation_id):
            return Verdict.refusal(t(locale, "clear_busy"))
        try:
            await self._clear_history(msg.conversation_id)
        except Exception as exc:
            log.warning("gateway.clear_failed", conversation=msg.conversation_id, error=type(exc).__name__)
            return Verdict.refusal(t(locale, "clear_failed", reason=type(exc).__name__))
        log.info("gateway.cleared", conversation=msg.conversation_id, user=msg.ctx.user_id)
        return Verdict.answered(t(locale, "cleared"), status="cleared")
