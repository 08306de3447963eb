"""When a process of a fleet drains, its questions that have not started move to the other processes.

A question is movable while it waits: behind the running turn of its
conversation, for the conversation's lease, or for a turn slot; one whose
turn runs already stays and gets ``gateway.drain_s`` to finish. The waiting
questions of one conversation are queued as one unit, in their order
(:meth:`~botgateway.fleet.handoff.Handoff.put`), so the process that takes them
keeps that order, and the conversation's lease keeps them behind the turn still
running here.

A turn is held at its start while its move is under way (its ``moving``
future), so it can neither start here once it is queued elsewhere nor be lost
when queuing fails: then it stays and waits here as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from botgateway.fleet.handoff import Handoff, MovedQuestion
from botgateway.turns.turn import ScheduledTurn

__all__ = ["move_waiting"]


def _movable(turn: ScheduledTurn, platforms: frozenset[str]) -> bool:
    """Waiting, not being stopped, and of a platform the fleet takes questions of."""
    waiting = not turn.running and not turn.stop_requested and not turn.finishing and not turn.done.done()
    return waiting and turn.task is not None and not turn.task.done() and turn.msg.platform in platforms


async def move_waiting(
    handoff: Handoff, turns: Iterable[ScheduledTurn], *, instance_id: str, move: Callable[[ScheduledTurn], None]
) -> int:
    """Queue the waiting ``turns`` on ``handoff`` (one unit per conversation, in line order) and ``move(turn)`` each
    one the fleet now holds (the caller ends it here); returns how many moved.

    ``turns`` come in submission order, which is each conversation's line order.
    """
    lines: dict[str, list[ScheduledTurn]] = {}
    for turn in turns:
        if _movable(turn, handoff.platforms):
            lines.setdefault(turn.msg.conversation_id, []).append(turn)
    if not lines:
        return 0
    loop = asyncio.get_running_loop()
    for line in lines.values():
        for turn in line:
            turn.moving = loop.create_future()
    now = time.time()
    queued: list[bool] = []
    try:
        queued = await asyncio.gather(*(
            handoff.put([MovedQuestion(msg=t.msg, turn_id=t.turn_id, moved_at=now, moved_by=instance_id) for t in line])
            for line in lines.values()
        ))
    finally:
        moved = 0
        for line, held in zip(lines.values(), queued or [False] * len(lines), strict=True):
            for turn in line:
                assert turn.moving is not None
                turn.moving.set_result(held)
                if held:
                    move(turn)  # before the turn's task runs again: it resumes cancelled, never started
                    moved += 1
    return moved
