"""Admission: what becomes of a message before it is a turn.

In order: a redelivery is dropped (dedupe by message id), a stop or clear word
is acted on, a process that is closing refuses, a reply giving a 👎 its reason
is recorded (:mod:`botgateway.answers.feedback`), a refresh word becomes the conversation's
newest question again (:mod:`botgateway.answers.refresh`), the access hook and then the
configured policy decide (an ``approve 4821`` reply is counted as a vote,
``/whoami`` answered), and a question too long or over its asker's limits is
refused. Every refusal of a question is audited before its asker is told: by
the access hook or the policy, for its size, by a closing process, or by a
limit. What passes is :class:`Admitted`: the message
with its access decision, counted against its asker's limits under a new turn
id, for the scheduler (:mod:`botgateway.turns.scheduler`), its card marked as a typed
question's (:func:`botgateway.answers.book.as_question`: its answer offers Refresh and 👍 / 👎).

A question another process of the fleet moved here as it drained was admitted
there: :meth:`Admission.admit_moved` only checks that it is not too old.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import structlog

from botgateway.access import AccessHook, decide_message, place_of, with_decision
from botgateway.alerts.context import quoted_conversation
from botgateway.answers import as_question
from botgateway.approvals import parse_command
from botgateway.access import write_refusal
from botgateway.config import Config
from botgateway.answers import FeedbackDesk
from botgateway.fleet import Ballot
from botgateway.fleet.handoff import MovedQuestion
from botgateway.grant import Limits
from botgateway.access import PrincipalLimits, asker_of
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.access import decide_as_role, effective_policy
from botgateway.turns.queues import ConversationQueues
from botgateway.answers import REFRESH_WORDS, Refresher
from botgateway.turns.replies import Replies
from botgateway.sink import CardSink
from botgateway.stores.base import Store
from botgateway.strings import t
from botgateway.turns.control import TurnControl
from botgateway.access import WHOAMI_WORDS, describe, refusal_note

__all__ = ["Admission", "Admitted"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """A question admitted as a turn."""

    msg: InboundMessage
    """The question, with its access decision (principal, grant, roles) on its tool context."""
    turn_id: str
    """The turn's id: its place in the asker's limits is held under it."""


def _matches(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` is exactly one of ``words`` (case and trailing punctuation ignored)."""
    normalized = text.strip().strip("!.。！ ").casefold()
    return bool(normalized) and normalized in {w.casefold() for w in words}


