"""Refresh words: "refresh" asks the conversation's newest answered question again (:mod:`~botgateway.answers`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from botgateway.answers import REFRESH_WORDS
from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict, matches

__all__ = ["RefreshWords"]


class RefreshWords:
    """Replaces a refresh word with the question it refreshes, asked again by its sender.

    Args:
        again: The newest answer's question as the sender's message, caches bypassed, or the note why there is
            nothing to refresh (:meth:`Refresher.again`).
    """

    def __init__(self, again: Callable[[InboundMessage], Awaitable[InboundMessage | str]]) -> None:
        self._again = again

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, or the question it refreshes; the note when there is none to refresh."""
        if not matches(msg.text, REFRESH_WORDS):
            return msg
        again = await self._again(msg)
        return Verdict.refusal(again) if isinstance(again, str) else again
