"""Admission's declared orders: the checks a typed message, a turn nobody typed and a moved question go through.

The one place the order is written. A new check is a new module of this package, placed here (or, for a
deployment's own, inserted by the ``checks`` argument of :class:`botgateway.gateway.Gateway`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from botgateway.access import AccessHook
from botgateway.answers import FeedbackDesk, Refresher
from botgateway.config import GatewayConfig
from botgateway.fleet.handoff import MovedQuestion
from botgateway.stores.base import ClaimStore, DocumentStore
from botgateway.turns.checks.access_hook import AccessHookCheck
from botgateway.turns.checks.as_role import AsRole
from botgateway.turns.checks.asker_limits import AskerLimits, LimitCounts
from botgateway.turns.checks.base import Check
from botgateway.turns.checks.clear_words import ClearWords
from botgateway.turns.checks.closing import Closing
from botgateway.turns.checks.decisions import Decisions
from botgateway.turns.checks.dedupe import FirstDelivery
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
from botgateway.turns.control import TurnControl
from botgateway.turns.queues import ConversationQueues

__all__ = ["MovedChecks", "UnpromptedChecks", "default_checks", "moved_checks", "unprompted_checks"]

UnpromptedChecks: TypeAlias = Callable[[str, frozenset[str] | None], tuple[Check, ...]]
"""The checks of a turn nobody typed, run as a role over some tools (all when ``None``)."""

MovedChecks: TypeAlias = Callable[[MovedQuestion], tuple[Check, ...]]
"""The checks of a question a draining process moved here."""


def default_checks(
    *,
    config: GatewayConfig,
    store: DocumentStore,
    deliveries: FirstDelivery,
    closing: Closing,
    access: AccessHook,
    decisions: Decisions,
    control: TurnControl,
    queues: ConversationQueues,
    limits: LimitCounts,
    votes: bool,
    clear_history: Callable[[str], Awaitable[None]] | None,
    refresher: Refresher | None,
    feedback: FeedbackDesk | None,
) -> tuple[Check, ...]:
    """The checks of a typed message, in order: a redelivery dropped, a stop or clear word acted on, a closing
    process refusing, a 👎's reason recorded, a refresh word made the newest question again, a quoted alert's
    conversation taken, the access hook and then the policy deciding (a vote counted, ``/whoami`` answered), and a
    question too long or over its asker's limits refused.

    ``votes``: an ``approve 4821`` reply is a vote (an approval desk exists), else a question like any other; likewise
    without ``clear_history`` a clear word, without ``refresher`` a refresh word, without ``feedback`` a reason.
    """
    line: tuple[Check | None, ...] = (
        deliveries,
        StopWords(config.stop_words, stop=control.stop_conversation, turn_here=queues.get),
        None if clear_history is None else ClearWords(config.clear_words, line=queues.line,
                                                      clear_history=clear_history),
        closing,
        None if feedback is None else FeedbackReason(feedback.typed_reason),
        None if refresher is None else RefreshWords(refresher.again),
        QuotedAlert(store),
        AccessHookCheck(access),
        Votes(control.vote) if votes else None,
        Whoami(decisions.for_message),
        AccessPolicy(decisions.for_message),
        QuestionSize(config.max_question_chars),
        AskerLimits(limits),
    )
    return tuple(check for check in line if check is not None)


def unprompted_checks(*, closing: Closing, decisions: Decisions, limits: LimitCounts) -> UnpromptedChecks:
    """The checks of a turn nobody typed (its principal is the gateway's own, so no hook is asked): a closing process
    refusing, the policy's decision for its role, and its principal's limits."""
    counted = AskerLimits(limits)

    def line(role: str, tools: frozenset[str] | None) -> tuple[Check, ...]:
        return (closing, AsRole(decisions.as_role, role, tools), counted)

    return line


def moved_checks(
    *, store: ClaimStore, turn_ended: Callable[[str, str, int], Awaitable[None]], max_age_s: float
) -> MovedChecks:
    """The checks of a question moved here (admitted where it was asked): not too old, and not taken before."""
    taken = FirstTake(store, 2 * max_age_s)

    def line(moved: MovedQuestion) -> tuple[Check, ...]:
        return (MovedAge(moved, max_age_s=max_age_s, turn_ended=turn_ended), taken)

    return line
