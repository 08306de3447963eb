"""Draining: a process about to stop lets the questions it has finish here, or move to the fleet.

At SIGTERM, ``botgateway run`` has the gateway take no new questions and wait up
to ``gateway.drain_s`` for the turns running or waiting here to finish their
cards; whatever is left is stopped at shutdown, its card saying the bot
restarted. In a fleet the process first stops taking the questions other
processes move, then moves its own waiting ones to them
(:mod:`botgateway.turns.moves`): their cards here end saying another instance
answers, and only the running turns are waited for.
"""

from __future__ import annotations

import asyncio

import structlog

from botgateway.fleet.handoff import Handoff
from botgateway.strings import t
from botgateway.turns.moves import move_waiting
from botgateway.turns.queues import ConversationQueues
from botgateway.turns.scheduler import TurnScheduler
from botgateway.turns.turn import ScheduledTurn

__all__ = ["Drain"]

log = structlog.get_logger(__name__)


class Drain:
    """The end of this process's turns before it stops: waited for, or moved to the fleet.

    Args:
        queues: This process's scheduled turns.
        scheduler: Stops a moved turn here.
        handoff: The fleet's queue of moved questions (``None``: one process, every question waits here).
        instance_id: This process's id, named on what it moves.
    """

    def __init__(
        self, *, queues: ConversationQueues, scheduler: TurnScheduler, handoff: Handoff | None, instance_id: str
    ) -> None:
        self._queues = queues
        self._scheduler = scheduler
        self._handoff = handoff
        self._instance_id = instance_id

    async def stop_serving(self) -> None:
        """Take no more of the questions other processes move (nothing to do without a fleet)."""
        if self._handoff is not None:
            await self._handoff.stop_serving()

    async def run(self, timeout_s: float) -> bool:
        """Move the waiting questions to the fleet, then wait up to ``timeout_s`` for the rest; True when none is left.

        Cancelling the wait (a second SIGTERM) leaves the turns to shutdown at once.
        """
        if self._handoff is not None:
            await self._handoff.stop_serving()
            # Shielded: a second signal must not leave a question queued in the fleet and still waiting here.
            await asyncio.shield(move_waiting(self._handoff, self._queues.all(), instance_id=self._instance_id,
                                              move=self._move))
        pending = [turn.done for turn in self._queues.all() if not turn.done.done()]
        if not pending:
            return True
        log.info("gateway.draining", turns=len(pending), timeout_s=timeout_s)
        finished, left = await asyncio.wait(pending, timeout=timeout_s)
        log.info("gateway.drained", finished=len(finished), left=len(left))
        return not left

    def _move(self, turn: ScheduledTurn) -> None:
        """``turn`` is queued in the fleet now: its card here ends saying another instance answers."""
        turn.moved = True
        self._scheduler.cancel(turn, stopped_by="", note=t(turn.msg.target.locale, "moved_note"))
