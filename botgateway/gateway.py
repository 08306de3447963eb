"""The gateway: from an adapter's inbound message to one finished card.

Every adapter hands its parsed messages to :meth:`Gateway.submit`, which
returns at once (platforms want an ack within seconds) after checking access,
dropping redeliveries and scheduling the turn. At most one turn runs per
conversation; later questions wait in a short queue and their cards say so.
Different conversations run concurrently, up to a process-wide ceiling.

Each turn runs in a task the gateway owns, never in the caller's (DingTalk's SDK
cancels its handler tasks when its socket drops). Whatever happens to the turn
(done, failed, stopped, crashed, shutdown) its card is finished.

If the whole process dies, its cards stay on record as open, owned by its
instance id, and :mod:`botgateway.recovery` closes them (from this process's
heartbeats, other replicas know it is gone).

Several processes on one Redis (a ``fleet``) behave as one: a turn also takes
its conversation's lease before it runs, so one turn per conversation holds
across processes, and stops and approval votes received here for a turn or an
approval of another process are applied there (:mod:`botgateway.turn_control`).
When such a process drains, its questions that have not started move to the
others (:mod:`botgateway.turn_moves`), which take them with :meth:`Gateway.take_over`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Sequence

import structlog

from botgateway.access import AccessHook, allow_all
from botgateway.admission import Admission
from botgateway.approvals import ApprovalDesk
from botgateway.approvers import Approvers, VoteResult
from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards.factory import CardFactory
from botgateway.cards.policy import BufferPolicy
from botgateway.config import Config
from botgateway.fair_slots import FairSlots, fair_share
from botgateway.fleet import Ballot, Fleet, StopAnswer
from botgateway.fleet.handoff import Handoff, MovedQuestion
from botgateway.limits import PrincipalLimits, asker_of, limits_from_config
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.policy import effective_policy
from botgateway.principal import Principal
from botgateway.queues import ConversationQueues
from botgateway.recovery import Recovery
from botgateway.replies import Replies
from botgateway.sink import CardSink
from botgateway.stores.base import Store
from botgateway.strings import t
from botgateway.telemetry import TurnObserver
from botgateway.turn import ScheduledTurn
from botgateway.turn_control import TurnControl
from botgateway.turn_moves import move_waiting
from botgateway.turn_runner import TurnRunner

__all__ = ["Gateway"]

log = structlog.get_logger(__name__)


class Gateway:
    """Access, dedupe and per-conversation scheduling of turns, each streamed into one card."""

    def __init__(
        self,
        *,
        loop: ToolLoop,
        store: Store,
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
    ) -> None:
        """``limits`` defaults to the ``limits:`` section's, for everyone (tests inject a clock);
        ``approvals`` is the desk the loop's waiting calls are on (``None``: no call can be approved);
        ``fleet``: the other processes on the same Redis (``None``: this process is the only one);
        ``handoff``: the fleet's queue its waiting questions move to when it drains (``None``: they wait here)."""
        self.instance_id = instance_id or uuid.uuid4().hex
        """This process's id: the owner of its open cards, kept live by :meth:`start`'s heartbeats."""
        self._config = config

        def tool_names() -> list[str]:
            return loop.tools.names  # read per call: MCP servers add tools as they come up

        policy = effective_policy(config.access)
        self._approvers = Approvers(approvals, policy, tool_names) if approvals is not None else None
        self._fleet = fleet
        self._handoff = handoff
        self._queues = ConversationQueues()
        self._limits = limits or PrincipalLimits(
            store, limits_from_config(config.limits), lease_ttl_s=config.limits.lease_ttl_s
        )
        slots = config.gateway.max_concurrent_turns
        self._runner = TurnRunner(
            loop,
            store,
            slots=FairSlots(slots, per_key=fair_share(slots, config.limits.max_slot_share)),
            observers=observers,
            release=self._release,
            limits=self._limits,
            fleet=fleet,
        )
        self._control = TurnControl(self._queues, is_admin=self.is_admin, approvers=self._approvers, fleet=fleet,
                                    cancel=lambda turn, by: self._cancel(turn, stopped_by=by))
        self._side = BackgroundTasks()
        """Notes to askers and queue refreshes; waited for at shutdown like the turns."""
        self._replies = Replies(budget=budget, deadline_s=config.card.final_deadline_s, side=self._side)
        self._admission = Admission(
            store=store, config=config, access=access, tool_names=tool_names,
            always_approve=loop.tools.approval_required, votes=self._approvers is not None, control=self._control,
            queues=self._queues, limits=self._limits, replies=self._replies, clear_history=clear_history,
        )
        self._background = BackgroundTasks()
        """Cards being closed after a fallback delivery; cancelled at shutdown (recovery closes them next start)."""
        self._cards = CardFactory(
            config=config.card,
            budget=budget,
            store=store,
            background=self._background,
            instance_id=self.instance_id,
            model_label=model_label,
            demo=config.llm.resolved_provider == "demo",
        )
        self.recovery = Recovery(
            store, budget, config.gateway, instance_id=self.instance_id, is_running=self._queues.__contains__
        )
        """Heartbeats of this process and the closing of orphaned cards (:mod:`botgateway.recovery`)."""

    # --- public API -------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The configuration the gateway was built with."""
        return self._config

    def running_turn(self, conversation_id: str) -> str | None:
        """The id of the turn running (or about to run) in ``conversation_id``, if any."""
        turns = self._queues.line(conversation_id)
        return turns[0].turn_id if turns else None

    def is_admin(self, user_id: str) -> bool:
        """Whether ``user_id`` may stop anyone's turn."""
        return bool(user_id) and user_id in self._config.gateway.admins

    async def first_delivery(self, platform: str, message_id: str) -> bool:
        """True the first time a platform delivers ``message_id`` (within the dedupe TTL).

        Adapters call it for messages they answer themselves (an image-only note)
        so a redelivery is not answered twice; :meth:`submit` calls it for questions.
        """
        return await self._admission.first_delivery(platform, message_id)

    async def submit(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """Schedule ``msg`` and return at once; the turn runs in the gateway's own task."""
        admitted = await self._admission.admit(msg, sink)
        if isinstance(admitted, Submission):
            return admitted
        return self._schedule(admitted.msg, sink, policy, admitted.turn_id)

    def _schedule(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, turn_id: str) -> Submission:
        """Put an admitted question in its conversation's line and start its task (or refuse it: the line is full)."""
        turns = self._queues.line(msg.conversation_id)
        waiting = len(turns) - 1
        if turns and waiting >= self._config.gateway.max_queued_per_conversation:
            log.info("gateway.queue_full", conversation=msg.conversation_id, waiting=waiting)
            self._side.spawn(self._limits.turn_ended(asker_of(msg), turn_id, 0))  # it never ran: end its lease
            return self._replies.refuse(msg, sink, t(msg.target.locale, "queue_full", n=len(turns)))

        turn = self._new_turn(msg, sink, policy, turn_id)
        position = self._queues.add(turn)
        turn.task = asyncio.create_task(self._runner.run(turn), name=f"turn-{turn.turn_id}")
        log.info(
            "gateway.submitted",
            turn_id=turn.turn_id,
            conversation=msg.conversation_id,
            platform=msg.platform,
            user=turn.user_id,
            position=position,
        )
        if position:
            return Submission(status="queued", turn_id=turn.turn_id, done=turn.done, position=position)
        return Submission(status="started", turn_id=turn.turn_id, done=turn.done)

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
        turn = self._queues.get(turn_id)
        if turn is None:
            return None
        return await asyncio.shield(turn.done)

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
        self._admission.close()
        if self._handoff is not None:
            await self._handoff.stop_serving()
            # Shielded: a second signal must not leave a question queued in the fleet and still waiting here.
            await asyncio.shield(move_waiting(self._handoff, self._queues.all(), instance_id=self.instance_id,
                                              move=self._move))
        pending = [turn.done for turn in self._queues.all() if not turn.done.done()]
        if not pending:
            return True
        log.info("gateway.draining", turns=len(pending), timeout_s=timeout_s)
        finished, left = await asyncio.wait(pending, timeout=timeout_s)
        log.info("gateway.drained", finished=len(finished), left=len(left))
        return not left

    async def aclose(self) -> None:
        """Stop accepting questions, stop running turns and finish their cards as stopped."""
        self._admission.close()
        if self._handoff is not None:
            await self._handoff.stop_serving()
        await self.recovery.stop_watching()
        turns = self._queues.all()
        for turn in turns:
            if not turn.done.done():
                turn.stop_note = t(turn.msg.target.locale, "shutdown_note")
                self._cancel(turn, stopped_by="", note=turn.stop_note)
        tasks = [t.task for t in turns if t.task is not None] + self._side.pending()
        if tasks:
            # finish() retries the final update up to its deadline; do not wait forever
            timeout = self._config.card.final_deadline_s + 5
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("gateway.close_timeout", unfinished=len(pending))
                await asyncio.wait(pending, timeout=2)
                # finish() shields the final delivery from its caller: end it here, or it outlives us
                await asyncio.gather(*(t.streamer.aclose() for t in turns if t.task in pending), return_exceptions=True)
        for turn in turns:
            # A task cancelled before its first step never resolved its future: nobody may wait forever.
            if not turn.done.done():
                turn.done.set_result(TurnOutcome(turn_id=turn.turn_id, outcome="stopped", answer=turn.answer, snapshot=turn.state.snapshot()))
        await self._background.aclose()
        await self._runner.aclose()
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
        return self._schedule(admitted.msg, sink, policy, admitted.turn_id)

    # --- internals ---------------------------------------------------------------

    def _new_turn(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, turn_id: str) -> ScheduledTurn:
        roles = set(msg.ctx.roles)
        if self.is_admin(msg.ctx.user_id):
            roles.add("admin")
        msg = dataclasses.replace(
            msg,
            target=dataclasses.replace(msg.target, turn_id=turn_id),
            ctx=dataclasses.replace(msg.ctx, conversation_id=msg.conversation_id, roles=frozenset(roles)),
        )
        state, streamer = self._cards.build(sink, msg.target, policy)
        return ScheduledTurn(msg, turn_id, state, streamer)

    def _move(self, turn: ScheduledTurn) -> None:
        """``turn`` is queued in the fleet now: its card here ends saying another instance answers."""
        turn.moved = True
        self._cancel(turn, stopped_by="", note=t(turn.msg.target.locale, "moved_note"))

    def _cancel(self, turn: ScheduledTurn, *, stopped_by: str, note: str | None = None) -> None:
        if note is None:
            note = "" if not stopped_by or stopped_by == turn.user_id else t(turn.msg.target.locale, "stopped_by", asker=stopped_by)
        turn.stop_note = note
        # The flag backs up the cancellation: an await that completes at the same moment may absorb it.
        turn.stop_requested = True
        log.info("gateway.stopping", turn_id=turn.turn_id, by=stopped_by or "gateway")
        # A task cancelled before its first step never runs its body, so its card would
        # never be finished; until then the flag alone stops it. Once the card is being
        # finalized, a cancel would only make ``done`` resolve before the card is final.
        if turn.task is not None and not turn.task.done() and turn.entered and not turn.finishing:
            turn.task.cancel()

    def _release(self, turn: ScheduledTurn) -> None:
        """Take ``turn`` off its conversation, let the next waiting question run and show the others their place."""
        for waiting in self._queues.release(turn):
            self._side.spawn(self._refresh(waiting))

    async def _refresh(self, turn: ScheduledTurn) -> None:
        """Push a state change that did not come from an event (queue position)."""
        try:
            await turn.streamer.refresh()
        except Exception as exc:
            log.debug("gateway.refresh_failed", turn_id=turn.turn_id, error=type(exc).__name__)
