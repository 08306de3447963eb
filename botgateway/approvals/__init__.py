"""Approvals: the desk where calls that need a person wait, who may decide them, and the turn's gate."""

from __future__ import annotations

from botgateway.approvals.approvers import Approvers, VoteResult, parse_command
from botgateway.approvals.desk import CODE_QUARANTINE_S, MAX_PENDING, ApprovalDesk, ApprovalVote, DeskAnswer
from botgateway.approvals.gate import MAX_SHOWN_ARGUMENTS, ApprovalGate, not_run_reason

__all__ = [
    "CODE_QUARANTINE_S",
    "MAX_PENDING",
    "MAX_SHOWN_ARGUMENTS",
    "ApprovalDesk",
    "ApprovalGate",
    "ApprovalVote",
    "Approvers",
    "DeskAnswer",
    "VoteResult",
    "not_run_reason",
    "parse_command",
]
