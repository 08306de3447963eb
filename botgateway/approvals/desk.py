"""Approvals waiting for a person: the desk where calls wait and approvers decide.

A call that needs an approval (:attr:`~botgateway.grant.Grant.approval`) is put
on the :class:`ApprovalDesk` under a short numeric code; its card shows the code
with Approve and Deny buttons, and approvers may also type ``approve 4821``.
The gateway checks *who* decides (only an approver, :meth:`Gateway.decide_approval`);
the desk only matches a decision to the waiting call. The desk is in-process:
in a fleet, its codes are reserved fleet-wide (:class:`SharedCodes`, so no two
processes show the same code at once, and a quarantined code stays unused in
every process), and a decision received by another process is forwarded to this
one (:mod:`botgateway.fleet`), where it is checked as if it came here.

The turn side, waiting with the turn's deadline paused, is
:mod:`botgateway.approvals.gate`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

import structlog

from botgateway.principal import Principal

__all__ = [
    "CODE_QUARANTINE_S",
    "MAX_PENDING",
    "ApprovalDesk",
    "ApprovalRequest",
    "ApprovalVote",
    "DeskAnswer",
    "PendingApproval",
    "SharedCodes",
]

log = structlog.get_logger(__name__)

MAX_PENDING = 1000
"""Approvals waiting at once, at most; a call past it is denied at once (codes stay short and unguessable enough)."""

CODE_QUARANTINE_S = 3600.0
"""A code is not handed out again for this long after its approval ended, so a late ``approve 4821`` finds
nothing instead of deciding someone else's call."""

_MAX_QUARANTINED = 9000 - MAX_PENDING - 1000
"""Codes kept out of use at most, so that a free 4-digit code is always found quickly."""

_CLAIM_ATTEMPTS = 20
"""Codes tried before a request is refused because every one tried is in use elsewhere in the fleet."""

DeskAnswer: TypeAlias = Literal["decided", "unknown", "not_approver", "own_request", "unreachable"]
"""What became of a decision: it ended the wait, no such approval waits, the decider may not decide it, or the
process where it waits did not answer in time."""


class SharedCodes(Protocol):
    """Approval codes reserved across the processes of a fleet (:class:`~botgateway.fleet.directory.FleetDirectory`)."""

    async def claim(self, code: str) -> bool:
        """Reserve ``code`` for this process; False when another process uses it (or used it within the quarantine)."""
        ...

    def release(self, code: str) -> None:
        """The approval under ``code`` ended: keep the code out of use fleet-wide for the quarantine (in the background)."""
        ...


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

    def __init__(
        self, *, codes: Callable[[], str] | None = None, clock: Callable[[], float] = time.monotonic,
        shared: SharedCodes | None = None,
    ) -> None:
        """``codes`` makes a candidate code (tests pass a fixed sequence); default: 4 random digits.
        ``shared``: the fleet's reservations, which :meth:`reserve` and :meth:`close` keep (``None``: one process)."""
        self._codes = codes or (lambda: str(1000 + secrets.randbelow(9000)))
        self._clock = clock
        self._shared = shared
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

    async def reserve(self, **request: Any) -> PendingApproval | None:
        """:meth:`open`, under a code no other process of the fleet uses; ``None`` when none can be had.

        Without ``shared`` it is :meth:`open`. When the fleet's reservations
        cannot be reached, the request is opened anyway (it is decided through
        this process only) and the failure logged.
        """
        for _ in range(_CLAIM_ATTEMPTS):
            pending = self.open(**request)
            if pending is None or self._shared is None:
                return pending
            try:
                if await self._shared.claim(pending.request.code):
                    return pending
            except asyncio.CancelledError:
                self.close(pending)  # the claim may have landed: give it back
                raise
            except Exception as exc:
                log.warning("approval.code_not_shared", code=pending.request.code, error=type(exc).__name__,
                            note="decisions reach this request only through this process")
                return pending
            self._withdraw(pending)  # in use elsewhere: quarantined here too, and not released for its holder
        return None

    def close(self, pending: PendingApproval) -> None:
        """Take ``pending`` off the desk (decided, timed out, or its turn ended); later decisions find nothing.

        Only that request: its code may not be taken away from another one.
        """
        if self._withdraw(pending) and self._shared is not None:
            self._shared.release(pending.request.code)

    def _withdraw(self, pending: PendingApproval) -> bool:
        """Take ``pending`` off the desk and quarantine its code; False when it was not on the desk any more."""
        code = pending.request.code
        mine = self._pending.get(code) is pending
        if mine:
            del self._pending[code]
        self._ended[code] = self._clock()
        return mine

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
