"""The platform card a turn is streaming now (its latest part), and what the platform said of it.

Creating, updating and finalizing it all go through the card's
:class:`~botgateway.cards.caller.CardCaller`; a sink may move the card (a new
message after a mode change), and the new handle is adopted here, with its
open-card record. Where the platform takes a channel's new messages in line
(:class:`~botgateway.sink.ChannelLines`), the card's first creation waits for
its place in that line first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.cards.records import OpenCardRecords
from botgateway.sink import CardHandle, CardSink, CardTarget, LinePlace
from botgateway.snapshot import CardSnapshot

__all__ = ["LiveCard"]

log = structlog.get_logger(__name__)


class LiveCard:
    """The card being streamed: its handle once created, and whether it can still be changed."""

    def __init__(
        self,
        sink: CardSink,
        target: CardTarget,
        caller: CardCaller,
        records: OpenCardRecords,
        *,
        on_visible: Callable[[CardSnapshot], None],
    ) -> None:
        self.place: LinePlace | None = None
        """The card's place in its channel's line for its first message, until it is made (None: no line)."""
        self._sink = sink
        self._target = target
        self._caller = caller
        self._records = records
        self._on_visible = on_visible
        self.handle: CardHandle | None = None
        """The card, once created."""
        self.gone = False
        """No more live updates: the platform refused the card for good."""
        self.vanished = False
        """The platform said the card no longer exists (not just "cannot update")."""
        self._reserved = False  # this part's final call is reserved

    async def wait_turn(self) -> None:
        """Wait for the card's turn in its channel's line (at once without one). Never cut short: a card that left
        its place would lose it, and its answer, ready meanwhile, goes out finished when the turn comes."""
        if self.place is not None:
            await self.place.turn()

    def leave_line(self) -> None:
        """The card needs no place in its channel's line any more (its first message was made, or it is ending)."""
        if self.place is not None:
            self.place.leave()
            self.place = None

    def next_part(self) -> None:
        """Forget the current card: the next part gets a card of its own."""
        self.handle = None
        self.gone = False
        self.vanished = False
        self._reserved = False

    async def create(
        self, content: CardSnapshot | Callable[[], CardSnapshot], *, deadline: float, interrupt: asyncio.Event | None
    ) -> CallOutcome:
        """Create the card showing ``content`` (a snapshot, or a render called once the budget grants the call);
        ``OK`` sets :attr:`handle` and records the card as open."""
        result: list[CardHandle] = []
        shown: list[CardSnapshot] = []
        await self.wait_turn()
        if not self._reserved:
            # Reserved before the wait, as the card is planned: cards planned meanwhile see the call taken.
            await self._caller.reserve_final()
            self._reserved = True

        async def create() -> None:
            shown.append(content() if callable(content) else content)
            result.append(await self._sink.create(self._target, shown[-1]))

        outcome = await self._caller.call("create", create, deadline=deadline, interrupt=interrupt)
        if outcome is not CallOutcome.INTERRUPTED:
            self.leave_line()  # its slot was used (or refused): the next card of the channel goes
        if outcome is not CallOutcome.OK or not result:
            if outcome is not CallOutcome.INTERRUPTED:
                part = shown[-1].part if shown else 0
                log.warning("card.create_failed", platform=self._target.platform, part=part, reason=outcome.value)
                if outcome in (CallOutcome.GONE, CallOutcome.FAILED):
                    self.gone = True
            return outcome if outcome is not CallOutcome.OK else CallOutcome.FAILED
        self._on_visible(shown[-1])
        self.handle = result[0]
        self._caller.metrics.parts += 1
        await self._records.remember(self.handle)
        return CallOutcome.OK

    async def update(
        self, render: Callable[[], CardSnapshot], *, interrupt: asyncio.Event | None
    ) -> tuple[CallOutcome, CardSnapshot | None]:
        """One live update, not retried (a throttled or failed update is simply carried by the next).

        ``render`` is called once the budget grants the call, so the update shows the latest state,
        never what was there when it began to wait. Returns the outcome and what was sent (None: nothing).
        """
        handle = self.handle
        assert handle is not None
        sent: list[CardSnapshot] = []

        async def update() -> None:
            sent.append(render())
            await self.adopt(handle, await self._sink.update(handle, sent[0]))

        # Never urgent, not even the first: finals and new cards go first, and a live update that waits
        # only carries newer text.
        outcome = await self._caller.call("update", update, deadline=None, priority=False, interrupt=interrupt,
                                          retry=False)
        if outcome is CallOutcome.OK:
            self._on_visible(sent[0])
        return outcome, (sent[0] if sent else None)

    async def finalize(self, snapshot: CardSnapshot, *, deadline: float) -> CallOutcome:
        """Show the final ``snapshot`` on the card, retried until ``deadline``."""
        handle = self.handle
        assert handle is not None

        async def finalize() -> None:
            await self.adopt(handle, await self._sink.finalize(handle, snapshot))

        outcome = await self._caller.call("finalize", finalize, deadline=deadline)
        if outcome is CallOutcome.OK:
            self._on_visible(snapshot)
        return outcome

    async def adopt(self, old: CardHandle, new: object) -> None:
        """Keep the handle a sink returned (it may have moved the card, e.g. to a new message)."""
        if not isinstance(new, CardHandle) or new is old:
            return
        self.handle = new
        if new.card_id != old.card_id:
            await self._records.forget(old)
            await self._records.remember(new)
