"""``/whoami``: the asker is told, privately, who the policy takes them for and what they may do here."""

from __future__ import annotations

from collections.abc import Callable

from botgateway.access import WHOAMI_WORDS, Decision, describe
from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict, matches

__all__ = ["Whoami"]


class Whoami:
    """Answers ``/whoami`` with the policy's decision for its sender, allowed or not.

    Args:
        decide: The policy's decision for a message's asker (:meth:`Decisions.for_message`).
    """

    def __init__(self, decide: Callable[[InboundMessage], Decision]) -> None:
        self._decide = decide

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it is ``/whoami``: then the description of its sender's access here."""
        if not matches(msg.text, WHOAMI_WORDS):
            return msg
        return Verdict.answered(describe(self._decide(msg), msg.target.locale), status="whoami", private=True)
