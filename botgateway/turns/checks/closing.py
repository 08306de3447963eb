"""Closing: a process that is shutting down refuses every question (a stop or clear word, asked before, still works)."""

from __future__ import annotations

from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict

__all__ = ["Closing"]


class Closing:
    """Passes every message until :meth:`close`, then refuses each, saying the bot is shutting down (audited)."""

    def __init__(self) -> None:
        self._closed = False

    def close(self) -> None:
        """Refuse every question from now on."""
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (nothing new starts here any more)."""
        return self._closed

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless the process is closing."""
        if not self._closed:
            return msg
        return Verdict.refusal(t(msg.target.locale, "shutting_down"), audit="refused:shutting_down")
