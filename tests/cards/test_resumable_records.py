"""A typed question's open-card records carry its progress, rewritten behind the turn, never after their removal.

A real SQLite store behind a gate: its writes can be held, so a rewrite is
caught in flight while the card is removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.background import BackgroundTasks
from botgateway.cards.records import OpenCardRecords, ResumableRecords
from botgateway.sink import CardHandle, CardTarget
from botgateway.stores.base import OpenCard
from botgateway.stores.sqlite import SqliteStore


class GatedStore:
    """The SQLite store, each ``add_open_card`` held until ``release`` is set (``adding`` says one waits;
    ``removing`` that a removal reached the store)."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.adding = asyncio.Event()
        self.removing = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def add_open_card(self, card: OpenCard) -> None:
        self.adding.set()
        await self.release.wait()
        await self.store.add_open_card(card)

    async def remove_open_card(self, platform: str, card_id: str) -> None:
        self.removing.set()
        await self.store.remove_open_card(platform, card_id)

    async def open_cards(self, platform: str | None = None) -> list[OpenCard]:
        return await self.store.open_cards(platform)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    sqlite = SqliteStore(tmp_path / "gw.db")
    await sqlite.open()
    try:
        yield sqlite
    finally:
        await sqlite.close()


TARGET = CardTarget(platform="test", chat_id="chat-1", turn_id="t1")


async def test_each_record_carries_the_progress_and_is_rewritten_when_it_changes(store: SqliteStore) -> None:
    progress: dict[str, Any] = {"calls": []}
    background = BackgroundTasks()
    records = ResumableRecords(store, lambda: dict(progress), background=background)
    cards = OpenCardRecords(records, TARGET, instance_id="host-1")
    handle = CardHandle("card-1", TARGET)
    await cards.remember(handle)
    await cards.settled()
    [card] = await store.open_cards()
    assert card.resume == {"calls": []} and card.owner == "host-1"

    progress["calls"] = [{"name": "find_server"}]
    records.progressed()
    await background.wait(timeout=10)
    [card] = await store.open_cards()
    assert card.resume == {"calls": [{"name": "find_server"}]}
    await cards.forget(handle)
    assert await store.open_cards() == []
    await background.aclose()


async def test_a_rewrite_in_flight_never_brings_back_a_removed_record(store: SqliteStore) -> None:
    gated = GatedStore(store)
    background = BackgroundTasks()
    records = ResumableRecords(gated, lambda: {"calls": []}, background=background)
    cards = OpenCardRecords(records, TARGET, instance_id="host-1")
    handle = CardHandle("card-1", TARGET)
    await cards.remember(handle)
    await cards.settled()

    gated.adding.clear()
    gated.release.clear()
    records.progressed()
    records.progressed()  # coalesced into the rewrite already waiting
    await asyncio.wait_for(gated.adding.wait(), 10)  # the rewrite is in flight, held
    forgetting = asyncio.create_task(cards.forget(handle))
    for _ in range(100):  # event-loop turns, no I/O: a removal not held behind the rewrite reaches the store here
        if gated.removing.is_set():
            break
        await asyncio.sleep(0)
    assert not gated.removing.is_set(), "the removal went ahead of the rewrite in flight"
    gated.release.set()
    await asyncio.wait_for(forgetting, 10)
    await background.wait(timeout=10)
    assert await store.open_cards() == []
    await background.aclose()
