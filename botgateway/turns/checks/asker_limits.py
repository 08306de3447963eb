"""The asker's limits: a question is counted under its new turn id, or refused (audited) when one is reached."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from botgateway.access import LimitHit, asker_of
from botgateway.access.asker_limits import LimitValues
from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["AskerLimits", "LimitCounts"]


class LimitCounts(Protocol):
    """Where the askers' questions are counted (:class:`botgateway.access.PrincipalLimits`)."""

    @property
    def clock(self) -> Callable[[], float]:
        """The wall clock the windows are cut from."""
        ...

    async def admit(self, principal: str, turn_id: str, limits: LimitValues | None = None) -> LimitHit | None:
        """Count a new question of ``principal`` as ``turn_id``; the limit it hit, if any (then nothing is held)."""
        ...


class AskerLimits:
    """Counts a question against its asker's limits: the access decision's grant carries the asker's role limits
    (the ``limits:`` section fills what a role leaves unset)."""

    def __init__(self, counts: LimitCounts) -> None:
        self._counts = counts

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, now counted as ``turn_id``; or the note of the limit it reached (``limit:<name>``)."""
        grant = msg.ctx.grant
        hit = await self._counts.admit(asker_of(msg), turn_id, grant.limits if grant is not None else None)
        if hit is None:
            return msg
        now = self._counts.clock()
        note = hit.note(msg.target.locale, now)
        log.info("gateway.limit_hit", platform=msg.platform, user=msg.ctx.user_id, limit=hit.limit)
        wait_s = None if hit.resets_at is None else max(0.0, hit.resets_at - now)
        return Verdict.refusal(note, audit=f"limit:{hit.limit}", limited=True, retry_after_s=wait_s)
