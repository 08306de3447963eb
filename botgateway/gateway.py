"""The gateway: from an adapter's inbound message to one finished card.

Every adapter hands its parsed messages to :meth:`Gateway.submit`, which
returns at once (platforms want an ack within seconds). The gateway is the
small façade the adapters and the composition root call; the work is done by
one module per idea:

- :mod:`botgateway.turns.admission`: a message through its checks in their declared
  order (:mod:`botgateway.turns.checks`: dedupe, stop and clear words, access, the
  asker's limits, …), and the refusals (:mod:`botgateway.turns.replies` sends the notes);
- :mod:`botgateway.turns.scheduler`: one turn at a time per conversation, later
  questions waiting in a short line, each turn run in a task the gateway owns
  (never the caller's: DingTalk's SDK cancels its handler tasks when its socket
  drops) so that whatever happens to it, its card is finished;
- :mod:`botgateway.turns.control`: stops and approval votes, applied here or, in
  a fleet, in the process that holds the turn or the approval;
- :mod:`botgateway.turns.drain`: a stopping process's turns waited for, or its waiting
  questions moved to the fleet (:mod:`botgateway.turns.moves`), which takes them
  with :meth:`Gateway.take_over`;
- :mod:`botgateway.answers.book`, :mod:`botgateway.answers.refresh`, :mod:`botgateway.answers.feedback`:
  the finished answers on record, their Refresh (:meth:`Gateway.refresh`) and the
  votes on them (:meth:`Gateway.vote`, :meth:`Gateway.feedback_reason`).

Several processes on one Redis (a ``fleet``) behave as one: a turn also takes
its conversation's lease before it runs, so one turn per conversation holds
across processes. If the whole process dies, its cards stay on record as open,
owned by its instance id, and :mod:`botgateway.cards.recovery` closes them (from this
process's heartbeats, other replicas know it is gone), or runs their questions again
into them, once (:mod:`botgateway.turns.resume`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from botgateway.access import AccessHook, PrincipalLimits, allow_all, effective_policy, limits_from_config
from botgateway.answers import Answer, AnswerBook, FeedbackDesk, Refresher, Vote
from botgateway.approvals import ApprovalDesk, Approvers, VoteResult
from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.factory import CardFactory
from botgateway.cards.recovery import Recovery
from botgateway.config import Config
from botgateway.events import EventListener
from botgateway.fleet import Ballot, Fleet, StopAnswer
from botgateway.fleet.handoff import Handoff, MovedQuestion
from botgateway.grant import Limits
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.principal import Principal
from botgateway.sink import CardSink
from botgateway.stores.base import (
    AuditStore,
    ClaimStore,
    CounterStore,
    DocumentStore,
    FeedbackStore,
    InstanceStore,
    LeaseStore,
    OpenCardStore,
)
from botgateway.telemetry import TurnObserver
from botgateway.turns import Admission, Admitted, ConversationQueues, Drain, Replies, TurnControl, TurnScheduler
from botgateway.turns.checks import (
    Check,
    Closing,
    Decisions,
    FirstDelivery,
    default_checks,
    moved_checks,
    unprompted_checks,
)
from botgateway.turns.resume import Resumer

__all__ = ["Gateway", "GatewayStore"]


class GatewayStore(
    ClaimStore, OpenCardStore, InstanceStore, CounterStore, LeaseStore, DocumentStore, AuditStore, FeedbackStore,
    Protocol,
):
    """The part of the Store the gateway's parts use: dedupe claims, open cards and heartbeats (recovery), the
    askers' counters and leases, documents (answers, quoted alerts), audit records and votes. Not the history (the
    memory's), nor usage (its writer's), nor the connection (the composition root's)."""


class Gateway:
    """Access, dedupe and per-conversation scheduling of turns, each streamed into one card: the adapters' façade."""

    def __init__(
        self,
        *,
        loop: ToolLoop,
        store: GatewayStore,
        budget: RateBudget,
        config: Config,
        access: AccessHook = allow_all,
        model_label: str = "",
        observers: Sequence[TurnObserver] = (),
        clear_history: Callable[[str], Awaitable[None]] | None = None,
        instance_id: str | None = None,
        limits: PrincipalLimits | None = None,
        approvals: ApprovalDesk | None = None,
        fleet: Fleet | None = None,
        handoff: Handoff | None = None,
        checks: Callable[[tuple[Check, ...]], Sequence[Check]] | None = None,
    ) -> None:
        """``limits`` defaults to the ``limits:`` section's, for everyone (tests inject a clock);
        ``approvals`` is the desk the loop's waiting calls are on (``None``: no call can be approved);
        ``fleet``: the other processes on the same Redis (``None``: this process is the only one);
        ``handoff``: the fleet's queue its waiting questions move to when it drains (``None``: they wait here);
        ``checks``: given admission's checks of a typed message in their declared order, the order to run (a
        deployment's own checks inserted where they belong; ``None``: the declared order as it is)."""
        self.instance_id = instance_id or uuid.uuid4().hex
        """This process's id: the owner of its open cards, kept live by :meth:`start`'s heartbeats."""
        self._config = config
        self._fleet = fleet
        self._queues = ConversationQueues()
        limits = limits or PrincipalLimits(
            store, limits_from_config(config.limits), lease_ttl_s=config.limits.lease_ttl_s
        )
        side = BackgroundTasks()  # notes to askers and queue refreshes: waited for at shutdown like the turns
        self._replies = Replies(budget=budget, deadline_s=config.card.final_deadline_s, side=side)
        self._answers = AnswerBook(store, model_label=model_label)  # told of each turn's end, as an observer
        self._feedback = FeedbackDesk(store, self._answers)
        self._refresher = Refresher(self._answers)
        self._scheduler = self._turn_scheduler(
            loop, store, budget, side=side, limits=limits, model_label=model_label, observers=observers
        )
        policy = effective_policy(config.access)
        approvers = None if approvals is None else Approvers(approvals, policy, _names_of(loop))
        self._control = TurnControl(self._queues, is_admin=self.is_admin, approvers=approvers, fleet=fleet,
                                    cancel=lambda turn, by: self._scheduler.cancel(turn, stopped_by=by))
        self._closing = Closing()  # drain and aclose refuse every question from then on
        self._deliveries = FirstDelivery(store, config.memory.dedupe_ttl_s)
        self._admission = self._admission_of(
            store, Decisions(policy, tool_names=_names_of(loop), always_approve=loop.tools.approval_required,
                             limits=_limit_defaults(config)),
            access=access, limits=limits, votes=approvers is not None, clear_history=clear_history, checks=checks,
        )
        self._drain = Drain(
            queues=self._queues, scheduler=self._scheduler, handoff=handoff, instance_id=self.instance_id
        )
        self.recovery = self._recovery_of(store, budget)
        """Heartbeats of this process, and the resuming or closing of orphaned cards (:mod:`botgateway.cards.recovery`,
        :mod:`botgateway.turns.resume`)."""

    def _recovery_of(self, store: GatewayStore, budget: RateBudget) -> Recovery:
        """The heartbeats and the recovery of orphaned cards, whose questions are resumed through this gateway's
        scheduling."""
        resumer = Resumer(store, self._config, instance_id=self.instance_id, schedule=self._schedule,
                          closing=lambda: self._closing.closed)
        return Recovery(
            store, budget, self._config.gateway, instance_id=self.instance_id, is_running=self._queues.__contains__,
            resume=resumer.resume,
        )

    def _admission_of(
        self, store: GatewayStore, decisions: Decisions, *, access: AccessHook, limits: PrincipalLimits, votes: bool,
        clear_history: Callable[[str], Awaitable[None]] | None,
        checks: Callable[[tuple[Check, ...]], Sequence[Check]] | None,
    ) -> Admission:
        """Admission, with its checks in their declared order (``checks`` may reorder or add to a typed message's)."""
        config = self._config.gateway
        typed = default_checks(
            config=config, store=store, deliveries=self._deliveries, closing=self._closing, access=access,
            decisions=decisions, control=self._control, queues=self._queues, limits=limits, votes=votes,
            clear_history=clear_history, refresher=self._refresher, feedback=self._feedback,
        )
        return Admission(
            checks=typed if checks is None else checks(typed),
            unprompted=unprompted_checks(closing=self._closing, decisions=decisions, limits=limits),
            moved=moved_checks(store=store, turn_ended=limits.turn_ended, max_age_s=config.handoff_max_age_s),
            replies=self._replies, store=store, question_chars=config.max_question_chars,
        )

    def _turn_scheduler(
        self, loop: ToolLoop, store: GatewayStore, budget: RateBudget, *, side: BackgroundTasks,
        limits: PrincipalLimits, model_label: str, observers: Sequence[TurnObserver],
    ) -> TurnScheduler:
        """The scheduler of this gateway's turns, with the factory of their cards; the answers on record observe
        every turn's end."""
        config = self._config
        background = BackgroundTasks()
        cards = CardFactory(config=config.card, budget=budget, store=store, background=background,
                            instance_id=self.instance_id, model_label=model_label,
                            demo=config.llm.resolved_provider == "demo", adapters=config.adapters)
        return TurnScheduler(
            loop=loop, store=store, config=config, queues=self._queues, cards=cards, background=background, side=side,
            replies=self._replies, limits=limits, fleet=self._fleet, observers=(*observers, self._answers),
            is_admin=self.is_admin,
        )

    # --- public API -------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The configuration the gateway was built with."""
        return self._config

    def running_turn(self, conversation_id: str) -> str | None:
        """The id of the turn running (or about to run) in ``conversation_id``, if any."""
        return self._scheduler.running_turn(conversation_id)

    def is_admin(self, user_id: str) -> bool:
        """Whether ``user_id`` may stop anyone's turn."""
        return bool(user_id) and user_id in self._config.gateway.admins

    async def first_delivery(self, platform: str, message_id: str) -> bool:
        """True the first time a platform delivers ``message_id`` (within the dedupe TTL).

        Adapters call it for messages they answer themselves (an image-only note)
        so a redelivery is not answered twice; :meth:`submit` calls it for questions.
        """
        return await self._deliveries.first_delivery(platform, message_id)

    async def submit(
        self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, *, events: EventListener | None = None
    ) -> Submission:
        """Schedule ``msg`` and return at once; the turn runs in the gateway's own task.

        ``events`` is told of each of the turn's events as its card is (the HTTP API streams them).
        """
        admitted = await self._admission.admit(msg, sink)
        if isinstance(admitted, Submission):
            return admitted
        return await self._schedule(admitted, sink, policy, events)

    async def _schedule(
        self, admitted: Admitted, sink: CardSink, policy: BufferPolicy, events: EventListener | None = None
    ) -> Submission:
        """Schedule an asked question; its answer is kept on record when it ends (its Refresh, its votes)."""
        submission = await self._scheduler.schedule(admitted.msg, sink, policy, admitted.turn_id, events=events)
        if submission.status in ("started", "queued"):
            self._answers.expect(admitted.msg, submission.turn_id)
        return submission

    async def submit_unprompted(
        self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, *, role: str,
        tools: frozenset[str] | None = None,
    ) -> Submission:
        """Schedule a turn nobody typed (an alert's investigation, a scheduled report) as ``role`` and return at once.

        ``tools``: offer only these (and what ``role`` allows of them); ``None``: what the role allows. A refusal
        (the role, the limits, a closing gateway) comes back as a ``refused`` submission, posted nowhere.
        """
        admitted = await self._admission.admit_unprompted(msg, role, tools=tools)
        if isinstance(admitted, Submission):
            return admitted
        return await self._scheduler.schedule(admitted.msg, sink, policy, admitted.turn_id)

    async def decide_approval(
        self, code: str, principal: Principal, *, approved: bool, locale: str, channel: str | None = None,
        token: str | None = None,
    ) -> VoteResult:
        """An Approve/Deny button press (with the button's ``token``) or an ``approve 4821`` reply (typed in
        ``channel``): counted when ``principal`` may decide it there, in whichever process the approval waits.

        The result's note is for the decider alone; the card shows a counted decision by itself.
        """
        ballot = Ballot(code=code, principal=principal, approved=approved, locale=locale, channel=channel, token=token)
        return await self._control.vote(ballot)

    async def answer(self, turn_id: str) -> Answer | None:
        """The finished answer of ``turn_id`` on record (its question, where its card is, what it used), if kept."""
        return await self._answers.get(turn_id)

    async def refresh(self, turn_id: str, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """A Refresh pressed on the answer of ``turn_id``: its question asked again, caches bypassed, as a new question
        of the presser. ``msg`` is the press as the presser's message where the card is (its text is ignored).

        Admitted like any question (dedupe by ``msg.message_id``, the presser's access and limits, audited) and
        answered in a new card there; when the answer is not on record (too old) the presser is told, privately.
        """
        again = await self._refresher.again(msg, turn_id)
        if isinstance(again, str):
            return self._replies.refuse(msg, sink, again, private=True)
        return await self.submit(again, sink, policy)

    async def vote(self, turn_id: str, voter: Principal, vote: Vote, *, locale: str, ask_reason: bool = False) -> str:
        """A 👍 (``up``) or 👎 (``down``) on the answer of ``turn_id``, stored with what it used; a second vote of
        ``voter`` replaces the first. Returns the note for the voter; ``ask_reason``: the 👎 waits a few minutes
        for a typed ``reason <text>`` reply, and the note asks for one."""
        return await self._feedback.vote(turn_id, voter, vote, locale=locale, ask_reason=ask_reason)

    async def feedback_reason(self, turn_id: str, voter: Principal, reason: str, *, locale: str) -> str:
        """The one-line reason of ``voter``'s 👎 on the answer of ``turn_id`` (a Slack modal's); the note for them."""
        return await self._feedback.reason(turn_id, voter, reason, locale=locale)

    async def stop(self, turn_id: str, user_id: str) -> StopAnswer:
        """Stop a running or queued turn (stop buttons), in whichever process it runs; only its asker or an admin may.

        The answer says whether it was told to stop, or why not (for the presser). The card ends as
        "stopped" and the conversation's history is left as it was before the turn.
        """
        return await self._control.stop(turn_id, user_id)

    async def stop_turn(self, turn_id: str, user_id: str) -> bool:
        """:meth:`stop`, answering only whether the turn was told to stop."""
        return await self.stop(turn_id, user_id) == "stopped"

    async def wait_turn(self, turn_id: str) -> TurnOutcome | None:
        """Wait until ``turn_id``'s card is final (None when the turn is unknown)."""
        return await self._scheduler.wait_turn(turn_id)

    async def start(self) -> None:
        """Announce this process (heartbeats) and listen to the fleet before any adapter can open a card. Idempotent."""
        await self.recovery.start()
        if self._fleet is not None:
            await self._fleet.start(self._control)

    async def drain(self, timeout_s: float) -> bool:
        """Take no new questions, and wait up to ``timeout_s`` for the running and queued ones to finish their cards.

        In a fleet, the questions that have not started move to the other processes first (their cards here say
        so), and moved questions are no longer taken here. True when none is left. Whatever is left is stopped by
        :meth:`aclose`, its card saying that the bot restarted; cancelling this wait (a second SIGTERM) leaves
        them to it at once.
        """
        self._closing.close()
        return await self._drain.run(timeout_s)

    async def aclose(self) -> None:
        """Stop accepting questions, stop running turns and finish their cards as stopped."""
        self._closing.close()
        await self._drain.stop_serving()
        await self.recovery.stop_watching()
        await self._scheduler.aclose()
        await self._answers.aclose()  # the answers of the last turns, being written
        if self._fleet is not None:
            await self._fleet.aclose()  # after the turns: their leases are handed over first
        # Last: a card still open now is an orphan that the other processes may close.
        await self.recovery.aclose()

    async def take_over(self, moved: MovedQuestion, sink: CardSink, policy: BufferPolicy) -> Submission:
        """Schedule a question another process of the fleet moved here as it drained, before it started.

        It was admitted there: no dedupe claim here (its delivery claimed it, and a claim would refuse the same
        message), no second count against its asker's limits (its place is held under its turn id, kept, and ended
        here with the turn), and its access decision travels with it. Its card is a new one in the same thread.
        One moved longer than ``gateway.handoff_max_age_s`` ago is not answered: its asker is asked to ask again.
        """
        admitted = await self._admission.admit_moved(moved, sink)
        if isinstance(admitted, Submission):
            return admitted
        return await self._schedule(admitted, sink, policy)


def _limit_defaults(config: Config) -> Limits:
    """The ``limits:`` section's values, for what an asker's role leaves unset."""
    return Limits(turns_per_minute=config.limits.turns_per_minute, concurrent_turns=config.limits.concurrent_turns,
                  tokens_per_day=config.limits.tokens_per_day)


def _names_of(loop: ToolLoop) -> Callable[[], list[str]]:
    """The names of the tools the loop offers, read per call: MCP servers add tools as they come up."""
    return lambda: loop.tools.names
