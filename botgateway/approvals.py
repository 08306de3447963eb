"""Approvals waiting for a person: the desk where calls wait and approvers decide.

A call that needs an approval (:attr:`~botgateway.grant.Grant.approval`) is put
on the :class:`ApprovalDesk` under a short numeric code; its card shows the code
with Approve and Deny buttons, and approvers may also type ``approve 4821``.
The gateway checks *who* decides (only an approver, :meth:`Gateway.decide_approval`);
the desk only matches a decision to the waiting call. It is in-process: a
decision must reach the process running the turn, which it does as long as one
process serves the platform (a fleet shares it through Redis, later).

The turn side, waiting with the turn's deadline paused, is
:mod:`botgateway.approval_gate`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from botgateway.principal import Principal

__all__ = ["CODE_QUARANTINE_S", "MAX_PENDING", "ApprovalDesk", "ApprovalRequest", "ApprovalVote", "DeskAnswer", "PendingApproval"]

MAX_PENDING = 1000
"""Approvals waiting at once, at most; a call past it is denied at once (codes stay short and unguessable enough)."""

CODE_QUARANTINE_S = 3600.0
"""A code is not handed out again for this long after its approval ended, so a late ``approve 4821`` finds
nothing instead of deciding someone else's call."""

_MAX_QUARANTINED = 9000 - MAX_PENDING - 1000
"""Codes kept out of use at most, so that a free 4-digit code is always found quickly."""

DeskAnswer: TypeAlias = Literal["decided", "unknown", "not_approver", "own_request"]
"""What became of a decision: it ended the wait, no such approval waits, or the decider may not decide it."""


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """A call waiting for an approval: what would run, for whom, where."""

    code: str
    """Short numeric code shown on the card (``4821``)."""
    token: str
    """A random token the buttons carry besides the code: a press decides this request and no other."""
    turn_id: str
    """The turn the call belongs to."""
    call_id: str
    """The call within the turn."""
    tool: str
    """The tool that would run."""
    arguments: Mapping[str, Any]
    """Its arguments."""
    asker: Principal
    """Who asked the question."""
    channel: str
    """Qualified id of the channel the card is in (where approvers decide)."""
    direct: bool = False
    """The question was asked in a 1:1 chat."""


@dataclass(frozen=True, kw_only=True)
class ApprovalVote:
    """One approver's decision."""

    approved: bool
    """Approve (True) or deny."""
    by: Principal
    """Who decided."""


@dataclass(frozen=True)
class PendingApproval:
    """A request on the desk and the future its decision resolves."""

    request: ApprovalRequest
    """What waits."""
    vote: asyncio.Future[ApprovalVote] = field(compare=False)
    """Resolves with the first decision."""


class ApprovalDesk:
    """Pending approvals by code (mutable; one per process, owned by the composition root)."""

    def __init__(self, *, codes: Callable[[], str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``codes`` makes a candidate code (tests pass a fixed sequence); default: 4 random digits."""
        self._codes = codes or (lambda: str(1000 + secrets.randbelow(9000)))
        self._clock = clock
        self._pending: dict[str, PendingApproval] = {}
        self._ended: dict[str, float] = {}  # code → when its approval ended (quarantined until CODE_QUARANTINE_S later)

    def __len__(self) -> int:
        return len(self._pending)

    def open(self, **request: Any) -> PendingApproval | None:
        """Put a request on the desk (fields of :class:`ApprovalRequest` but ``code``); ``None`` when the desk is full."""
        if len(self._pending) >= MAX_PENDING:
            return None
        self._forget_old_codes()
        code = self._codes()
        while code in self._pending or code in self._ended:
            code = self._codes()
        token = secrets.token_urlsafe(9)
        pending = PendingApproval(ApprovalRequest(code=code, token=token, **request), asyncio.get_running_loop().create_future())
        self._pending[code] = pending
        return pending

    def close(self, pending: PendingApproval) -> None:
        """Take ``pending`` off the desk (decided, timed out, or its turn ended); later decisions find nothing.

        Only that request: its code may not be taken away from another one.
        """
        code = pending.request.code
        if self._pending.get(code) is pending:
            del self._pending[code]
        self._ended[code] = self._clock()

    def _forget_old_codes(self) -> None:
        """Codes out of quarantine may be handed out again; so may the oldest when too few would be left."""
        cutoff = self._clock() - CODE_QUARANTINE_S
        for code in [c for c, at in self._ended.items() if at < cutoff]:
            del self._ended[code]
        while self._ended and len(self._ended) > _MAX_QUARANTINED:
            del self._ended[next(iter(self._ended))]  # oldest first: dicts keep insertion order

    def waiting(self, code: str) -> ApprovalRequest | None:
        """The request waiting under ``code`` and not decided yet, if any."""
        pending = self._pending.get(_normal(code))
        return pending.request if pending is not None and not pending.vote.done() else None

    def decide(self, code: str, vote: ApprovalVote, *, token: str | None = None) -> DeskAnswer:
        """Resolve the request waiting under ``code`` with ``vote`` (the caller checked the decider may).

        ``token``: a button's token, which must be the request's (a typed vote has none).
        """
        pending = self._pending.get(_normal(code))
        if pending is None or pending.vote.done() or (token is not None and token != pending.request.token):
            return "unknown"
        pending.vote.set_result(vote)
        return "decided"


def _normal(code: str) -> str:
    return code.strip().lstrip("#")
