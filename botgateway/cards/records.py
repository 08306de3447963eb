"""Open-card records: a card is on record in the Store from creation until it is final.

So a card whose process died is finalized by start-up recovery (or by a live
replica) instead of spinning forever. The record names its owner, the gateway
process streaming the card.

The record is written behind the card: :meth:`OpenCardRecords.remember`
returns at once and the write runs in the background, so the card's first
text never waits for the Store. With SQLite every write of the process queues
on one connection (a burst of questions queues a dedupe claim each), and a
card that waited there showed nothing for as long. A turn's record writes
stay in order (a record is removed only after it was added), and
:meth:`OpenCardRecords.forget`, on the way out of the turn, waits for them.
The price is a short window after creation in which a crash leaves the card
unrecorded, against a card that shows nothing while the Store is busy.

A typed question's cards are recorded through :class:`ResumableRecords`, which
puts on each record what a recovering process needs to run the turn again
(:mod:`botgateway.turns.resume_record`) and writes it again, behind, when the
turn's progress changes (a tool call starts or ends).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from botgateway.background import BackgroundTasks
from botgateway.sink import CardHandle, CardTarget, target_to_dict
from botgateway.stores.base import OpenCard, OpenCardStore

__all__ = ["OpenCardRecords", "ResumableRecords"]

log = structlog.get_logger(__name__)


class OpenCardRecords:
    """The open-card records of one turn's cards (every part), kept in ``store`` (None: none kept)."""

    def __init__(self, store: OpenCardStore | None, target: CardTarget, *, instance_id: str = "") -> None:
        self._store = store
        self._target = target
        self._instance_id = instance_id
        self._open: list[str] = []
        self._writes = BackgroundTasks()
        self._last: asyncio.Task[None] | None = None  # the newest write; the next one starts after it

    async def remember(self, handle: CardHandle) -> None:
        """Record ``handle``'s card as open, in the background (a Store failure is logged, never raised)."""
        if self._store is None:
            return
        record = OpenCard(
            platform=self._target.platform,
            card_id=handle.card_id,
            turn_id=self._target.turn_id,
            target=target_to_dict(handle.target),
            created_at=time.time(),
            owner=self._instance_id,
        )
        self._open.append(handle.card_id)
        self._queue(lambda store: store.add_open_card(record), "card.store_add_failed")

    async def forget(self, handle: CardHandle) -> None:
        """Drop ``handle``'s record once the card is final or gone (only records this turn made);
        returns once the Store has dropped it."""
        if self._store is None or handle.card_id not in self._open:
            return
        self._open.remove(handle.card_id)
        platform, card_id = self._target.platform, handle.card_id
        write = self._queue(lambda store: store.remove_open_card(platform, card_id), "card.store_remove_failed")
        if write is not None:
            # Shielded: a caller stopped now (shutdown) still leaves the Store right.
            await asyncio.shield(write)

    async def settled(self) -> None:
        """Wait until every record write queued so far has been made (or has failed)."""
        if self._last is not None:
            await asyncio.wait([self._last])

    def _queue(self, write: Callable[[OpenCardStore], Awaitable[object]], failure: str) -> asyncio.Task[None] | None:
        """Run ``write`` after this turn's earlier record writes; its task (None once the writes were closed)."""
        store, before = self._store, self._last
        assert store is not None

        async def run() -> None:
            if before is not None:
                await asyncio.wait([before])
            try:
                await write(store)
            except Exception:
                log.exception(failure, platform=self._target.platform)

        task = self._writes.spawn(run(), name=f"card-record:{self._target.platform}:{self._target.turn_id}")
        if task is not None:
            self._last = task
        return task


class ResumableRecords:
    """The open-card store of one turn's cards, each record carrying ``resume()``: the turn's question and progress.

    Handed to the turn's cards in place of the Store: each record they write is stamped with ``resume()`` as it is
    then, and :meth:`progressed` writes it again on the records still open, in the background (latest wins: one
    rewrite waits at most). A rewrite never lands after its record's removal (one lock orders the writes), so a
    card that is final is never put back on record.
    """

    def __init__(
        self, store: OpenCardStore, resume: Callable[[], Mapping[str, Any]], *, background: BackgroundTasks
    ) -> None:
        """``background`` owns the rewrites (cancelled at shutdown: a record then keeps what it said before)."""
        self._store = store
        self._resume = resume
        self._background = background
        self._open: dict[tuple[str, str], OpenCard] = {}
        self._lock = asyncio.Lock()
        self._rewrite_waiting = False

    async def add_open_card(self, card: OpenCard) -> None:
        """Record ``card`` as open, with the turn's record as it is now."""
        self._open[(card.platform, card.card_id)] = card
        async with self._lock:
            await self._store.add_open_card(dataclasses.replace(card, resume=self._resume()))

    async def remove_open_card(self, platform: str, card_id: str) -> None:
        """Forget the card (after any rewrite of it already under way)."""
        self._open.pop((platform, card_id), None)
        async with self._lock:
            await self._store.remove_open_card(platform, card_id)

    async def open_cards(self, platform: str | None = None) -> list[OpenCard]:
        """The Store's open cards."""
        return await self._store.open_cards(platform)

    def progressed(self) -> None:
        """The turn's record changed: write it again on its open cards, behind the turn (returns at once)."""
        if self._rewrite_waiting or not self._open:
            return  # the waiting rewrite reads the record when it runs; a card not yet on record gets it when added
        self._rewrite_waiting = True
        self._background.spawn(self._rewrite(), name="card-record-progress")

    async def _rewrite(self) -> None:
        async with self._lock:
            self._rewrite_waiting = False
            resume = self._resume()
            for key, card in list(self._open.items()):
                if key not in self._open:
                    continue  # removed while an earlier one was written: it stays removed
                try:
                    await self._store.add_open_card(dataclasses.replace(card, resume=resume))
                except Exception:
                    log.exception("card.store_progress_failed", platform=card.platform)
