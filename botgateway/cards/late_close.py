"""Closing a card in the background after its answer went out as a fallback message.

The answer reached the user another way, but the card still shows its live
state ("Thinking…", a Stop button). It is finalized later, with backoff, for
``late_close_s``, through the same budget at priority, on the call the card
reserved for its final (released once closing ends): with a note pointing at
the message below, or with the answer itself when the fallback failed too. Its
open-card record leaves the Store only once it is final; if closing never
succeeds, start-up recovery closes it. No card keeps spinning.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.cards.records import OpenCardRecords
from botgateway.sink import CardHandle, CardSink, CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

__all__ = ["LateCloser", "note_view"]

log = structlog.get_logger(__name__)


def note_view(snapshot: CardSnapshot) -> CardSnapshot:
    """The card's closing content: final, no answer, a note that the answer is in the message below."""
    note = t(snapshot.locale, "answer_below")
    return replace(
        snapshot,
        status=snapshot.status if snapshot.final else "done",
        answer="",
        thought="",
        continued=False,
        error=f"{snapshot.error}\n\n{note}" if snapshot.error else note,
        seq=snapshot.seq + 1,
    )


class LateCloser:
    """Closes one turn's cards in the background after fallback deliveries."""

    def __init__(
        self,
        sink: CardSink,
        target: CardTarget,
        caller: CardCaller,
        records: OpenCardRecords,
        *,
        late_close_s: float,
        backoff: Backoff,
        final_deadline_s: float,
        background: BackgroundTasks | None,
        owner: str,
        on_visible: Callable[[CardSnapshot], None],
    ) -> None:
        self._sink = sink
        self._target = target
        self._caller = caller
        self._records = records
        self.late_close_s = late_close_s
        """How long a card keeps being closed in the background (0: never; recovery closes it)."""
        self._backoff = backoff
        self._final_deadline_s = final_deadline_s
        self._background = background
        self._owner = owner
        self._on_visible = on_visible
        self._tasks: list[asyncio.Task[bool]] = []

    def close_later(self, handle: CardHandle, snapshot: CardSnapshot, *, delivered: bool) -> None:
        """Finalize ``handle``'s card in the background: with a note pointing at the fallback
        message when that went out, else with ``snapshot`` itself (the answer, one more chance)."""
        if self.late_close_s <= 0:
            return  # the open-card record stays: start-up recovery closes the card
        closing = note_view(snapshot) if delivered else snapshot
        task = asyncio.create_task(self._close(handle, closing), name=f"card-close:{self._owner}:{handle.card_id}")
        self._tasks.append(task)
        if self._background is not None:
            self._background.track(task)

    @property
    def closing(self) -> bool:
        """True while a card is being closed in the background."""
        return any(not task.done() for task in self._tasks)

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """True when every card closed in the background ended final (or there was none);
        False when closing gave up, was cancelled, or ``timeout`` passed first."""
        tasks = list(self._tasks)
        if not tasks:
            return True
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            return False
        return all(not task.cancelled() and task.exception() is None and task.result() for task in done)

    def running(self) -> list[asyncio.Task[bool]]:
        """The closing tasks still running (for shutdown)."""
        return [task for task in self._tasks if not task.done()]

    async def _close(self, handle: CardHandle, snapshot: CardSnapshot) -> bool:
        """Retry finalizing ``handle`` with backoff for ``late_close_s``; True once the card is final."""
        give_up_at = time.monotonic() + self.late_close_s
        attempt = 0
        outcome = CallOutcome.TIMEOUT
        closed = False
        log.info("card.close_scheduled", platform=self._target.platform, turn_id=self._target.turn_id, card_id=handle.card_id)
        while True:
            # The platform just refused this card for final_deadline_s: give it a moment before each try.
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(self._backoff.delay(attempt), remaining))
            attempt += 1

            async def finalize(current: CardSnapshot = snapshot) -> None:
                await self._sink.finalize(handle, current)

            # Each attempt gets a full final deadline (budget wait and call), even the last one.
            deadline = time.monotonic() + max(self._final_deadline_s, 1.0)
            outcome = await self._caller.call("finalize", finalize, deadline=deadline, retry=False)
            if outcome is CallOutcome.OK:
                self._on_visible(snapshot)
            if outcome in (CallOutcome.OK, CallOutcome.GONE):
                # GONE: deleted, or already final (an earlier finalize that timed out here did land).
                await self._records.forget(handle)
                closed = True
                break
            if outcome is CallOutcome.TOO_LONG and snapshot.blocks:
                snapshot = replace(snapshot, blocks=())  # the note alone, then
                continue
            if outcome in (CallOutcome.TOO_LONG, CallOutcome.FAILED):
                break  # refused for good: retrying the same call cannot help
        if not any(not task.done() and task is not asyncio.current_task() for task in self._tasks):
            self._caller.release()  # the last card closed (or given up): the turn holds no more of the budget
        # Giving up leaves the open-card record in the Store: start-up recovery closes the card.
        (log.info if closed else log.warning)(
            "card.closed_late" if closed else "card.close_gave_up",
            platform=self._target.platform,
            turn_id=self._target.turn_id,
            card_id=handle.card_id,
            attempts=attempt,
            outcome=outcome.value,
        )
        return closed
