"""Admission's checks: one module per check, each passing a message on or ending it here, in declared orders."""

from __future__ import annotations

from botgateway.turns.checks.access_hook import AccessHookCheck
from botgateway.turns.checks.as_role import AsRole
from botgateway.turns.checks.asker_limits import AskerLimits, LimitCounts
from botgateway.turns.checks.base import Check, Verdict, matches
from botgateway.turns.checks.clear_words import ClearWords
from botgateway.turns.checks.closing import Closing
from botgateway.turns.checks.decisions import Decisions
from botgateway.turns.checks.dedupe import FirstDelivery
from botgateway.turns.checks.defaults import (
    MovedChecks,
    UnpromptedChecks,
    default_checks,
    moved_checks,
    unprompted_checks,
)
from botgateway.turns.checks.feedback_reason import FeedbackReason
from botgateway.turns.checks.first_take import FirstTake
from botgateway.turns.checks.moved_age import MovedAge
from botgateway.turns.checks.policy import AccessPolicy
from botgateway.turns.checks.question_size import QuestionSize
from botgateway.turns.checks.quoted_alert import QuotedAlert
from botgateway.turns.checks.refresh_words import RefreshWords
from botgateway.turns.checks.stop_words import StopWords
from botgateway.turns.checks.votes import Votes
from botgateway.turns.checks.whoami import Whoami

__all__ = [
    "AccessHookCheck",
    "AccessPolicy",
    "AsRole",
    "AskerLimits",
    "Check",
    "ClearWords",
    "Closing",
    "Decisions",
    "FeedbackReason",
    "FirstDelivery",
    "FirstTake",
    "LimitCounts",
    "MovedAge",
    "MovedChecks",
    "QuestionSize",
    "QuotedAlert",
    "RefreshWords",
    "StopWords",
    "UnpromptedChecks",
    "Verdict",
    "Votes",
    "Whoami",
    "default_checks",
    "matches",
    "moved_checks",
    "unprompted_checks",
]