class Admission:
    """Dedupe, stop and clear words, access, limits and refusals: a message in, a turn or an answer out.

    Args:
        store: Dedupe claims and audit records of refusals.
        config: The ``gateway``, ``memory``, ``limits`` and ``access`` sections.
        access: The custom access hook, asked before the configured policy.
        tool_names: The tools that exist now (read per message: MCP servers add tools as they come up).
        always_approve: The tools that ask for an approval of every call themselves.
        votes: Whether an ``approve 4821`` reply is a vote (an approval desk exists), else a question like any other.
        control: Stops and votes, applied here or in the process that holds the turn or the approval.
        queues: This process's scheduled turns (a clear waits for the conversation to be idle).
        limits: The askers' limits a question is counted against.
        replies: How a message is answered with a note instead of a turn.
        clear_history: Forgets a conversation's history (``None``: clear words are questions like any other).
        refresher: Turns a refresh word into the conversation's newest question (``None``: a question like any other).
        feedback: Records a reply giving a 👎 its reason (``None``: such a reply is a question like any other).
    """

    def __init__(
        self,
        *,
        store: Store,
        config: Config,
        access: AccessHook,
        tool_names: Callable[[], Iterable[str]],
        always_approve: Callable[[], Iterable[str]],
        votes: bool,
        control: TurnControl,
        queues: ConversationQueues,
        limits: PrincipalLimits,
        replies: Replies,
        clear_history: Callable[[str], Awaitable[None]] | None,
        refresher: Refresher | None = None,
        feedback: FeedbackDesk | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._access = access
        self._policy = effective_policy(config.access)
        self._tool_names = tool_names
        self._always_approve = always_approve
        self._votes = votes
        self._control = control
        self._queues = queues
        self._limits = limits
        self._replies = replies
        self._clear_history = clear_history
        self._refresher = refresher
        self._feedback = feedback
        self._limit_defaults = Limits(turns_per_minute=config.limits.turns_per_minute,
                                      concurrent_turns=config.limits.concurrent_turns,
                                      tokens_per_day=config.limits.tokens_per_day)
        self._closing = False

    def close(self) -> None:
        """Refuse every question from now on, saying the bot is shutting down (stop and clear words still work)."""
        self._closing = True

    async def first_delivery(self, platform: str, message_id: str) -> bool:
        """True the first time a platform delivers ``message_id`` (within the dedupe TTL)."""
        if not message_id:
            return True
        try:
            first = await self._store.claim(f"{platform}:{message_id}", self._config.memory.dedupe_ttl_s)
        except Exception as exc:  # answering twice beats never answering
            log.warning("gateway.dedupe_unavailable", error=type(exc).__name__, detail=str(exc)[:200])
            return True
        if not first:
            log.info("gateway.duplicate", platform=platform, message_id=message_id)
        return first

    async def admit(self, msg: InboundMessage, sink: CardSink) -> Admitted | Submission:
        """Admit ``msg`` as a turn, or answer it here (a duplicate, a stop, a refusal, a note)."""
        locale = msg.target.locale
        if not await self.first_delivery(msg.platform, msg.message_id):
            return Submission(status="duplicate", turn_id="")

        if _matches(msg.text, self._config.gateway.stop_words):
            return await self._stop_from_message(msg, sink)

        if self._clear_history is not None and _matches(msg.text, self._config.gateway.clear_words):
            return await self._clear_from_message(msg, sink)

        if self._closing:
            note = t(locale, "shutting_down")
            await self._audit(msg, outcome="refused:shutting_down", note=note)
            return self._replies.refuse(msg, sink, note)

        if self._feedback is not None and not msg.ctx.fresh:
            noted = await self._feedback.typed_reason(msg)  # "reason …" after a 👎 that waits for one
            if noted is not None:
                return self._replies.tell(msg, sink, noted, status="feedback", private=True)

        if self._refresher is not None and _matches(msg.text, REFRESH_WORDS):
            again = await self._refresher.again(msg)  # the newest answer's question, asked again by this asker
            if isinstance(again, str):
                return self._replies.refuse(msg, sink, again)
            msg = again

        msg = await quoted_conversation(self._store, msg)  # a quoted alert card's conversation holds its context
        decided = await self._decide(msg, sink)
        if isinstance(decided, Submission):
            return decided
        msg = decided

        limit = self._config.gateway.max_question_chars
        if len(msg.text) > limit:
            # One huge question would be sent again with every later turn of the conversation.
            log.info("gateway.too_long", platform=msg.platform, user=msg.ctx.user_id, chars=len(msg.text), limit=limit)
            note = t(locale, "question_too_long", length=len(msg.text), limit=limit)
            await self._audit(msg, outcome="refused:too_long", note=note)
            return self._replies.refuse(msg, sink, note)

        turn_id = uuid.uuid4().hex[:16]
        limited = await self._over_limit(msg, sink, turn_id)
        if limited is not None:
            return limited
        # A typed question's answer offers Refresh and 👍 / 👎 (the mark travels with a question moved elsewhere).
        return Admitted(msg=as_question(msg), turn_id=turn_id)

    async def admit_moved(self, moved: MovedQuestion, sink: CardSink) -> Admitted | Submission:
        """Admit a question moved here by a draining process, unless it waited past ``gateway.handoff_max_age_s``.

        It was admitted there: no dedupe claim here (its delivery claimed it, and a claim would refuse the same
        message) and no second count against its asker's limits (its place is held under its turn id, kept). One
        moved too long ago ends its place in the limits and asks its asker to ask again.
        """
        msg, locale = moved.msg, moved.msg.target.locale
        age_s = time.time() - moved.moved_at
        if age_s > self._config.gateway.handoff_max_age_s:
            log.warning("gateway.moved_too_old", turn_id=moved.turn_id, conversation=msg.conversation_id,
                        age_s=round(age_s, 1), moved_by=moved.moved_by)
            note = t(locale, "moved_expired")
            await self._limits.turn_ended(asker_of(msg), moved.turn_id, 0)
            await self._audit(msg, turn_id=moved.turn_id, outcome="expired", note=note)
            return self._replies.refuse(msg, sink, note)
        if not await self._first_take(moved):
            log.info("gateway.moved_duplicate", turn_id=moved.turn_id, conversation=msg.conversation_id)
            return Submission(status="duplicate", turn_id=moved.turn_id)
        log.info("gateway.taken_over", turn_id=moved.turn_id, conversation=msg.conversation_id,
                 moved_by=moved.moved_by, age_s=round(age_s, 3))
        return Admitted(msg=msg, turn_id=moved.turn_id)

    async def _first_take(self, moved: MovedQuestion) -> bool:
        """True the first time any process takes this moved question (the queue delivers at least once: an entry
        read again after a failed acknowledgement, or claimed from a process that died before acknowledging it)."""
        try:
            return await self._store.claim(f"moved:{moved.turn_id}", 2 * self._config.gateway.handoff_max_age_s)
        except Exception as exc:  # answering twice beats never answering
            log.warning("gateway.dedupe_unavailable", error=type(exc).__name__, detail=str(exc)[:200])
            return True

    async def _decide(self, msg: InboundMessage, sink: CardSink) -> InboundMessage | Submission:
        """The access hook, then the configured policy: ``msg`` with its decision, or the answer that ends it here."""
        locale = msg.target.locale
        try:
            refusal = await self._access(msg)
        except Exception as exc:
            log.error("gateway.access_hook_failed", error=type(exc).__name__)
            refusal = "the access check failed; please try again later"
        if refusal is not None:
            log.info("gateway.refused", platform=msg.platform, user=msg.ctx.user_id, reason=refusal)
            await self._audit(msg, outcome="refused", note=refusal)
            return self._replies.refuse(msg, sink, t(locale, "refused", reason=refusal))

        command = parse_command(msg.text)
        if command is not None and self._votes:
            # Typed where the card is: a vote from any other chat counts for nothing.
            ballot = Ballot(code=command.code, principal=msg.asker, approved=command.approved, locale=locale,
                            channel=place_of(msg).channel)
            result = await self._control.vote(ballot)
            return self._replies.tell(msg, sink, result.note, status="approval", private=result.answer != "decided")

        # The configured policy always applies, after any custom hook; a refused asker costs no model request.
        decision = decide_message(self._policy, msg, self._tool_names(), limits=self._limit_defaults,
                                  always_approve=self._always_approve())
        if _matches(msg.text, WHOAMI_WORDS):
            return self._replies.tell(msg, sink, describe(decision, locale), status="whoami", private=True)
        if not decision.allowed:
            log.info("gateway.refused", platform=msg.platform, principal=decision.principal.id, reason=decision.refusal)
            note = refusal_note(decision, locale)
            await self._audit(msg, outcome=f"refused:{decision.refusal}", note=note)
            return self._replies.refuse(msg, sink, t(locale, "refused", reason=note))
        return with_decision(msg, decision)

    async def admit_unprompted(
        self, msg: InboundMessage, role: str, *, tools: frozenset[str] | None = None
    ) -> Admitted | Submission:
        """Admit a turn nobody typed (an alert's investigation, a scheduled report) as ``role``, over ``tools`` only
        when given (an investigation's read-only tools).

        Its principal is the gateway's own (``alerts:<route>``, ``schedule:<name>``), so the custom access hook is not
        asked; the policy's role, the channel's guardrail, the limits and the audit apply as to anyone. Nobody waits
        for a note in the channel: a refusal is returned, not posted (the caller shows it where it belongs).
        """
        locale = msg.target.locale
        if self._closing:
            note = t(locale, "shutting_down")
            await self._audit(msg, outcome="refused:shutting_down", note=note)
            return Submission(status="refused", turn_id="", message=note)
        names = [n for n in self._tool_names() if tools is None or n in tools]
        decision = decide_as_role(self._policy, msg.asker, place_of(msg), names, role,
                                  limits=self._limit_defaults, always_approve=self._always_approve())
        if not decision.allowed:
            note = refusal_note(decision, locale)
            log.warning("gateway.unprompted_refused", principal=msg.asker.id, role=role, reason=decision.refusal)
            await self._audit(msg, outcome=f"refused:{decision.refusal}", note=note)
            return Submission(status="refused", turn_id="", message=note)
        msg = with_decision(msg, decision)
        turn_id = uuid.uuid4().hex[:16]
        note = await self._limit_hit(msg, turn_id)
        if note is not None:
            return Submission(status="refused", turn_id=turn_id, message=note)
        return Admitted(msg=msg, turn_id=turn_id)

    async def _audit(self, msg: InboundMessage, *, outcome: str, note: str, turn_id: str = "") -> None:
        """Record ``msg`` as turned away (``outcome``, and ``note``, what its asker is told), under ``turn_id`` or a
        new id; the question is kept up to ``gateway.max_question_chars``, the most a turn would have kept."""
        await write_refusal(self._store, msg, turn_id=turn_id or uuid.uuid4().hex[:16], outcome=outcome, note=note,
                            question_chars=self._config.gateway.max_question_chars)

    async def _over_limit(self, msg: InboundMessage, sink: CardSink, turn_id: str) -> Submission | None:
        """Count ``msg`` against its asker's limits; the refusal when one is reached (audited, and told), else None."""
        note = await self._limit_hit(msg, turn_id)
        return None if note is None else replace(self._replies.refuse(msg, sink, note), limited=True)

    async def _limit_hit(self, msg: InboundMessage, turn_id: str) -> str | None:
        """Count ``msg`` against its asker's limits; the note of the limit it reached (audited), else None.

        The access decision's grant carries the asker's role limits (the ``limits:`` section fills what a role leaves unset).
        """
        grant = msg.ctx.grant
        hit = await self._limits.admit(asker_of(msg), turn_id, grant.limits if grant is not None else None)
        if hit is None:
            return None
        note = hit.note(msg.target.locale, self._limits.clock())
        log.info("gateway.limit_hit", platform=msg.platform, user=msg.ctx.user_id, limit=hit.limit)
        await self._audit(msg, turn_id=turn_id, outcome=f"limit:{hit.limit}", note=note)
        return note

    async def _stop_from_message(self, msg: InboundMessage, sink: CardSink) -> Submission:
        # "stop" ends the asker's running turn and drops their waiting questions too, in every process
        tally = await self._control.stop_conversation(msg.conversation_id, msg.ctx.user_id or msg.target.user_id)
        if not tally.stopped:
            key = "not_yours" if tally.refused else "stop_unreachable" if tally.unreachable else "nothing_to_stop"
            return self._replies.refuse(msg, sink, t(msg.target.locale, key), status="stopped")
        turn = self._queues.get(tally.stopped[0])
        if turn is not None:
            return Submission(status="stopped", turn_id=turn.turn_id, done=turn.done)
        # Stopped in another process: its card is finished there.
        done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        done.set_result(TurnOutcome(turn_id=tally.stopped[0], outcome="stopped"))
        return Submission(status="stopped", turn_id=tally.stopped[0], done=done)

    async def _clear_from_message(self, msg: InboundMessage, sink: CardSink) -> Submission:
        """Forget the conversation's history, unless a turn is still using it."""
        assert self._clear_history is not None
        locale = msg.target.locale
        if self._queues.line(msg.conversation_id):
            return self._replies.refuse(msg, sink, t(locale, "clear_busy"))
        try:
            await self._clear_history(msg.conversation_id)
        except Exception as exc:
            log.warning("gateway.clear_failed", conversation=msg.conversation_id, error=type(exc).__name__)
            return self._replies.refuse(msg, sink, t(locale, "clear_failed", reason=type(exc).__name__))
        log.info("gateway.cleared", conversation=msg.conversation_id, user=msg.ctx.user_id)
        return self._replies.refuse(msg, sink, t(locale, "cleared"), status="cleared", as_answer=True)
