"""Delivering a turn's final answer: never lost.

The final snapshot is put on the card (each part of a long answer closed in
turn), retried until ``final_deadline_s``; when the card cannot take it, the
answer goes out through the sink's fallback (plain messages, split to fit),
and the card left behind is closed in the background
(:class:`~botgateway.cards.late_close.LateCloser`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Literal, TypeAlias

import structlog

from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.cards.late_close import LateCloser
from botgateway.cards.live import LiveCard
from botgateway.cards.metrics import CardMetrics
from botgateway.cards.parts import MIN_PART_CHARS, PartCursor
from botgateway.cards.records import OpenCardRecords
from botgateway.cards.split import split_parts
from botgateway.cards.state import CardState
from botgateway.sink import CardSink, CardTarget
from botgateway.snapshot import CardSnapshot

__all__ = ["FinalDelivery", "PartOutcome"]

log = structlog.get_logger(__name__)

PartOutcome: TypeAlias = Literal["ok", "too_long", "fallback", "lost"]
"""How one part's final reached the user: on the card, not at all yet (too long), as a fallback message, or lost."""


class FinalDelivery:
    """Puts one turn's final answer on its card(s), or delivers it another way."""

    def __init__(
        self,
        sink: CardSink,
        target: CardTarget,
        *,
        card: LiveCard,
        cursor: PartCursor,
        caller: CardCaller,
        records: OpenCardRecords,
        late: LateCloser,
        final_deadline_s: float,
        on_visible: Callable[[CardSnapshot], None],
    ) -> None:
        self._sink = sink
        self._target = target
        self._card = card
        self._cursor = cursor
        self._caller = caller
        self._records = records
        self._late = late
        self._final_deadline_s = final_deadline_s
        self._on_visible = on_visible

    @property
    def _metrics(self) -> CardMetrics:
        return self._caller.metrics

    async def deliver(self, state: CardState, *, started: float) -> None:
        """Deliver the final state, part after part; fills in the delivery metrics."""
        if not state.final:
            state.mark_failed()
        deadline = time.monotonic() + self._final_deadline_s
        delivered = True
        try:
            while True:
                cut = self._cursor.split()
                last = cut == len(self._cursor.answer())
                snapshot = self._cursor.view() if last else self._cursor.closing_view(cut)
                outcome = await self.deliver_part(snapshot, deadline=deadline)
                if outcome == "too_long":
                    if self._cursor.shrink(cut):
                        continue
                    # Even a minimal part is refused (huge tool lines?): send it as plain messages.
                    outcome = await self.give_up_card(snapshot)
                delivered = delivered and outcome != "lost"
                if last:
                    break
                self._next_part(cut)
        except Exception:
            log.exception("card.final_crashed", platform=self._target.platform)
            delivered = await self.send_as_messages(self._cursor.view()) and delivered
        self._metrics.delivered = delivered
        self._metrics.final_delivery_s = time.monotonic() - started
        log.info(
            "card.finished",
            platform=self._target.platform,
            turn_id=self._target.turn_id,
            status=state.status,
            delivered=delivered,
            parts=self._metrics.parts,
            calls=self._metrics.total_calls,
            throttles=self._metrics.throttles,
            fallback=self._metrics.fallback_used,
        )

    def _next_part(self, cut: int) -> None:
        self._cursor.advance(cut)
        self._card.next_part()

    async def deliver_part(self, snapshot: CardSnapshot, *, deadline: float) -> PartOutcome:
        """Finalize the current card with ``snapshot`` (creating it first if needed), else send the fallback."""
        card = self._card
        if card.handle is None and not card.gone:
            if await card.create(snapshot, deadline=deadline, interrupt=None) is CallOutcome.TOO_LONG:
                return "too_long"
        handle = card.handle
        if handle is not None and not card.gone:
            outcome = await card.finalize(snapshot, deadline=deadline)
            if outcome is CallOutcome.OK:
                await self._records.forget(handle)
                if card.handle is not None and card.handle is not handle:
                    await self._records.forget(card.handle)
                return "ok"
            if outcome is CallOutcome.TOO_LONG:
                return "too_long"
            if outcome is CallOutcome.GONE:
                await self._records.forget(handle)
                handle = None
            log.warning("card.finalize_failed", platform=self._target.platform, part=snapshot.part, reason=outcome.value)
        elif handle is not None and card.vanished:
            # The card vanished during live updates: nothing left to finalize.
            await self._records.forget(handle)
            handle = None
        sent = await self.send_as_messages(snapshot)
        if handle is not None:
            # The answer went out another way, but the card still shows its live state: close it later.
            self._late.close_later(handle, snapshot, delivered=sent)
        return "fallback" if sent else "lost"

    async def give_up_card(self, snapshot: CardSnapshot) -> PartOutcome:
        """The card refuses even a minimal part: send ``snapshot`` as message(s) and close the card later."""
        sent = await self.send_as_messages(snapshot)
        if not self._card.vanished and self._card.handle is not None:
            self._late.close_later(self._card.handle, snapshot, delivered=sent)
        return "fallback" if sent else "lost"

    async def send_as_messages(self, snapshot: CardSnapshot) -> bool:
        """Send ``snapshot`` as plain message(s), split to fit; True when all of it went out."""
        self._metrics.fallback_used = True
        deadline = time.monotonic() + self._final_deadline_s
        capacity = self._cursor.capacity
        pieces = [snapshot]
        while pieces:
            piece = pieces[0]
            if len(piece.answer) > capacity:
                pieces[:1] = _split_piece(piece, capacity)
                continue

            async def send(current: CardSnapshot = piece) -> None:
                await self._sink.fallback(self._target, current)

            outcome = await self._caller.call("fallback", send, deadline=deadline)
            if outcome is CallOutcome.TOO_LONG and capacity > MIN_PART_CHARS and len(piece.answer) > MIN_PART_CHARS:
                capacity = max(MIN_PART_CHARS, len(piece.answer) // 2)
                continue
            if outcome is not CallOutcome.OK:
                log.error(
                    "card.final_lost",
                    platform=self._target.platform,
                    turn_id=self._target.turn_id,
                    reason=outcome.value,
                    answer_chars=len(piece.answer),
                )
                return False
            self._on_visible(piece)
            pieces.pop(0)
        return True


def _split_piece(piece: CardSnapshot, capacity: int) -> list[CardSnapshot]:
    """``piece`` as several fallback messages: blocks on the first, the footer on the last."""
    chunks = split_parts(piece.answer, capacity)
    return [
        replace(
            piece,
            answer=chunk,
            continued=i < len(chunks) - 1 or piece.continued,
            blocks=piece.blocks if i == 0 else (),
            footer=piece.footer if i == len(chunks) - 1 else "",
        )
        for i, chunk in enumerate(chunks)
    ]
