"""Plain notes to an asker: a refusal, "nothing to stop", "conversation cleared", ``/whoami``.

A note is not a turn: no card is streamed, one message goes out through the
sink's fallback, paced by the shared budget and retried like any card call.
A note for one person goes to them alone where the sink can (:func:`send_private`).
"""

from __future__ import annotations

import time

import structlog

from botgateway.budget import RateBudget
from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.sink import CardSink, CardTarget, PrivateNotes
from botgateway.snapshot import CardSnapshot

__all__ = ["note_snapshot", "send_note", "send_private"]

log = structlog.get_logger(__name__)


def note_snapshot(note: str, locale: str, *, as_answer: bool = False) -> CardSnapshot:
    """``note`` as a final card: a neutral answer, or (by default) an error note."""
    if as_answer:
        return CardSnapshot(status="done", answer=note, locale=locale)
    return CardSnapshot(status="failed", error=note, locale=locale)


async def send_note(
    sink: CardSink, target: CardTarget, snapshot: CardSnapshot, *, budget: RateBudget | None, owner: str, deadline_s: float
) -> bool:
    """Send ``snapshot`` as one plain message to ``target``; True when it went out (failures are logged)."""
    caller = CardCaller(budget, lambda op: sink.rate_key(op, target), owner=owner, platform=target.platform)

    async def send() -> None:
        await sink.fallback(target, snapshot)

    try:
        outcome = await caller.call("fallback", send, deadline=time.monotonic() + deadline_s, priority=False)
    except Exception as exc:  # a sink that cannot even name its budget: the note is lost, the gateway is not
        log.warning("gateway.note_failed", platform=target.platform, error=type(exc).__name__)
        return False
    if outcome is not CallOutcome.OK:
        log.warning("gateway.note_failed", platform=target.platform, error=outcome.value)
    return outcome is CallOutcome.OK


async def send_private(sink: CardSink, target: CardTarget, user_id: str, text: str) -> bool:
    """Show ``text`` to ``user_id`` alone near ``target``; False when the sink cannot (the caller posts it publicly)."""
    if not isinstance(sink, PrivateNotes) or not user_id:
        return False
    try:
        return await sink.private_note(target, user_id, text)
    except Exception as exc:  # a private note that fails is sent in the open instead; it must not be lost
        log.warning("gateway.private_note_failed", platform=target.platform, error=type(exc).__name__, detail=str(exc)[:200])
        return False
