"""Usage rows in both stores: real SQLite (tmp_path) and real Redis (127.0.0.1:6379), each test its own prefix."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from botgateway.stores import Store
from botgateway.stores._usage_codec import encode_usage
from botgateway.stores.base import UsageRow
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

StoreFactory = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Store instances sharing one backing (file or prefix): a second call is another process."""
    opened: list[Store] = []
    prefix = unique_prefix()

    async def factory() -> Store:
        store: SqliteStore | RedisStore
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "state.db")
        else:
            store = RedisStore(REDIS_URL, prefix)
        opened.append(store)
        await store.open()
        return store

    yield factory
    for store in opened:
        await store.close()
    if request.param == "redis":
        await purge_prefix(prefix)


def row(at: float, model: str = "deepseek-chat", **fields: object) -> UsageRow:
    return UsageRow(at=at, model=model, **fields)  # type: ignore[arg-type]


async def test_rows_round_trip_with_every_field(make_store: StoreFactory) -> None:
    store = await make_store()
    priced = UsageRow(
        at=1_800_000_000.25, turn_id="t1", conversation_id="slack:T1:C1:1.2", principal="slack:U0ALICE",
        platform="slack", channel="C0OPS", model="gpt-4o-2024-08-06", purpose="turn", prompt_tokens=1200,
        completion_tokens=300, cached_tokens=1024, reasoning_tokens=256, cost=0.004215, currency="USD",
    )
    unpriced = UsageRow(at=1_800_000_001.0, principal="gateway", model="本地模型", purpose="summary",
                        prompt_tokens=5, completion_tokens=1)
    await store.record_usage([priced, unpriced])
    # Another process on the same backing reads what this one wrote.
    assert await (await make_store()).usage_rows() == [priced, unpriced]


async def test_newest_rows_since_a_time_oldest_first(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.record_usage([row(1000.0 + n, prompt_tokens=n) for n in range(5)])
    await store.record_usage([row(1010.0, prompt_tokens=10)])
    await store.record_usage([])  # nothing to write is no write at all

    assert [r.prompt_tokens for r in await store.usage_rows()] == [0, 1, 2, 3, 4, 10]
    assert [r.prompt_tokens for r in await store.usage_rows(since=1003.0)] == [3, 4, 10]
    assert [r.prompt_tokens for r in await store.usage_rows(limit=2)] == [4, 10]
    assert await store.usage_rows(since=2000.0) == []


async def test_the_same_rows_written_again_are_stored_once(make_store: StoreFactory) -> None:
    store = await make_store()
    batch = [row(1000.0, prompt_tokens=1, row_id="t1:0"), row(1001.0, prompt_tokens=2, row_id="t1:1")]
    await store.record_usage(batch)
    await store.record_usage(batch)  # the writer retries a batch whose reply was lost
    await store.record_usage([batch[1], row(1002.0, prompt_tokens=3, row_id="t2:0")])  # a batch only partly new
    await (await make_store()).record_usage(batch)  # another process, the same rows
    # Rows without an id (of an older release) are all kept.
    await store.record_usage([row(1003.0, prompt_tokens=4), row(1003.0, prompt_tokens=4)])
    stored = await (await make_store()).usage_rows()
    assert [(r.prompt_tokens, r.row_id) for r in stored] == [(1, "t1:0"), (2, "t1:1"), (3, "t2:0"), (4, ""), (4, "")]


async def test_a_sqlite_file_of_an_earlier_release_gets_row_ids(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE model_usage (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, body TEXT NOT NULL)")
        old.execute("INSERT INTO model_usage (at, body) VALUES (?, ?)", (900.0, encode_usage(row(900.0, prompt_tokens=9))))
    store = SqliteStore(path)
    await store.open()
    try:
        batch = [row(1000.0, prompt_tokens=1, row_id="t1:0")]
        await store.record_usage(batch)
        await store.record_usage(batch)
        assert [r.prompt_tokens for r in await store.usage_rows()] == [9, 1]
    finally:
        await store.close()


async def test_sqlite_sweep_drops_rows_past_the_audit_retention_and_the_cap(tmp_path: Path) -> None:
    now = [10_000.0]
    store = SqliteStore(tmp_path / "s.db", audit_retention_s=100.0, usage_max_rows=3, sweep_interval_s=0,
                        clock=lambda: now[0])
    await store.open()
    try:
        await store.record_usage([row(9_850.0, prompt_tokens=1)])  # past the retention when the sweep runs
        await store.record_usage([row(9_950.0 + n, prompt_tokens=10 + n) for n in range(4)])
        await store.record_usage([row(9_990.0, prompt_tokens=99)])  # this write's sweep keeps the newest three
        assert [r.prompt_tokens for r in await store.usage_rows()] == [12, 13, 99]
    finally:
        await store.close()
