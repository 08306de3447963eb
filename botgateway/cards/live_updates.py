"""Sending a card's live updates, one at a time, and what each outcome means for the next.

:class:`~botgateway.cards.streamer.CardStreamer` decides *when* an update is due
(its :class:`~botgateway.cards.pacing.Pacing`); :class:`LiveUpdater` sends it,
showing the newest state of the part streamed now
(:class:`~botgateway.cards.parts.PartCursor`), and acts on what the platform
answers: a throttled update is carried by the next one, a transient error
backs off first, a card refused as too long is aimed shorter,
and a card refused for good gets no more live updates (the final delivers it
all). A long answer rolls over: the current card is closed at a clean cut and
the next part gets a card of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.cards.delivery import FinalDelivery
from botgateway.cards.live import LiveCard
from botgateway.cards.pacing import Pacing
from botgateway.cards.parts import PartCursor
from botgateway.cards.state import CardState
from botgateway.snapshot import CardSnapshot

__all__ = ["LiveUpdater"]

log = structlog.get_logger(__name__)


class LiveUpdater:
    """Sends one card's live updates (owned by its streamer; called by its worker only, one call at a time)."""

    def __init__(
        self,
        state: CardState,
        *,
        card: LiveCard,
        cursor: PartCursor,
        caller: CardCaller,
        pacing: Pacing,
        delivery: FinalDelivery,
        final_deadline_s: float,
        finishing: asyncio.Event,
        wake: Callable[[], None],
        platform: str,
    ) -> None:
        """``finishing`` is set once the final is on its way: a call still waiting gives way to it. ``wake`` wakes
        the worker (when a backoff is over); ``final_deadline_s`` bounds each card's creation and closing."""
        self._state = state
        self._card = card
        self._cursor = cursor
        self._caller = caller
        self._pacing = pacing
        self._delivery = delivery
        self._final_deadline_s = final_deadline_s
        self._finishing = finishing
        self._wake = wake
        self._platform = platform
        self._attempts = 0  # live updates tried since the last one that went through

    async def create_first(self) -> None:
        """Create the card once its turn in its channel's line comes, unless the final is on its way by then."""
        # Not cut short when the answer ends meanwhile: the final then goes out finished in this turn.
        await self._card.wait_turn()
        if not self._finishing.is_set():
            # Rendered when the budget grants the call: a card created late already shows the text so far.
            await self._card.create(self._cursor.view, deadline=self._deadline(), interrupt=self._finishing)

    async def send(self) -> None:
        """Send the update due now: the current part's newest state, a new part's card, or a roll-over."""
        if self._state.final:
            # The final snapshot is finish()'s job; nothing live is left to send.
            self._pacing.clear()
            return
        if self._cursor.overflows() and self._card.handle is not None:
            await self._roll_over()
            self._pacing.again()
            return
        self._pacing.sent()
        if self._card.handle is None:
            await self._create_part()
            return
        self._attempts += 1
        outcome, sent = await self._card.update(self._cursor.view, interrupt=self._finishing)
        if sent is not None:
            await self._after_update(outcome, sent=sent)

    async def _create_part(self) -> None:
        """The card of this part does not exist yet (creation was refused or timed out): try again."""
        created = self._cursor.capped_view()
        outcome = await self._card.create(created, deadline=self._deadline(), interrupt=self._finishing)
        if outcome is CallOutcome.TOO_LONG and self._cursor.shrink(len(created.answer)):
            self._pacing.again()
        elif outcome is CallOutcome.TOO_LONG:
            self._card.gone = True

    async def _after_update(self, outcome: CallOutcome, *, sent: CardSnapshot) -> None:
        if outcome is CallOutcome.OK:
            self._attempts = 0
        elif outcome in (CallOutcome.INTERRUPTED, CallOutcome.TIMEOUT):
            return
        elif outcome is CallOutcome.THROTTLED:
            # The bucket is paused: the next update waits for it and carries the newest text.
            self._pacing.again()
        elif outcome is CallOutcome.RETRY:
            # Transient: back off, then coalesce into the next update, which carries the newest text.
            self._pacing.again(wake=False)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._caller.backoff(self._attempts - 1)):
                    await self._finishing.wait()
            self._wake()
        elif outcome is CallOutcome.TOO_LONG:
            # Aim below what was refused, not below what streamed in meanwhile.
            if self._cursor.shrink(len(sent.answer)):
                self._pacing.again()
            else:
                self._card.gone = True
        else:
            log.warning("card.live_updates_stopped", platform=self._platform, reason=outcome.value)
            self._card.gone = True
            self._card.vanished = outcome is CallOutcome.GONE

    async def _roll_over(self) -> None:
        """Close the current card at a clean split point and open the next part."""
        cut = self._cursor.split()
        closing = self._cursor.closing_view(cut)
        outcome = await self._delivery.deliver_part(closing, deadline=self._deadline())
        if outcome == "too_long":
            if self._cursor.shrink(cut):
                return  # the platform refused this much: close the card at a smaller cut on the next flush
            await self._delivery.give_up_card(closing)  # even a minimal part is refused: the message below has it
        self._cursor.advance(cut)
        self._card.next_part()
        if not self._finishing.is_set():
            created = self._cursor.capped_view()
            made = await self._card.create(created, deadline=self._deadline(), interrupt=self._finishing)
            if made is CallOutcome.TOO_LONG:
                self._cursor.shrink(len(created.answer))

    def _deadline(self) -> float:
        """When a card's creation or closing, starting now, gives up."""
        return time.monotonic() + self._final_deadline_s
