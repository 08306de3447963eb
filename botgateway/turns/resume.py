"""A question whose process died, answered again once: the recovering process's side of a resume.

Recovery (:mod:`botgateway.cards.recovery`) hands each card it found left open to :meth:`Resumer.resume`. When
the card's record carries its turn (:mod:`botgateway.turns.resume_record`) and the turn may run again, the
question is scheduled here as a new turn, without admission's checks (it was admitted, its delivery deduplicated
and counted against its asker's limits where it was asked): its card is the one left open
(:mod:`botgateway.turns.resumed_card`), its target and audit record name the turn it runs again
(:data:`~botgateway.turns.resume_record.RESUMED_FROM`). Otherwise the card is closed with the reason.

Exactly once across the fleet: the turn's resume is claimed in the Store first (``resume:<turn id>``), so of two
processes that recover the card at once one runs it; and before it runs, its card's record is made this process's
and says it was resumed, so a crash from then on closes the card ("interrupted again") instead of running the
question a third time. Its history is committed once, by the resumed turn (an interrupted turn leaves none).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from botgateway.answers import is_question
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.recovery import target_from_open_card
from botgateway.config import Config
from botgateway.messages import Submission
from botgateway.sink import CardHandle, CardSink, target_to_dict
from botgateway.stores.base import ClaimStore, OpenCard, OpenCardStore
from botgateway.strings import t
from botgateway.turns.admission import Admitted
from botgateway.turns.resume_record import RESUMED_FROM, ResumableTurn, turn_from_wire, why_not
from botgateway.turns.resumed_card import resumed_sink

__all__ = ["RESUME_CLAIM_MARGIN_S", "ResumeStore", "Resumer"]

log = structlog.get_logger(__name__)

RESUME_CLAIM_MARGIN_S = 60.0
"""A turn's resume claim outlives ``gateway.resume_within_s`` by this much: by the time it expires, the question
is too old to be resumed by anyone."""


class ResumeStore(ClaimStore, OpenCardStore, Protocol):
    """The part of the Store a resume uses: the claim on the turn, and the card's record."""


Schedule = Callable[[Admitted, CardSink, BufferPolicy], Awaitable[Submission]]
"""Schedules an admitted question into a card of the given sink (the gateway's own scheduling)."""


class Resumer:
    """Runs again, once, the turns of the cards recovery found left open, when they may run again.

    Args:
        store: The claims and the open-card records.
        config: ``gateway.resume_within_s``, and each platform's buffer policy.
        instance_id: This process: the owner of a resumed card's record.
        schedule: Schedules the resumed question.
        closing: Whether the gateway takes no more questions (drain, shutdown): then nothing is resumed here.
        clock: Unix time (a question's age).
    """

    def __init__(
        self, store: ResumeStore, config: Config, *, instance_id: str, schedule: Schedule,
        closing: Callable[[], bool], clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._config = config
        self._instance_id = instance_id
        self._schedule = schedule
        self._closing = closing
        self._clock = clock

    async def resume(self, card: OpenCard, sink: CardSink) -> str | None:
        """Run ``card``'s turn again into it when it may; None when the card is taken care of (its turn runs again
        here, or another process claimed it), else the note the card is closed with, saying why not."""
        locale = target_from_open_card(card).locale
        within_s = self._config.gateway.resume_within_s
        if within_s <= 0 or self._closing():
            return t(locale, "interrupted")
        turn = _recorded(card)
        if turn is None:
            return t(locale, "resume_unrecorded" if is_question(target_from_open_card(card)) else "interrupted")
        note = why_not(turn, now=self._clock(), within_s=within_s)
        if note is not None:
            log.info("gateway.resume_declined", turn_id=turn.turn_id, card_id=card.card_id, calls=len(turn.calls),
                     resumed_from=turn.resumed_from or None)
            return note
        try:
            claimed = await self._store.claim(f"resume:{turn.turn_id}", within_s + RESUME_CLAIM_MARGIN_S)
        except Exception as exc:  # unclaimed, it could run twice: closed instead
            log.warning("gateway.resume_claim_failed", turn_id=turn.turn_id, error=type(exc).__name__)
            return t(locale, "interrupted")
        if not claimed:
            log.info("gateway.resume_taken", turn_id=turn.turn_id, card_id=card.card_id)
            return None
        return await self._run_again(card, turn, sink)

    async def _run_again(self, card: OpenCard, turn: ResumableTurn, sink: CardSink) -> str | None:
        """Schedule ``turn``'s question as a new turn into ``card``; None once scheduled, else the card's note."""
        turn_id = uuid.uuid4().hex[:16]
        target = turn.msg.target
        target = dataclasses.replace(target, turn_id=turn_id, extra={**target.extra, RESUMED_FROM: turn.turn_id})
        msg = dataclasses.replace(turn.msg, target=target)
        # This process's from now on, and resumed: a crash before its turn writes its own record closes the card.
        mine = dataclasses.replace(card, turn_id=turn_id, owner=self._instance_id, target=target_to_dict(target),
                                   resume={**card.resume, RESUMED_FROM: turn.turn_id})
        try:
            await self._store.add_open_card(mine)
        except Exception as exc:  # the claim already keeps it to one run
            log.warning("gateway.resume_record_failed", turn_id=turn_id, error=type(exc).__name__)
        left = CardHandle(card_id=card.card_id, target=target)
        submission = await self._schedule(
            Admitted(msg=msg, turn_id=turn_id), resumed_sink(sink, left, self._store), self._policy(msg.platform)
        )
        if submission.status not in ("started", "queued"):
            log.info("gateway.resume_refused", turn_id=turn_id, status=submission.status)
            return t(target.locale, "interrupted")
        log.info("gateway.resumed", turn_id=turn_id, resumed_from=turn.turn_id, card_id=card.card_id,
                 conversation=msg.conversation_id, age_s=round(self._clock() - turn.asked_at, 3))
        return None

    def _policy(self, platform: str) -> BufferPolicy:
        """The buffer policy of the platform's adapter section (the defaults for a platform without one)."""
        adapter = getattr(self._config.adapters, platform, None)
        return BufferPolicy.from_config(getattr(adapter, "policy", None))


def _recorded(card: OpenCard) -> ResumableTurn | None:
    """The turn ``card``'s record carries, if any (a malformed one counts as none)."""
    if not card.resume:
        return None
    try:
        return turn_from_wire(card.resume)
    except ValueError as exc:
        log.warning("gateway.resume_record_unreadable", card_id=card.card_id, detail=str(exc)[:200])
        return None
