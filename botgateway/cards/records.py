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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from botgateway.background import BackgroundTasks
from botgateway.sink import CardHandle, CardTarget, target_to_dict
from botgateway.stores.base import OpenCard, OpenCardStore

__all__ = ["OpenCardRecords"]

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
