"""Following one submitted turn for a client: its events as they come, and a stop when the client leaves.

The events are handed to the client's writer in order. When the turn ends by
itself its last event (``TurnDone`` or ``TurnFailed``) is returned; a turn
stopped or crashed without one gets a ``TurnFailed`` made from its outcome,
so a client always sees how it ended. When the client goes away (the
connection closes, a write fails) or cannot keep up (its tap overflows), the
turn is stopped exactly as a "stop" from its asker stops it, and the call
waits until its card is final: its history is as it was before the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from adapters.web.sse import gone
from adapters.web.tap import EventTap
from botgateway.events import FailureReason, TurnDone, TurnEvent, TurnFailed, TurnResult
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.strings import t

__all__ = ["ClientGone", "EventWriter", "final_of", "follow"]

log = structlog.get_logger(__name__)

EventWriter = Callable[[TurnEvent, float], Awaitable[None]]
"""Sends one event to the client, with the seconds since the question came; raises ``ConnectionError`` when gone."""

STOP_WAIT_S = 30.0
"""Longest wait for a stopped turn's card to be final (it finishes quickly: its stream is cancelled)."""


class ClientGone(Exception):
    """The client left (or could not keep up); its turn was stopped."""


async def follow(
    stop: Callable[[str, str], Awaitable[object]], msg: InboundMessage, submission: Submission, tap: EventTap,
    request: web.Request, write: EventWriter,
) -> TurnDone | TurnFailed:
    """Stream the turn's events through ``write`` until it ends, the last one included; returns how it ended.

    ``stop(turn_id, user_id)`` stops a turn as "stop" does. Raises :class:`ClientGone` once the turn was stopped
    because the client left.
    """
    assert submission.done is not None
    started = time.monotonic()
    pump = asyncio.ensure_future(_pump(tap, submission.done, write, started))
    left = asyncio.ensure_future(gone(request))
    try:
        await asyncio.wait([pump, left], return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
    if pump.done() and not pump.cancelled() and pump.exception() is None and not tap.overflowed.is_set():
        final = pump.result()
        if final is None:  # stopped, or crashed before its stream: the client still learns how it ended
            final = final_of(await asyncio.shield(submission.done), msg.target.locale)
            await write(final, round(time.monotonic() - started, 3))
        return final
    pump.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
        await pump
    why = "overflow" if tap.overflowed.is_set() else "disconnected"
    log.info("web.client_gone", turn_id=submission.turn_id, why=why)
    await stop(submission.turn_id, msg.ctx.user_id)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(submission.done), STOP_WAIT_S)
    raise ClientGone(why)


async def _pump(
    tap: EventTap, done: asyncio.Future[TurnOutcome], write: EventWriter, started: float
) -> TurnDone | TurnFailed | None:
    final: TurnDone | TurnFailed | None = None
    async for event in tap.events(done):
        await write(event, round(time.monotonic() - started, 3))
        if isinstance(event, (TurnDone, TurnFailed)):
            final = event
    return final


_ENDINGS = {"stopped": "web_turn_stopped", "moved": "web_turn_moved"}
"""The strings saying how a turn without a last event ended, by outcome (others: ``web_turn_ended``)."""


def final_of(outcome: TurnOutcome, locale: str = "en") -> TurnDone | TurnFailed:
    """The last event of a turn that ended without sending one (stopped, moved, crashed before its stream), its
    message in the asker's ``locale``."""
    snapshot = outcome.snapshot
    note = snapshot.error if snapshot is not None else ""
    if outcome.outcome == "done":
        return TurnDone(result=TurnResult(answer=outcome.answer, rounds=0))
    reason: FailureReason = "cancelled" if outcome.outcome in ("stopped", "moved") else "internal"
    message = note or t(locale, _ENDINGS.get(outcome.outcome, "web_turn_ended"), outcome=outcome.outcome)
    return TurnFailed(reason=reason, message=message, partial_answer=outcome.answer)
