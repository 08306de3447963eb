"""Scheduling admitted questions: each one a turn in its conversation's line, run in a task the gateway owns.

At most one turn runs per conversation (:mod:`botgateway.turns.queues`); later
questions wait in a short line and their cards say where, and one past
``gateway.max_queued_per_conversation`` is refused. Each turn runs in its own
task, never in the adapter's (DingTalk's SDK cancels its handler tasks when its
socket drops), through :class:`~botgateway.turns.runner.TurnRunner`, which
finishes its card whatever happens. When a turn ends the next one of its
conversation runs and the cards of the others show their new place.

A turn is stopped by cancelling its task (:meth:`TurnScheduler.cancel`, for a
stop, a move to another process, or shutdown); :meth:`TurnScheduler.aclose`
stops them all and sees every card finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

import structlog

from botgateway.access import PrincipalLimits, asker_of, write_refusal
from botgateway.answers import is_question
from botgateway.background import BackgroundTasks
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.factory import CardFactory
from botgateway.cards.records import ResumableRecords
from botgateway.config import Config
from botgateway.events import EventListener
from botgateway.fleet import Fleet
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.sink import CardSink
from botgateway.stores.base import AuditStore
from botgateway.strings import t
from botgateway.telemetry import TurnObserver
from botgateway.turns.fair_slots import FairSlots, fair_share
from botgateway.turns.queues import ConversationQueues
from botgateway.turns.replies import Replies
from botgateway.turns.resume_record import TurnProgress
from botgateway.turns.runner import TurnRunner
from botgateway.turns.turn import ScheduledTurn

__all__ = ["TurnScheduler"]

log = structlog.get_logger(__name__)


class TurnScheduler:
    """The conversations' lines of turns and the tasks that run them into their cards.

    Args:
        loop: The tool loop every turn runs through.
        store: Tool-call rows and audit records of the turns (and of the questions refused for a full line).
        config: The ``gateway``, ``limits`` and ``card`` sections.
        queues: This process's scheduled turns, one line per conversation.
        cards: Builds each turn's card.
        background: The cards' own background work (closing a card after a fallback delivery, writing a question's
            progress on its card's record); cancelled at shutdown after the turns (recovery closes such cards at the
            next start).
        side: The gateway's side tasks (notes, queue refreshes), waited for at shutdown like the turns.
        replies: How a question refused for a full line is answered (it is audited in ``store`` first).
        limits: The askers' limits: a turn's place in them ends when it ends, or at once when it never runs.
        fleet: The other processes on the store (``None``: this process is the only one).
        observers: Told of each turn's audit record (metrics).
        is_admin: Whether a user is an admin (their turns run with the ``admin`` role).
    """

    def __init__(
        self,
        *,
        loop: ToolLoop,
        store: AuditStore,
        config: Config,
        queues: ConversationQueues,
        cards: CardFactory,
        background: BackgroundTasks,
        side: BackgroundTasks,
        replies: Replies,
        limits: PrincipalLimits,
        fleet: Fleet | None,
        observers: Sequence[TurnObserver],
        is_admin: Callable[[str], bool],
    ) -> None:
        self._config = config
        self._store = store
        self._queues = queues
        self._cards = cards
        self._background = background
        self._side = side
        self._replies = replies
        self._limits = limits
        self._is_admin = is_admin
        self._tools = loop.tools
        slots = config.gateway.max_concurrent_turns
        self._runner = TurnRunner(
            loop,
            store,
            slots=FairSlots(slots, per_key=fair_share(slots, config.limits.max_slot_share)),
            observers=observers,
            release=self._release,
            limits=limits,
            fleet=fleet,
        )

    def running_turn(self, conversation_id: str) -> str | None:
        """The id of the turn running (or about to run) in ``conversation_id``, if any."""
        turns = self._queues.line(conversation_id)
        return turns[0].turn_id if turns else None

    async def wait_turn(self, turn_id: str) -> TurnOutcome | None:
        """Wait until ``turn_id``'s card is final (None when the turn is unknown)."""
        turn = self._queues.get(turn_id)
        if turn is None:
            return None
        return await asyncio.shield(turn.done)

    async def schedule(
        self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, turn_id: str, *,
        events: EventListener | None = None,
    ) -> Submission:
        """Put an admitted question in its conversation's line and start its task (or refuse it, audited: the line
        is full).

        ``events`` is told of each of the turn's events (:attr:`ScheduledTurn.listener`)."""
        turns = self._queues.line(msg.conversation_id)
        waiting = len(turns) - 1
        if turns and waiting >= self._config.gateway.max_queued_per_conversation:
            log.info("gateway.queue_full", conversation=msg.conversation_id, waiting=waiting)
            self._side.spawn(self._limits.turn_ended(asker_of(msg), turn_id, 0))  # it never ran: end its lease
            note = t(msg.target.locale, "queue_full", n=len(turns))
            await write_refusal(self._store, msg, turn_id=turn_id, outcome="refused:queue_full", note=note,
                                question_chars=self._config.gateway.max_question_chars)
            return self._replies.refuse(msg, sink, note)

        turn = self._new_turn(msg, sink, policy, turn_id)
        turn.listener = events
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

    def cancel(self, turn: ScheduledTurn, *, stopped_by: str, note: str | None = None) -> None:
        """Stop ``turn``: its card ends as stopped with ``note`` (by default, who stopped it when not its asker)."""
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

    async def aclose(self) -> None:
        """Stop every turn, its card saying the bot restarted, and wait (bounded) for the cards and notes to finish."""
        turns = self._queues.all()
        for turn in turns:
            if not turn.done.done():
                turn.stop_note = t(turn.msg.target.locale, "shutdown_note")
                self.cancel(turn, stopped_by="", note=turn.stop_note)
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
                turn.done.set_result(TurnOutcome(turn_id=turn.turn_id, outcome="stopped", answer=turn.answer,
                                                 snapshot=turn.state.snapshot()))
        await self._background.aclose()
        await self._runner.aclose()

    def _new_turn(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, turn_id: str) -> ScheduledTurn:
        roles = set(msg.ctx.roles)
        if self._is_admin(msg.ctx.user_id):
            roles.add("admin")
        msg = dataclasses.replace(
            msg,
            target=dataclasses.replace(msg.target, turn_id=turn_id),
            ctx=dataclasses.replace(msg.ctx, conversation_id=msg.conversation_id, roles=frozenset(roles)),
        )
        cards, progress = self._cards, None
        if self._config.gateway.resume_within_s > 0 and is_question(msg.target):
            # A typed question's cards carry it on record, with its tool calls so far: a crash does not lose it.
            progress = TurnProgress(msg, turn_id, read_only=self._read_only)
            records = ResumableRecords(cards.store, progress.record, background=self._background)
            progress.on_change = records.progressed
            cards = dataclasses.replace(cards, store=records)
        state, streamer = cards.build(sink, msg.target, policy)
        return ScheduledTurn(msg, turn_id, state, streamer, progress)

    def _read_only(self, name: str) -> bool:
        """Whether the tool ``name`` says it only reads (a call of any other keeps its turn from being resumed)."""
        return getattr(self._tools.get(name), "read_only", False) is True

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
