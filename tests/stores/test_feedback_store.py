"""Votes on answers in both stores (real SQLite, real Redis on 127.0.0.1:6379): one per voter and answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botgateway.stores.base import FeedbackRecord, Store
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    prefix = unique_prefix()
    opened: SqliteStore | RedisStore
    if request.param == "sqlite":
        opened = SqliteStore(tmp_path / "state.db", audit_max_len=3)
    else:
        opened = RedisStore(REDIS_URL, prefix, audit_max_len=3)
    await opened.open()
    yield opened
    await opened.close()
    if request.param == "redis":
        await purge_prefix(prefix)


def vote(turn_id: str, voter: str, vote: str, at: float, **extra: object) -> FeedbackRecord:
    return FeedbackRecord(turn_id=turn_id, voter=voter, vote=vote, at=at, **extra)  # type: ignore[arg-type]


async def test_a_second_vote_of_the_same_voter_replaces_the_first(store: Store) -> None:
    sources = ({"provider": "aliyun", "label": "Alibaba Cloud", "account": "prod", "region": "cn-hangzhou"},)
    await store.record_feedback(vote("t1", "slack:U1", "up", 100.0, model="m", tools=("find",), sources=sources,
                                     question="where is 10.0.1.5", asker="slack:U9", platform="slack", channel="C1"))
    await store.record_feedback(vote("t1", "slack:U2", "up", 101.0))
    await store.record_feedback(vote("t1", "slack:U1", "down", 102.0, reason="stale data", model="m", tools=("find",),
                                     sources=sources))
    records = await store.feedback_records()
    assert [(r.voter, r.vote) for r in records] == [("slack:U2", "up"), ("slack:U1", "down")]
    changed = await store.feedback_vote("t1", "slack:U1")
    assert changed is not None and changed.reason == "stale data" and changed.at == 102.0
    assert changed.tools == ("find",) and changed.sources == sources
    assert await store.feedback_vote("t1", "slack:U3") is None
    assert await store.feedback_vote("t2", "slack:U1") is None


async def test_votes_are_read_since_a_time_and_the_oldest_beyond_the_cap_are_dropped(store: Store) -> None:
    for n in range(5):  # the store keeps 3 (audit_max_len)
        await store.record_feedback(vote(f"t{n}", "dingtalk:staff1", "up" if n % 2 else "down", 100.0 + n))
    if isinstance(store, SqliteStore):
        store.sweep_interval_s = 0  # the cap applies with the sweep, as for audit records
        await store.record_feedback(vote("t4", "dingtalk:staff1", "up", 104.0))
    assert [r.turn_id for r in await store.feedback_records()] == ["t2", "t3", "t4"]
    assert [r.turn_id for r in await store.feedback_records(since=103.0)] == ["t3", "t4"]
    assert [r.turn_id for r in await store.feedback_records(limit=2)] == ["t3", "t4"]
