"""A moved question's age: one that waited past ``gateway.handoff_max_age_s`` ends its place in the limits and its
asker is asked to ask again (audited as ``expired``)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from botgateway.access import asker_of
from botgateway.fleet.handoff import MovedQuestion
from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["MovedAge"]


class MovedAge:
    """Refuses ``moved`` when it was moved more than ``max_age_s`` ago.

    Args:
        moved: The question a draining process moved here.
        max_age_s: How long a moved question may wait (``gateway.handoff_max_age_s``).
        turn_ended: Ends a turn's place in its asker's limits (:meth:`PrincipalLimits.turn_ended`).
    """

    def __init__(
        self, moved: MovedQuestion, *, max_age_s: float, turn_ended: Callable[[str, str, int], Awaitable[None]]
    ) -> None:
        self._moved = moved
        self._max_age_s = max_age_s
        self._turn_ended = turn_ended

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it waited too long (then its place in the limits, held as ``turn_id``, is ended)."""
        moved = self._moved
        age_s = time.time() - moved.moved_at
        if age_s <= self._max_age_s:
            return msg
        log.warning("gateway.moved_too_old", turn_id=turn_id, conversation=msg.conversation_id,
                    age_s=round(age_s, 1), moved_by=moved.moved_by)
        note = t(msg.target.locale, "moved_expired")
        await self._turn_ended(asker_of(msg), turn_id, 0)
        return Verdict.refusal(note, audit="expired")
