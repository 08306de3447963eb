"""The turn's side of an approval: a call that needs one waits here before it runs.

:class:`ApprovalGate` puts the call on the :class:`~botgateway.approvals.desk.ApprovalDesk`,
reports :class:`~botgateway.events.ApprovalRequested` (the card shows the
buttons), waits for the first decision or the approval's own timeout, and
reports :class:`~botgateway.events.ApprovalDecided`. While any call of the turn
waits, the turn's deadline is paused: a person reading a card is not the model
being slow. A call that is not approved never runs; the model is told why
(:func:`not_run_reason`) as the call's result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack

import structlog

from botgateway.approvals.desk import ApprovalDesk, ApprovalVote, PendingApproval
from botgateway.cards.board import shown_arguments
from botgateway.events import ApprovalDecided, ApprovalRequested, ApprovalVerdict
from botgateway.principal import Principal, principal_id
from botgateway.tooling import ToolContext

__all__ = ["MAX_SHOWN_ARGUMENTS", "ApprovalGate", "display_name", "not_run_reason"]

log = structlog.get_logger(__name__)


MAX_SHOWN_ARGUMENTS = 1500
"""Characters of a call's arguments (as JSON) an approver is shown at most; a longer call is denied, since an
approver must see exactly what would run."""

_NAME_MARKUP = re.compile(r"[\[\]()*_`~<>|#\\]")


def display_name(principal: Principal) -> str:
    """How a person is named on a card: ``@name`` when the platform gave one (markup removed), else the qualified id."""
    name = _NAME_MARKUP.sub("", principal.name).strip()
    return f"@{name}" if name else principal.id


def not_run_reason(decided: ApprovalDecided, timeout_s: float) -> str:
    """What the model (and the card's tool line) is told about a call that was not approved."""
    if decided.verdict == "denied":
        return f"not run: {decided.by} denied this call. Do not try it again; tell the asker it was denied"
    if decided.verdict == "timeout":
        return (f"not run: no approver decided within {timeout_s:g} s, so the call counts as denied. "
                "Tell the asker an approver must be present, then they can ask again")
    if decided.verdict == "too_long":
        return (f"not run: its arguments are longer than {MAX_SHOWN_ARGUMENTS} characters, too long to show an "
                "approver. Make the call with shorter arguments, or tell the asker")
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
        ``pause`` is the turn deadline's :meth:`~botgateway.loop.deadline.TurnDeadline.paused`."""
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
        too_long = len(shown_arguments(arguments)) > MAX_SHOWN_ARGUMENTS
        if self._desk is not None and not too_long:
            pending = await self._desk.reserve(turn_id=self._turn_id, call_id=call_id, tool=tool,
                                               arguments=dict(arguments), asker=asker, **_where(self._ctx))
        if pending is None:
            verdict: ApprovalVerdict = "too_long" if too_long else "unavailable"
            log.info("approval.not_possible", tool=tool, call_id=call_id, verdict=verdict)
            decided = ApprovalDecided(call_id=call_id, name=tool, code="", verdict=verdict)
            emit(decided)
            return decided
        code = pending.request.code
        emit(ApprovalRequested(call_id=call_id, name=tool, code=code, token=pending.request.token,
                               arguments=dict(arguments), asker=display_name(asker), timeout_s=self.timeout_s))
        log.info("approval.requested", tool=tool, call_id=call_id, code=code)
        decided = await self._decision(pending, tool)
        log.info("approval.decided", tool=tool, call_id=call_id, code=code, verdict=decided.verdict, by=decided.by_id)
        emit(decided)
        return decided

    async def _decision(self, pending: PendingApproval, tool: str) -> ApprovalDecided:
        """The first vote on ``pending``, or its timeout; the deadline is paused meanwhile."""
        request = pending.request
        assert self._desk is not None
        self._hold()
        try:
            vote = await asyncio.wait_for(asyncio.shield(pending.vote), self.timeout_s)
        except TimeoutError:
            if not pending.vote.done():
                return ApprovalDecided(call_id=request.call_id, name=tool, code=request.code, verdict="timeout")
            vote = pending.vote.result()  # a vote that came with the timeout: the voter was told it counted
        finally:
            self._desk.close(pending)
            self._release()
        return _decided(request.call_id, tool, request.code, vote)

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
