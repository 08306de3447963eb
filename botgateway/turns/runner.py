"""Running one scheduled turn into its card: whatever happens, the card is finished.

The turn waits for its place in the conversation and a slot of the process
(slots are shared fairly between askers, :mod:`botgateway.turns.fair_slots`),
streams the tool loop's events into its card, and ends done, failed, stopped
or crashed; then its card is finalized, the next question of the conversation
may run, and the turn is audited. Each tool call is also written down as it
starts and ends, so a turn whose process is killed still has its calls audited.

In a fleet, the turn's place is also its conversation's lease across
processes (its card says it waits, as in the line), handed over once the
turn's history is in the store. A turn that has not started when its process
drains may move to another process (:mod:`botgateway.turns.moves`): its card
here ends saying so, and that process ends its limits and audits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import structlog

from botgateway.access import PrincipalLimits, asker_of
from botgateway.background import BackgroundTasks
from botgateway.cards.metrics import CardMetrics
from botgateway.events import TurnEvent, TurnFailed
from botgateway.fleet.base import Fleet
from botgateway.loop import ToolLoop
from botgateway.messages import TurnOutcome
from botgateway.stores.base import AuditRecord, AuditStore, ToolCallRow
from botgateway.strings import t
from botgateway.telemetry import TurnObserver
from botgateway.turns.fair_slots import FairSlots
from botgateway.turns.turn import ScheduledTurn

__all__ = ["TurnRunner"]

log = structlog.get_logger(__name__)

TOOL_ROW_TIMEOUT_S = 2.0
"""Longest wait for writing one tool-call row (the card never waits for it; the turn's audit record does)."""


class TurnRunner:
    """Runs scheduled turns through the tool loop into their cards, in the process's fairly shared slots."""

    def __init__(
        self,
        loop: ToolLoop,
        store: AuditStore,
        *,
        slots: FairSlots,
        observers: Sequence[TurnObserver] = (),
        release: Callable[[ScheduledTurn], None],
        limits: PrincipalLimits | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        """``release(turn)`` is called once the card is final, before the audit, to let the next turn run.

        ``limits`` is told when a turn ends (its tokens count against the asker's day, its lease ends);
        ``fleet`` (several processes on one store) is told of each turn and holds the conversation's lease for it.
        """
        self._loop = loop
        self._store = store
        self._slots = slots
        self._limits = limits
        self._fleet = fleet
        self._observers = tuple(observers)
        self._release = release
        self._rows = BackgroundTasks()
        """Tool-call rows being written: off the path of the card, awaited before the turn's audit record."""

    async def run(self, turn: ScheduledTurn) -> None:
        """Run ``turn`` and finish its card, whatever happens; then release, audit and resolve it."""
        turn.entered = True
        msg = turn.msg
        metrics: CardMetrics | None = None
        started = time.monotonic()
        with structlog.contextvars.bound_contextvars(
            conversation=msg.conversation_id,
            user=turn.user_id,
            platform=msg.platform,
            turn_id=turn.turn_id,
        ):
            try:
                started = await self._play(turn, started)
                turn.finishing = True
                metrics = await turn.streamer.finish()
            except asyncio.CancelledError:
                # cancelled again while finishing (shutdown): the streamer still delivers the final
                _uncancel()
                log.warning("gateway.finish_cancelled")
            except Exception as exc:
                log.exception("gateway.finish_failed", error=type(exc).__name__)
            finally:
                await self._ended(turn, metrics, started)

    async def _play(self, turn: ScheduledTurn, started: float) -> float:
        """Wait for the turn's place, then stream its events into the card; a stop or crash ends the card.

        Returns when the turn started running (``started`` if it never did).
        """
        msg = turn.msg
        try:
            # The model request does not wait for the card: deltas that come first are shown once it exists.
            await turn.streamer.start(wait=False)
            if self._fleet is not None and not turn.moved:  # a moved turn is announced by the process that took it
                await self._fleet.announce(turn.turn_id, msg.conversation_id)  # stoppable through any process
            if turn.stop_requested:
                raise asyncio.CancelledError
            waited = not turn.go.is_set()
            if waited:
                await turn.go.wait()
            if self._fleet is not None:
                waited = await self._fleet.hold(msg.conversation_id, turn.turn_id, lambda: _show_queued(turn)) or waited
            if waited:
                turn.state.mark_started()
                await turn.streamer.refresh()
            async with self._slots.hold(asker_of(msg), on_place=lambda place: _show_slot_place(turn, place)):
                if turn.state.status == "queued":  # it waited for a slot: the card says it runs now
                    turn.state.mark_started()
                    await turn.streamer.refresh()
                if turn.moving is not None:
                    await turn.moving  # a draining gateway is moving it: moved, this task is cancelled here
                started = time.monotonic()
                turn.started_at = time.time()
                if turn.stop_requested:
                    raise asyncio.CancelledError
                turn.running = True
                # aclosing: leaving the loop early (a stop) ends the turn's stream and tool calls now.
                events = self._loop.run_turn(msg.conversation_id, msg.text, msg.ctx, turn_id=turn.turn_id)
                async with contextlib.aclosing(events):
                    async for event in events:
                        if turn.stop_requested:
                            raise asyncio.CancelledError
                        turn.observe(event)
                        _tell(turn, event)
                        self._write_tool_call(turn, event)
                        await turn.streamer.feed(event)
        except asyncio.CancelledError:
            _uncancel()
            turn.outcome = "moved" if turn.moved else "stopped"
            turn.answer = turn.answer or turn.state.snapshot().answer
            turn.state.mark_stopped(turn.stop_note)
        except Exception as exc:
            log.exception("gateway.turn_crashed", error=type(exc).__name__)
            partial = turn.state.snapshot().answer
            failed = TurnFailed(reason="internal", message=t(msg.target.locale, "crashed"), partial_answer=partial)
            turn.observe(failed)
            _tell(turn, failed)
            await _feed_quietly(turn, failed)
        return started

    async def _ended(self, turn: ScheduledTurn, metrics: CardMetrics | None, started: float) -> None:
        self._release(turn)
        if self._fleet is not None:
            self._fleet.hand_over(turn.msg.conversation_id, turn.turn_id)
            self._fleet.withdraw(turn.turn_id, turn.msg.conversation_id)
        snapshot = turn.state.snapshot()
        outcome = TurnOutcome(turn_id=turn.turn_id, outcome=turn.outcome, answer=turn.answer or snapshot.answer,
                              snapshot=snapshot, metrics=metrics)
        log.info("gateway.turn_ended", outcome=turn.outcome, duration_s=round(time.monotonic() - started, 3))
        # A moved turn goes on in the process that took it, under the same turn id: that one ends its place in the
        # asker's limits and writes its audit record.
        if not turn.moved:
            await self._account(turn, outcome, started)
        if not turn.done.done():
            turn.done.set_result(outcome)

    async def _account(self, turn: ScheduledTurn, outcome: TurnOutcome, started: float) -> None:
        """Tell the observers of the turn, then count its tokens, end its place in the asker's limits and write its
        audit record (bounded).

        The observers come first: they are synchronous (their own writes go behind), so a slow store or a cancel
        during the writes below never costs the turn's usage rows, metrics or answer record.
        """
        record = turn.audit_record(outcome, time.monotonic() - started)
        self._notify(record, outcome.metrics)
        try:
            if turn.row_writes:
                # The audit record replaces the turn's rows: a row landing after it would outlive it.
                await asyncio.wait(turn.row_writes, timeout=TOOL_ROW_TIMEOUT_S)
            async with asyncio.timeout(5):
                if self._limits is not None:
                    tokens = turn.prompt_tokens + turn.completion_tokens
                    await self._limits.turn_ended(asker_of(turn.msg), turn.turn_id, tokens)
                await self._audit(record)
        except (asyncio.CancelledError, TimeoutError):
            log.warning("gateway.audit_skipped", turn_id=turn.turn_id)

    def _write_tool_call(self, turn: ScheduledTurn, event: TurnEvent) -> None:
        """Write a tool call's start or end as it happens, in the background (a store failure is logged, never raised)."""
        row = turn.tool_call_row(event)
        if row is None:
            return
        task = self._rows.spawn(self._record_row(row), name=f"tool-row:{row.turn_id}:{row.call_id}")
        if task is not None:
            turn.row_writes.append(task)

    async def _record_row(self, row: ToolCallRow) -> None:
        try:
            async with asyncio.timeout(TOOL_ROW_TIMEOUT_S):
                await self._store.record_tool_call(row)
        except Exception as exc:  # TimeoutError included: the end-of-turn audit record still lists the call
            log.warning("gateway.tool_call_record_failed", call_id=row.call_id, phase=row.phase, error=type(exc).__name__)

    async def aclose(self) -> None:
        """Wait briefly for tool-call rows still being written, then drop them (shutdown)."""
        await self._rows.wait(timeout=TOOL_ROW_TIMEOUT_S)
        await self._rows.aclose()

    def _notify(self, record: AuditRecord, metrics: CardMetrics | None) -> None:
        for observer in self._observers:
            try:
                observer.turn_ended(record, metrics)
            except Exception as exc:  # metrics must never cost an answer
                log.warning("gateway.observer_failed", turn_id=record.turn_id, error=type(exc).__name__)

    async def _audit(self, record: AuditRecord) -> None:
        try:
            await self._store.record_audit(record)
        except Exception as exc:
            log.warning("gateway.audit_failed", turn_id=record.turn_id, error=type(exc).__name__)


async def _show_queued(turn: ScheduledTurn) -> None:
    """The conversation's lease is held by a turn of another process: the card says it waits, as in the line."""
    turn.state.mark_queued()
    try:
        await turn.streamer.refresh()
    except Exception as exc:  # the card catches up with the next update
        log.debug("gateway.refresh_failed", turn_id=turn.turn_id, error=type(exc).__name__)


def _show_slot_place(turn: ScheduledTurn, place: int) -> None:
    """Every turn slot is taken: the card says where the turn is in line for one (1: next)."""
    turn.state.mark_queued(place, busy=True)
    turn.streamer.nudge()


def _tell(turn: ScheduledTurn, event: TurnEvent) -> None:
    """Hand ``event`` to the turn's listener, if any: a listener's failure never costs the turn its answer."""
    if turn.listener is None:
        return
    try:
        turn.listener(event)
    except Exception as exc:
        log.warning("gateway.listener_failed", turn_id=turn.turn_id, error=type(exc).__name__)


async def _feed_quietly(turn: ScheduledTurn, event: TurnEvent) -> None:
    try:
        await turn.streamer.feed(event)
    except Exception:
        turn.state.apply(event)


def _uncancel() -> None:
    """A stop (a cancellation of the turn's task) was handled: the task goes on to finish the card."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
