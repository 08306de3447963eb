"""Who may decide an approval: the check behind every Approve/Deny button and ``approve 4821`` reply.

An approval is decided where its card is: the decider's access is evaluated in
the card's channel, and only a role with ``approve: true`` there may decide
(with ``access.approvals.four_eyes``, never their own request). Anyone else is
told so privately, and the call keeps waiting. Every vote, counted or not, is
logged; the counted one is audited with the call (:mod:`botgateway.turns.turn`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from botgateway.access import Place, decide
from botgateway.approvals.desk import ApprovalDesk, ApprovalVote, DeskAnswer
from botgateway.config.access import AccessConfig
from botgateway.principal import Principal
from botgateway.strings import t

__all__ = ["ApprovalCommand", "Approvers", "VoteResult", "parse_command"]

log = structlog.get_logger(__name__)

_COMMAND = re.compile(r"^\s*(approve|deny|批准|同意|拒绝)\s*#?\s*(\d{4})\s*[.!。！]?\s*$", re.IGNORECASE)
_APPROVING = frozenset({"approve", "批准", "同意"})


@dataclass(frozen=True)
class ApprovalCommand:
    """A typed decision: ``approve 4821`` / ``deny 4821`` (``批准 4821`` / ``拒绝 4821``)."""

    code: str
    """The approval's code."""
    approved: bool
    """Approve (True) or deny."""


def parse_command(text: str) -> ApprovalCommand | None:
    """The decision ``text`` types, or ``None`` when it is not one (a question that mentions approving is not)."""
    match = _COMMAND.match(text)
    if match is None:
        return None
    return ApprovalCommand(code=match.group(2), approved=match.group(1).casefold() in _APPROVING)


@dataclass(frozen=True)
class VoteResult:
    """What became of one vote."""

    answer: DeskAnswer
    """decided, unknown, not_approver or own_request."""
    note: str
    """What the decider is told (privately where the platform allows)."""


class Approvers:
    """Checks a vote against the access policy and hands it to the desk."""

    def __init__(self, desk: ApprovalDesk, policy: AccessConfig, tools: Callable[[], Iterable[str]]) -> None:
        """``tools`` names the tools that exist now (the decision is the same one the policy makes for questions)."""
        self.desk = desk
        """Where calls wait."""
        self._policy = policy
        self._tools = tools

    def vote(
        self, code: str, principal: Principal, *, approved: bool, locale: str, channel: str | None = None,
        token: str | None = None,
    ) -> VoteResult:
        """Count ``principal``'s decision on approval ``code`` if they may decide it.

        A typed vote names the ``channel`` it was typed in: it counts only there, where the card is. A button
        carries the request's ``token``. Either way the voter must be of the asker's platform.
        """
        request = self.desk.waiting(code)
        if (request is None or principal.platform != request.asker.platform
                or (channel is not None and channel != request.channel)):
            return self._result("unknown", code, principal, locale)
        place = Place(channel=request.channel, direct=request.direct)
        grant = decide(self._policy, principal, place, self._tools()).grant
        if grant is None or not grant.approver:
            return self._result("not_approver", code, principal, locale)
        if self._policy.approvals.four_eyes and principal.id == request.asker.id:
            return self._result("own_request", code, principal, locale)
        answer = self.desk.decide(code, ApprovalVote(approved=approved, by=principal), token=token)
        return self._result(answer, code, principal, locale, approved=approved)

    @staticmethod
    def _result(answer: DeskAnswer, code: str, principal: Principal, locale: str, *, approved: bool = False) -> VoteResult:
        log.info("approval.vote", code=code, principal=principal.id, answer=answer, approved=approved)
        if answer == "decided":
            verdict = t(locale, "approval_verdict_approved" if approved else "approval_verdict_denied")
            return VoteResult(answer, t(locale, "approval_recorded", code=code, verdict=verdict))
        key = {"unknown": "approval_unknown", "not_approver": "approval_not_approver", "own_request": "approval_own_request"}[answer]
        return VoteResult(answer, t(locale, key, code=code))
