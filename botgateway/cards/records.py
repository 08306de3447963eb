"""Open-card records: a card is on record in the Store from creation until it is final.

So a card whose process died is finalized by start-up recovery (or by a live
replica) instead of spinning forever. The record names its owner, the gateway
process streaming the card.
"""

from __future__ import annotations

import time

import structlog

from botgateway.sink import CardHandle, CardTarget, target_to_dict
from botgateway.stores.base import OpenCard, Store

__all__ = ["OpenCardRecords"]

log = structlog.get_logger(__name__)


class OpenCardRecords:
    """The open-card records of one turn's cards (every part), kept in ``store`` (None: none kept)."""

    def __init__(self, store: Store | None, target: CardTarget, *, instance_id: str = "") -> None:
        self._store = store
        self._target = target
        self._instance_id = instance_id
        self._open: list[str] = []

    async def remember(self, handle: CardHandle) -> None:
        """Record ``handle``'s card as open (a Store failure is logged, never raised)."""
        if self._store is None:
            return
        try:
            await self._store.add_open_card(
                OpenCard(
                    platform=self._target.platform,
                    card_id=handle.card_id,
                    turn_id=self._target.turn_id,
                    target=target_to_dict(handle.target),
                    created_at=time.time(),
                    owner=self._instance_id,
                )
            )
            self._open.append(handle.card_id)
        except Exception:
            log.exception("card.store_add_failed", platform=self._target.platform)

    async def forget(self, handle: CardHandle) -> None:
        """Drop ``handle``'s record once the card is final or gone (only records this turn made)."""
        if self._store is None or handle.card_id not in self._open:
            return
        try:
            await self._store.remove_open_card(self._target.platform, handle.card_id)
            self._open.remove(handle.card_id)
        except Exception:
            log.exception("card.store_remove_failed", platform=self._target.platform)
