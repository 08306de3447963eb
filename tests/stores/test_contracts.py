"""The Store's narrow contracts: they split it without overlap, both back-ends satisfy each, and a part that needs
one concern takes a fake implementing only that one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pytest

from botgateway.config.schedules import ScheduleConfig
from botgateway.schedules.runner import ScheduleRunner, SystemClock
from botgateway.schedules.slots import slot_key
from botgateway.stores.base import (
    AuditStore,
    ClaimStore,
    ConversationStore,
    CounterStore,
    DocumentStore,
    FeedbackStore,
    InstanceStore,
    LeaseStore,
    OpenCardStore,
    Store,
    StoreLifecycle,
    UsageStore,
)
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.claims import MemoryClaims
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

NARROW = (
    ConversationStore, ClaimStore, OpenCardStore, InstanceStore, CounterStore, LeaseStore, DocumentStore, AuditStore,
    UsageStore, FeedbackStore, StoreLifecycle,
)
"""Every concern's protocol; :class:`Store` is their union."""

SLOT = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
"""Monday 2026-11-30 09:00 in Asia/Shanghai: a slot of the schedule below."""


def _members(protocol: type) -> set[str]:
    """The names a protocol declares itself (methods and attributes), not those of its bases."""
    declared = {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}
    return declared | set(vars(protocol).get("__annotations__", {}))


def test_the_narrow_protocols_split_the_store_without_overlap() -> None:
    assert _members(Store) == set()  # nothing of its own: only the union of the concerns
    seen: dict[str, str] = {}
    for protocol in NARROW:
        members = _members(protocol)
        assert members, f"{protocol.__name__} declares nothing"
        assert not members & seen.keys(), f"{protocol.__name__} repeats {sorted(members & seen.keys())}"
        seen.update(dict.fromkeys(members, protocol.__name__))
    assert {base for base in Store.__bases__ if base is not Protocol} == set(NARROW)


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    prefix = unique_prefix()
    opened = SqliteStore(tmp_path / "state.db") if request.param == "sqlite" else RedisStore(REDIS_URL, prefix)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
        if request.param == "redis":
            await purge_prefix(prefix)


async def test_each_back_end_satisfies_every_narrow_protocol(store: Store) -> None:
    for protocol in NARROW:
        assert isinstance(store, protocol), protocol.__name__
    assert isinstance(store, Store)


async def test_a_fake_of_claims_alone_is_enough_for_the_schedule_runner() -> None:
    schedule = ScheduleConfig(name="stopped-prod", cron="0 9 * * 1-5", timezone="Asia/Shanghai", to=["slack:C0OPS"],
                              prompt="List the stopped servers in prod", role="oncall")
    ran: list[datetime] = []

    async def run_report(_: ScheduleConfig, slot: datetime) -> None:
        ran.append(slot)

    fake = MemoryClaims()
    claims: ClaimStore = fake  # it implements claim() only, no other concern of the Store
    assert not isinstance(claims, AuditStore | DocumentStore | ConversationStore)
    replicas = [ScheduleRunner([schedule], store=claims, run_report=run_report, clock=SystemClock()) for _ in range(2)]
    assert [len(await replica.tick(SLOT)) for replica in replicas] == [1, 0]  # the second replica finds it claimed
    assert ran == [SLOT]
    assert fake.claimed == [slot_key("stopped-prod", SLOT)] * 2
