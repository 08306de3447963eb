"""The turn's side of an approval: a call that needs one waits here before it runs.

:class:`ApprovalGate` puts the call on the :class:`~botgateway.approvals.ApprovalDesk`,
reports :class:`~botgateway.events.ApprovalRequested` (the card shows the
buttons), waits for the first decision or the approval's own timeout, and
reports :class:`~botgateway.events.ApprovalDecided`. While any call of the turn
waits, the turn's deadline is paused: a person reading a card is not the model
being slow. A call that is not approved never runs; the model is told why
(:func:`not_run_reason`) as the call's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack

import structlog

from botgateway.approvals import ApprovalDesk, ApprovalVote
from botgateway.events import ApprovalDecided, ApprovalRequested
from botgateway.principal import Principal, principal_id
from botgateway.tooling import ToolContext

__all__ = ["ApprovalGate", "display_name", "not_run_reason"]

log = structlog.get_logger(__name__)


def display_name(principal: Principal) -> str:
    """How a person is named on a card: ``@name`` when the platform gave one, else the qualified id."""
    return f"@{principal.name}" if principal.name else principal.id


def not_run_reason(decided: ApprovalDecided, timeout_s: float) -> str:
    """What the model (and the card's tool line) is told about a call that was not approved."""
    if decided.verdict == "denied" and decided.by:
        return f"not run: {decided.by} denied this call. Do not try it again; tell the asker it was denied"
    if decided.verdict == "timeout":
        return (f"not run: no approver decided within {timeout_s:g} s, so the call counts as denied. "
                "Tell the asker an approver must be present, then they can ask again")
    return "not run: this call needs an approval, and none can be given here. Tell the asker"


class ApprovalGate:
    """Approvals of one turn's calls (mutable: counts the calls waiting, to pause the deadline once)."""

    def __init__(
        self,
        desk: ApprovalDesk | None,
        *,
        turn_id: str,
        ctx: ToolContext,
        timeout_s: float,
        pause: Callable[[], AbstractContextManager[None]],
    ) -> None:
        """``desk`` ``None``: nowhere to approve (``botgateway ask``), so calls that need one are denied;
        ``pause`` is the turn deadline's :meth:`~botgateway.turn_deadline.TurnDeadline.paused`."""
        self._desk = desk
        self._turn_id = turn_id
        self._ctx = ctx
        self.timeout_s = timeout_s
        """How long a call waits for a decision."""
        self._pause = pause
        self._waiting = 0
        self._paused: ExitStack | None = None

    def needs(self, tool: str) -> bool:
        """Whether a call of ``tool`` must be approved before it runs."""
        grant = self._ctx.grant
        return grant is not None and tool in grant.approval

    async def wait(self, call_id: str, tool: str, arguments: dict[str, object],
                   emit: Callable[[ApprovalRequested | ApprovalDecided], None]) -> ApprovalDecided:
        """Wait for the call's approval, reporting the request and the decision through ``emit``."""
        asker = self._asker()
        pending = None
        if self._desk is not None:
            pending = self._desk.open(turn_id=self._turn_id, call_id=call_id, tool=tool, arguments=dict(arguments),
                                      asker=asker, **_where(self._ctx))
        if pending is None:
            log.info("approval.unavailable", tool=tool, call_id=call_id)
            decided = ApprovalDecided(call_id=call_id, name=tool, code="", verdict="denied")
            emit(decided)
            return decided
        code = pending.request.code
        emit(ApprovalRequested(call_id=call_id, name=tool, code=code, arguments=dict(arguments),
                               asker=display_name(asker), timeout_s=self.timeout_s))
        log.info("approval.requested", tool=tool, call_id=call_id, code=code)
        self._hold()
        try:
            vote = await asyncio.wait_for(asyncio.shield(pending.vote), self.timeout_s)
        except TimeoutError:
            decided = ApprovalDecided(call_id=call_id, name=tool, code=code, verdict="timeout")
        else:
            decided = _decided(call_id, tool, code, vote)
        finally:
            self._desk.close(code)
            self._release()
        log.info("approval.decided", tool=tool, call_id=call_id, code=code, verdict=decided.verdict, by=decided.by_id)
        emit(decided)
        return decided

    def _asker(self) -> Principal:
        ctx = self._ctx
        if ctx.principal is not None:
            return ctx.principal
        return Principal.of(ctx.platform, ctx.user_id or "unknown", name=ctx.user_name)

    def _hold(self) -> None:
        """One more call waits; the first pauses the turn's deadline."""
        self._waiting += 1
        if self._waiting == 1:
            self._paused = ExitStack()
            self._paused.enter_context(self._pause())

    def _release(self) -> None:
        """One call fewer waits; the last resumes the deadline."""
        self._waiting -= 1
        if self._waiting == 0 and self._paused is not None:
            self._paused.close()
            self._paused = None


def _where(ctx: ToolContext) -> dict[str, object]:
    """Where the card with the buttons is: the place approvers decide in."""
    return {"channel": principal_id(ctx.platform, ctx.chat_id), "direct": not ctx.is_group}


def _decided(call_id: str, tool: str, code: str, vote: ApprovalVote) -> ApprovalDecided:
    return ApprovalDecided(call_id=call_id, name=tool, code=code, verdict="approved" if vote.approved else "denied",
                           by=display_name(vote.by), by_id=vote.by.id)
