"""Admission: what becomes of a message before it is a turn.

A message goes through admission's checks (:mod:`botgateway.turns.checks`) in their declared order
(:func:`~botgateway.turns.checks.default_checks`): each passes it on, possibly rewritten (a refresh's question, a
quoted alert's conversation, the access decision on its context), or ends it here with a verdict: a refusal or an
answer that needs no turn (a duplicate, a stop or clear word, a vote, ``/whoami``). Admission keeps what every
check shares: a refusal that names an audit outcome is written to the audit trail
(:func:`botgateway.access.write_refusal`) before its asker is told, and the note is sent by
:class:`~botgateway.turns.replies.Replies`. What passes every check is :class:`Admitted`: the message with its access
decision, counted against its asker's limits under a new turn id, for the scheduler
(:mod:`botgateway.turns.scheduler`), its card marked as a typed question's (:func:`botgateway.answers.book.as_question`:
its answer offers Refresh and 👍 / 👎).

A turn nobody typed and a question another process of the fleet moved here as it drained (admitted there) go
through their own, shorter lines of checks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from botgateway.access import write_refusal
from botgateway.answers import as_question
from botgateway.fleet.handoff import MovedQuestion
from botgateway.messages import InboundMessage, Submission
from botgateway.sink import CardSink
from botgateway.stores.base import AuditStore
from botgateway.turns.checks import Check, MovedChecks, UnpromptedChecks, Verdict
from botgateway.turns.checks.base import admission_log as log
from botgateway.turns.replies import Replies

__all__ = ["Admission", "Admitted"]


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """A question admitted as a turn."""

    msg: InboundMessage
    """The question, with its access decision (principal, grant, roles) on its tool context."""
    turn_id: str
    """The turn's id: its place in the asker's limits is held under it."""


class Admission:
    """Runs a message through its checks in order: a turn out, or an answer given here (audited when a refusal).

    Args:
        checks: The checks of a typed message, in order (:func:`~botgateway.turns.checks.default_checks`).
        unprompted: The checks of a turn nobody typed, for a role over some tools.
        moved: The checks of a question moved here by a draining process.
        replies: How a message is answered with a note instead of a turn.
        store: Where the audit records of refusals are written.
        question_chars: The most of a refused question its audit record keeps (``gateway.max_question_chars``, the
            most a turn would have kept).
    """

    def __init__(
        self,
        *,
        checks: Sequence[Check],
        unprompted: UnpromptedChecks,
        moved: MovedChecks,
        replies: Replies,
        store: AuditStore,
        question_chars: int,
    ) -> None:
        self._checks = tuple(checks)
        self._unprompted = unprompted
        self._moved = moved
        self._replies = replies
        self._store = store
        self._question_chars = question_chars

    async def admit(self, msg: InboundMessage, sink: CardSink) -> Admitted | Submission:
        """Admit ``msg`` as a turn, or answer it here (a duplicate, a stop, a refusal, a note)."""
        turn_id = _new_turn_id()
        msg, verdict = await _run(self._checks, msg, turn_id)
        if verdict is not None:
            return await self._answer(msg, sink, verdict, turn_id)
        # A typed question's answer offers Refresh and 👍 / 👎 (the mark travels with a question moved elsewhere).
        return Admitted(msg=as_question(msg), turn_id=turn_id)

    async def admit_moved(self, moved: MovedQuestion, sink: CardSink) -> Admitted | Submission:
        """Admit a question moved here by a draining process, unless it waited past ``gateway.handoff_max_age_s``.

        It was admitted there: no dedupe claim here (its delivery claimed it, and a claim would refuse the same
        message) and no second count against its asker's limits (its place is held under its turn id, kept). One
        moved too long ago ends its place in the limits and asks its asker to ask again.
        """
        age_s = time.time() - moved.moved_at
        msg, verdict = await _run(self._moved(moved), moved.msg, moved.turn_id)
        if verdict is not None:
            return await self._answer(msg, sink, verdict, moved.turn_id)
        log.info("gateway.taken_over", turn_id=moved.turn_id, conversation=msg.conversation_id,
                 moved_by=moved.moved_by, age_s=round(age_s, 3))
        return Admitted(msg=msg, turn_id=moved.turn_id)

    async def admit_unprompted(
        self, msg: InboundMessage, role: str, *, tools: frozenset[str] | None = None
    ) -> Admitted | Submission:
        """Admit a turn nobody typed (an alert's investigation, a scheduled report) as ``role``, over ``tools`` only
        when given (an investigation's read-only tools).

        Its principal is the gateway's own (``alerts:<route>``, ``schedule:<name>``), so the custom access hook is not
        asked; the policy's role, the channel's guardrail, the limits and the audit apply as to anyone. Nobody waits
        for a note in the channel: a refusal is returned, not posted (the caller shows it where it belongs).
        """
        turn_id = _new_turn_id()
        msg, verdict = await _run(self._unprompted(role, tools), msg, turn_id)
        if verdict is None:
            return Admitted(msg=msg, turn_id=turn_id)
        await self._audit(msg, verdict, turn_id)
        # A limit's refusal names the turn its place was asked for; the others name none.
        return Submission(status="refused", turn_id=turn_id if verdict.limited else "", message=verdict.note)

    async def _answer(self, msg: InboundMessage, sink: CardSink, verdict: Verdict, turn_id: str) -> Submission:
        """The submission of a message a check ended: audited first when a refusal, then its note sent."""
        if verdict.submission is not None:
            return verdict.submission
        await self._audit(msg, verdict, turn_id)
        submission = self._replies.refuse(msg, sink, verdict.note, status=verdict.status, as_answer=verdict.answer,
                                          private=verdict.private)
        return replace(submission, limited=True, retry_after_s=verdict.retry_after_s) if verdict.limited else submission

    async def _audit(self, msg: InboundMessage, verdict: Verdict, turn_id: str) -> None:
        """Record ``msg`` as turned away under ``turn_id`` when the verdict names an audit outcome."""
        if verdict.audit:
            await write_refusal(self._store, msg, turn_id=turn_id, outcome=verdict.audit,
                                note=verdict.reason or verdict.note, question_chars=self._question_chars)


async def _run(checks: Sequence[Check], msg: InboundMessage, turn_id: str) -> tuple[InboundMessage, Verdict | None]:
    """Ask ``checks`` in order, each given the message the one before passed on; the first verdict ends it (the
    checks after it are not asked). The message as the last check asked saw it, with that verdict if any."""
    for check in checks:
        passed = await check(msg, turn_id)
        if isinstance(passed, Verdict):
            return msg, passed
        msg = passed
    return msg, None


def _new_turn_id() -> str:
    """A new turn's id: a refusal is audited under it; an admitted question's place in its limits is held under it."""
    return uuid.uuid4().hex[:16]
