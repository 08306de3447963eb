"""The Store contract, run against real SQLite (tmp_path) and real Redis (127.0.0.1:6379).

Redis is not optional here: CI starts it, and a missing Redis must fail these
tests rather than skip them. Each Redis test uses its own key prefix and
deletes its keys afterwards.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from botgateway.config import MemoryConfig
from botgateway.stores import (
    AuditRecord,
    HistorySnapshot,
    HistoryWrite,
    OpenCard,
    Store,
    StoredTurn,
    StoreError,
    ToolCallRow,
    VersionStep,
    open_store,
)
from botgateway.stores._codec import audit_to_dict, decode_card
from botgateway.stores.base import apply_write
from botgateway.stores.redis import RedisStore
from botgateway.stores.redis_history import conversation_keys
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

StoreFactory = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of store instances sharing one backing (file or prefix): a second call is a 'replica'."""
    opened: list[Store] = []
    prefix = unique_prefix()

    async def factory() -> Store:
        store: SqliteStore | RedisStore
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "data" / "state.db", history_ttl_s=3600)
        else:
            store = RedisStore(REDIS_URL, prefix, history_ttl_s=3600)
        opened.append(store)
        await store.open()  # Redis unreachable -> StoreError -> the test errors (never skips)
        return store

    yield factory
    for store in opened:
        await store.close()
    if request.param == "redis":
        await purge_prefix(prefix)


@pytest.fixture
async def store(make_store: StoreFactory) -> Store:
    return await make_store()


def turn(turn_id: str, text: str = "", *, at: float = 0.0, summary: bool = False) -> StoredTurn:
    return StoredTurn(
        turn_id=turn_id,
        messages=(
            {"role": "user", "content": text or f"question {turn_id}"},
            {"role": "assistant", "content": f"answer {turn_id}"},
        ),
        created_at=at or time.time(),
        is_summary=summary,
    )


def ids(turns: list[StoredTurn]) -> list[str]:
    return [t.turn_id for t in turns]


# --- history ----------------------------------------------------------------------


async def test_satisfies_the_protocol(store: Store) -> None:
    assert isinstance(store, Store)


async def test_turn_round_trips_with_tool_calls_and_cjk(store: Store) -> None:
    messages = (
        {"role": "user", "content": "10.0.1.100 是哪台服务器？"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "find_host", "arguments": '{"ip": "10.0.1.100"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "web-01 (running)"},
        {"role": "assistant", "content": "是 web-01，运行中。"},
    )
    original = StoredTurn("t1", messages, 1700000000.5)
    await store.append_turn("conv", original)

    loaded = await store.load_turns("conv")

    assert loaded == [original]
    assert loaded[0].messages[1]["tool_calls"][0]["function"]["arguments"] == '{"ip": "10.0.1.100"}'
    assert loaded[0].is_summary is False


async def test_turns_keep_commit_order_and_conversations_are_separate(store: Store) -> None:
    for n in range(5):
        await store.append_turn("a", turn(f"a{n}"))
    await store.append_turn("b", turn("b0"))

    assert ids(await store.load_turns("a")) == ["a0", "a1", "a2", "a3", "a4"]
    assert ids(await store.load_turns("b")) == ["b0"]
    assert await store.load_turns("nobody") == []


async def test_committing_the_same_turn_twice_keeps_one(store: Store) -> None:
    await store.append_turn("c", turn("t1", "first"))
    await store.append_turn("c", turn("t1", "retried"))
    loaded = await store.load_turns("c")
    assert ids(loaded) == ["t1"]
    assert loaded[0].messages[0]["content"] == "first"


async def test_replace_turns_puts_the_summary_first_and_keeps_the_rest(store: Store) -> None:
    for n in range(4):
        await store.append_turn("c", turn(f"t{n}"))

    await store.replace_turns("c", ["t0", "t1"], turn("s1", "summary one", summary=True))
    loaded = await store.load_turns("c")
    assert ids(loaded) == ["s1", "t2", "t3"]
    assert [t.is_summary for t in loaded] == [True, False, False]

    # The next compression folds the old summary into a new one.
    await store.append_turn("c", turn("t4"))
    await store.replace_turns("c", ["s1", "t2"], turn("s2", "summary two", summary=True))
    assert ids(await store.load_turns("c")) == ["s2", "t3", "t4"]

    # Dropping without a summary (the deterministic fallback).
    await store.replace_turns("c", ["s2"], None)
    assert ids(await store.load_turns("c")) == ["t3", "t4"]

    # Unknown ids are ignored; a summary of everything leaves only the summary.
    await store.replace_turns("c", ["t3", "t4", "missing"], turn("s3", summary=True))
    assert ids(await store.load_turns("c")) == ["s3"]


async def test_clear_forgets_only_that_conversation(store: Store) -> None:
    await store.append_turn("a", turn("a0"))
    await store.append_turn("b", turn("b0"))
    await store.clear("a")
    assert await store.load_turns("a") == []
    assert ids(await store.load_turns("b")) == ["b0"]
    await store.append_turn("a", turn("a1"))
    assert ids(await store.load_turns("a")) == ["a1"]


async def test_a_group_of_history_writes_applies_in_order(store: Store) -> None:
    await store.append_turn("b", turn("b0"))
    writes = [
        HistoryWrite("a", "append", turn("a1")),
        HistoryWrite("b", "append", turn("b1")),
        HistoryWrite("a", "append", turn("a2")),
        HistoryWrite("a", "replace", turn("s", summary=True), ("a1",)),
        HistoryWrite("b", "clear"),
        HistoryWrite("b", "append", turn("b2")),
        HistoryWrite("a", "append", turn("a3")),
    ]

    steps = await store.write_history(writes)
    assert len(steps) == len(writes)
    assert ids(await store.load_turns("a")) == ["s", "a2", "a3"]
    assert ids(await store.load_turns("b")) == ["b2"]

    # Writing the same group again (a retry after an error part-way) leaves the same state.
    await store.write_history(writes)
    assert ids(await store.load_turns("a")) == ["s", "a2", "a3"]
    assert ids(await store.load_turns("b")) == ["b2"]
    in_memory: list[StoredTurn] = []
    for write in (w for w in writes if w.conversation_id == "a"):
        in_memory = apply_write(in_memory, write)
    assert ids(in_memory) == ["s", "a2", "a3"]  # a copy held in memory follows the same rules


async def test_several_histories_are_read_at_once(store: Store) -> None:
    await store.append_turn("a", turn("a0"))
    await store.append_turn("a", turn("a1"))
    await store.append_turn("b", turn("b0"))

    found = await store.load_histories(["a", "nobody", "b", "a"])

    assert sorted(found) == ["a", "b", "nobody"]
    assert [t.turn_id for t in found["a"].turns or ()] == ["a0", "a1"]
    assert [t.turn_id for t in found["b"].turns or ()] == ["b0"]
    assert found["nobody"].turns == ()


async def test_a_redis_read_skips_a_history_whose_version_did_not_move() -> None:
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix)
    try:
        [step] = await store.write_history([HistoryWrite("c", "append", turn("t1"))])
        assert isinstance(step, VersionStep) and step.before == 0
        [next_step] = await store.write_history([HistoryWrite("c", "append", turn("t2"))])
        assert next_step == VersionStep(step.after, step.after + 1)

        current = (await store.load_histories(["c"], unless_version={"c": next_step.after}))["c"]
        old = (await store.load_histories(["c"], unless_version={"c": step.after}))["c"]
        assert current == HistorySnapshot(None, next_step.after)
        assert ids(list(old.turns or ())) == ["t1", "t2"] and old.version == next_step.after

        # Every key gone (as after the idle TTL): the next version is new, never one seen before.
        await purge_prefix(prefix)
        assert (await store.load_histories(["c"]))["c"] == HistorySnapshot((), 0)
        [again] = await store.write_history([HistoryWrite("c", "append", turn("t1"))])
        assert again is not None and again.before == 0 and again.after > next_step.after
    finally:
        await store.close()
        await purge_prefix(prefix)


async def test_redis_refuses_a_history_write_whose_fencing_token_is_older_than_the_conversations() -> None:
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix)
    try:
        async with aioredis.Redis.from_url(REDIS_URL) as raw:
            await raw.set(conversation_keys(prefix, "c").fence, 7)  # a lease was taken with token 7
        steps = await store.write_history([
            HistoryWrite("c", "append", turn("stale"), fence=6),  # a process that lost its lease
            HistoryWrite("c", "append", turn("current"), fence=7),
            HistoryWrite("c", "append", turn("unfenced")),  # no lease held: nothing checked
            HistoryWrite("c", "replace", None, ("current",), fence=6),
            HistoryWrite("c", "clear", fence=5),
        ])
        assert [step is not None and step.refused for step in steps] == [True, False, False, True, True]
        assert ids(await store.load_turns("c")) == ["current", "unfenced"]
        refused = steps[0]
        assert refused is not None and refused.before == refused.after  # the version did not move
        assert steps[-1] == VersionStep(steps[2].after, steps[2].after, refused=True)
    finally:
        await store.close()
        await purge_prefix(prefix)


async def test_a_fencing_token_changes_nothing_in_sqlite(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "one.db")
    try:
        assert await store.write_history([HistoryWrite("c", "append", turn("t1"), fence=3)]) == [None]
        assert ids(await store.load_turns("c")) == ["t1"]  # one process writes the file: its line is the lease
    finally:
        await store.close()


async def test_concurrent_commits_are_all_kept(store: Store) -> None:
    await asyncio.gather(*(store.append_turn("busy", turn(f"t{n:02d}")) for n in range(40)))
    loaded = await store.load_turns("busy")
    assert sorted(ids(loaded)) == [f"t{n:02d}" for n in range(40)]
    assert all(len(t.messages) == 2 for t in loaded)


async def test_compression_racing_new_commits_loses_no_new_turn(store: Store) -> None:
    for n in range(10):
        await store.append_turn("race", turn(f"old{n}"))

    await asyncio.gather(
        store.replace_turns("race", [f"old{n}" for n in range(8)], turn("sum", summary=True)),
        *(store.append_turn("race", turn(f"new{n}")) for n in range(10)),
    )

    loaded = ids(await store.load_turns("race"))
    assert loaded[0] == "sum"
    assert set(loaded) == {"sum", "old8", "old9", *(f"new{n}" for n in range(10))}
    assert len(loaded) == 13


async def test_cancelled_writes_leave_the_store_consistent_and_usable(store: Store) -> None:
    tasks = [asyncio.create_task(store.append_turn("c", turn(f"t{n}"))) for n in range(24)]
    for n, task in enumerate(tasks):
        for _ in range(n % 6):  # cancel at different points of the write (event-loop steps, no timing)
            await asyncio.sleep(0)
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    # The connection must not be left inside a transaction, and no turn may be half-written.
    await store.replace_turns("c", [], turn("s", summary=True))
    await store.append_turn("c", turn("after"))
    loaded = await store.load_turns("c")
    assert loaded[0].turn_id == "s" and loaded[-1].turn_id == "after"
    assert all(len(t.messages) == 2 for t in loaded)
    assert len({t.turn_id for t in loaded}) == len(loaded)


async def test_a_second_instance_sees_the_same_state(make_store: StoreFactory) -> None:
    first = await make_store()
    await first.append_turn("shared", turn("t1"))
    await first.add_open_card(OpenCard("slack", "C1:1.0", "t1", {"channel": "C1"}, 1.0))
    assert await first.claim("slack:Ev1", 60)

    second = await make_store()
    assert ids(await second.load_turns("shared")) == ["t1"]
    assert [c.card_id for c in await second.open_cards()] == ["C1:1.0"]
    assert not await second.claim("slack:Ev1", 60)


# --- dedupe -----------------------------------------------------------------------


async def test_claim_is_true_once(store: Store) -> None:
    assert await store.claim("dingtalk:msg1", 60) is True
    assert await store.claim("dingtalk:msg1", 60) is False
    assert await store.claim("dingtalk:msg2", 60) is True


async def test_concurrent_claims_have_exactly_one_winner(store: Store) -> None:
    results = await asyncio.gather(*(store.claim("slack:EvRetry", 60) for _ in range(25)))
    assert results.count(True) == 1


async def test_a_burst_of_claims_grants_each_key_once(store: Store) -> None:
    keys = [f"slack:Ev{i % 300}" for i in range(900)]  # each key three times, across several batches
    results = await asyncio.gather(*(store.claim(key, 60) for key in keys))
    granted = [key for key, won in zip(keys, results, strict=True) if won]
    assert sorted(granted) == sorted(set(keys))
    assert not await store.claim("slack:Ev7", 60) and await store.claim("slack:Ev300", 60)


async def test_sqlite_writes_the_claims_of_one_moment_together(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "claims.db")
    await store.open()
    try:
        before = store.write_transactions
        results = await asyncio.gather(*(store.claim(f"dingtalk:msg{i}", 60) for i in range(1000)))
        assert all(results)
        # A burst of questions does not queue a transaction each on the one write connection.
        assert store.write_transactions - before <= 3
    finally:
        await store.close()


async def test_claim_is_free_again_after_its_ttl(store: Store) -> None:
    assert await store.claim("short", 0.2)
    assert not await store.claim("short", 0.2)
    deadline = time.monotonic() + 10  # generous: only proves the key does expire
    while not await store.claim("short", 60):
        assert time.monotonic() < deadline, "claim never expired"
        await asyncio.sleep(0.05)
    assert not await store.claim("short", 60)


# --- limits: counters and leases ------------------------------------------------


async def test_a_counter_adds_reads_and_is_shared_by_replicas(make_store: StoreFactory) -> None:
    one, two = await make_store(), await make_store()
    assert await one.add_to_counter("turns:slack:U1:m1", 0, 60) == 0
    assert await one.add_to_counter("turns:slack:U1:m1", 1, 60) == 1
    assert await two.add_to_counter("turns:slack:U1:m1", 1500, 60) == 1501
    assert await one.add_to_counter("turns:slack:U2:m1", 1, 60) == 1


async def test_concurrent_counter_additions_are_all_counted(store: Store) -> None:
    totals = await asyncio.gather(*(store.add_to_counter("flood", 1, 60) for _ in range(40)))
    assert sorted(totals) == list(range(1, 41))


async def test_a_counter_starts_again_after_its_window(store: Store) -> None:
    assert await store.add_to_counter("window", 5, 0.2) == 5
    deadline = time.monotonic() + 10  # generous: only proves the counter does expire
    while await store.add_to_counter("window", 0, 0.2) != 0:
        assert time.monotonic() < deadline, "counter never expired"
        await asyncio.sleep(0.05)
    assert await store.add_to_counter("window", 1, 60) == 1


async def test_leases_are_limited_shared_renewable_and_given_back(make_store: StoreFactory) -> None:
    one, two = await make_store(), await make_store()
    assert await one.take_lease("turns:slack:U1", "t1", 2, 60)
    assert await two.take_lease("turns:slack:U1", "t2", 2, 60)
    assert not await one.take_lease("turns:slack:U1", "t3", 2, 60)
    assert await one.take_lease("turns:slack:U1", "t1", 2, 60)  # renewing is not a new lease
    assert await one.take_lease("turns:slack:U2", "t3", 2, 60)  # another principal
    await two.drop_lease("turns:slack:U1", "t1")
    await two.drop_lease("turns:slack:U1", "never-held")
    assert await one.take_lease("turns:slack:U1", "t3", 2, 60)


async def test_concurrent_lease_takers_never_exceed_the_limit(store: Store) -> None:
    held = await asyncio.gather(*(store.take_lease("busy", f"t{n}", 3, 60) for n in range(20)))
    assert held.count(True) == 3


async def test_a_lease_of_a_dead_holder_lapses(store: Store) -> None:
    assert await store.take_lease("lapse", "killed", 1, 0.2)
    deadline = time.monotonic() + 10  # generous: only proves the lease does lapse
    while not await store.take_lease("lapse", "next", 1, 60):
        assert time.monotonic() < deadline, "lease never lapsed"
        await asyncio.sleep(0.05)
    assert not await store.take_lease("lapse", "killed", 1, 60)


# --- open cards -------------------------------------------------------------------


async def test_open_cards_are_listed_filtered_and_removed(store: Store) -> None:
    slack = OpenCard("slack", "C1:171.1", "t1", {"channel": "C1", "ts": "171.1", "thread_ts": "170.0"}, 10.0)
    ding = OpenCard("dingtalk", "out-track-1", "t2", {"conversation_id": "cid==", "robot": "r"}, 20.0)
    await store.add_open_card(ding)
    await store.add_open_card(slack)
    await store.add_open_card(slack)  # re-adding does not duplicate

    assert await store.open_cards() == [slack, ding]
    assert await store.open_cards("dingtalk") == [ding]
    assert (await store.open_cards("slack"))[0].target["thread_ts"] == "170.0"

    await store.remove_open_card("slack", "C1:171.1")
    await store.remove_open_card("slack", "never-added")
    assert await store.open_cards() == [ding]
    assert await store.open_cards("slack") == []


async def test_an_open_card_keeps_its_owner_and_old_records_read_as_ownerless(make_store: StoreFactory) -> None:
    owned = OpenCard("slack", "C1:2.0", "t1", {"channel": "C1"}, 5.0, owner="instance-a")
    await (await make_store()).add_open_card(owned)
    assert await (await make_store()).open_cards() == [owned]
    # a record written before cards had owners
    legacy = decode_card('{"platform":"slack","card_id":"C1:1.0","turn_id":"t0","target":{},"created_at":1.0}')
    assert legacy.owner == ""


# --- liveness ---------------------------------------------------------------------


async def test_heartbeats_are_shared_between_replicas_and_forgotten_on_shutdown(make_store: StoreFactory) -> None:
    first, second = await make_store(), await make_store()
    assert await first.live_instances() == set()
    await first.heartbeat("instance-a", 60)
    await second.heartbeat("instance-b", 60)
    await second.heartbeat("instance-b", 60)  # beating again keeps one entry
    assert await first.live_instances() == {"instance-a", "instance-b"}
    await first.forget_instance("instance-a")
    await first.forget_instance("never-beat")
    assert await second.live_instances() == {"instance-b"}


async def test_an_instance_that_stops_beating_expires_and_a_beat_extends_it(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.heartbeat("silent", 0.3)
    await store.heartbeat("steady", 60)
    assert await store.live_instances() == {"silent", "steady"}
    deadline = time.monotonic() + 10  # generous: only proves the heartbeat does expire
    while "silent" in await store.live_instances():
        assert time.monotonic() < deadline, "heartbeat never expired"
        await asyncio.sleep(0.05)
    assert await store.live_instances() == {"steady"}
    await store.heartbeat("silent", 60)  # the process came back
    assert await (await make_store()).live_instances() == {"silent", "steady"}


# --- audit ------------------------------------------------------------------------


async def test_audit_records_round_trip(store: SqliteStore | RedisStore) -> None:
    record = AuditRecord(
        turn_id="t1",
        platform="slack",
        conversation_id="C1:170.0",
        user_id="U1",
        question="which host is 10.0.1.100?",
        outcome="done",
        answer="web-01",
        tool_calls=({"name": "find_host", "arguments": {"ip": "10.0.1.100"}, "ok": True},),
        prompt_tokens=120,
        completion_tokens=30,
        started_at=1700000000.0,
        duration_s=2.5,
        extra={"card_updates": 7},
    )
    await store.record_audit(record)
    await store.record_audit(AuditRecord("t2", "dingtalk", "cid==", "staff1", "停止", "stopped"))
    await store.record_audit(AuditRecord("t3", "slack", "C1:170.0", "U2", "again", "failed:interrupted"))

    everything = await store.audit_records()
    assert [r.turn_id for r in everything] == ["t1", "t2", "t3"]
    assert everything[0] == record
    assert [r.turn_id for r in await store.audit_records(conversation_id="C1:170.0")] == ["t1", "t3"]
    assert [r.turn_id for r in await store.audit_records(limit=2)] == ["t2", "t3"]


async def test_the_tool_calls_of_a_turn_that_never_ended_are_audited(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.record_audit(AuditRecord("t0", "slack", "C1", "U1", "before", "done", started_at=1000.0, duration_s=1.0))
    question = "which host is 10.0.1.100?"
    asker = {
        "platform": "slack", "conversation_id": "C1", "user_id": "U1", "question": question,
        "principal": "slack:U1", "team": "T1", "channel": "C0OPS", "role": "oncall",
    }
    await store.record_tool_call(ToolCallRow("t1", "c1", "started", "find_host", 1002.0, arguments={"ip": "10.0.1.100"}, **asker))
    await store.record_tool_call(
        ToolCallRow("t1", "c1", "finished", "find_host", 1003.5, ok=True, summary="1 host", duration_s=1.5, **asker)
    )
    await store.record_tool_call(ToolCallRow("t1", "c2", "started", "list_alarms", 1004.0, **asker))
    await store.record_tool_call(ToolCallRow("t9", "c1", "started", "find_host", 1005.0, **{**asker, "conversation_id": "C9"}))

    # The turn's process was killed: no audit record was written, yet every replica lists its calls.
    replica = await make_store()
    before, killed = await replica.audit_records(conversation_id="C1")
    assert before.turn_id == "t0"
    assert (killed.turn_id, killed.outcome, killed.platform, killed.user_id) == ("t1", "unfinished", "slack", "U1")
    assert killed.question == question and killed.started_at == 1002.0 and killed.duration_s == 2.0
    assert (killed.principal, killed.team, killed.channel, killed.role) == ("slack:U1", "T1", "C0OPS", "oncall")
    assert killed.tool_calls == (
        {
            "name": "find_host", "arguments": {"ip": "10.0.1.100"}, "started_at": 1002.0,
            "ok": True, "summary": "1 host", "duration_s": 1.5,
        },
        {"name": "list_alarms", "arguments": {}, "started_at": 1004.0},
    )
    assert [r.turn_id for r in await store.audit_records()] == ["t0", "t1", "t9"]
    assert [r.turn_id for r in await store.audit_records(limit=2)] == ["t1", "t9"]

    # A turn that does end is audited by its own record, once.
    await store.record_audit(AuditRecord("t1", "slack", "C1", "U1", question, "done", started_at=1002.0, duration_s=3.0))
    assert [(r.turn_id, r.outcome) for r in await replica.audit_records(conversation_id="C1")] == [
        ("t0", "done"),
        ("t1", "done"),
    ]


# --- SQLite specifics -------------------------------------------------------------


async def test_sqlite_creates_its_folder_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "botgateway.db"
    store = await open_store(MemoryConfig(store="sqlite", sqlite_path=str(path)))
    try:
        assert isinstance(store, SqliteStore)
        await store.append_turn("c", turn("t1"))
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT count(*) FROM turns").fetchone()[0] == 1


async def test_sqlite_finds_expired_documents_by_index_not_by_reading_them_all(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    await store.put_document("answer:t1", {"x": 1}, ttl_s=60)  # each put drops the expired documents
    await store.close()
    with sqlite3.connect(path) as db:
        plan = " ".join(str(step[-1]) for step in db.execute(
            "EXPLAIN QUERY PLAN DELETE FROM documents WHERE expires_at <= ?", (0.0,)))
    assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan


async def test_sqlite_history_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    await store.append_turn("c", turn("t1"))
    await store.close()
    reopened = SqliteStore(path)
    try:
        assert ids(await reopened.load_turns("c")) == ["t1"]
    finally:
        await reopened.close()


async def test_sqlite_forgets_idle_conversations_and_expired_claims(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = SqliteStore(tmp_path / "s.db", history_ttl_s=100, sweep_interval_s=10, clock=lambda: now[0])
    try:
        await store.append_turn("idle", turn("i1"))
        await store.append_turn("active", turn("a1"))
        assert await store.claim("k", 90)
        now[0] += 60
        await store.append_turn("active", turn("a2"))
        assert not await store.claim("k", 90)

        now[0] += 60  # "idle" untouched for 120 s > 100 s; "active" for 60 s
        assert await store.load_turns("idle") == []
        assert ids(await store.load_turns("active")) == ["a1", "a2"]
        assert await store.claim("k", 30)  # the old claim expired
        await store.append_turn("idle", turn("i2"))  # a new turn starts a fresh history
        assert ids(await store.load_turns("idle")) == ["i2"]
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("SELECT count(*) FROM turns WHERE turn_id = 'i1'").fetchone()[0] == 0


class HoldingSqlite(SqliteStore):
    """A real SQLite store that can keep a write transaction open until told."""

    async def hold_a_write(self, inside: asyncio.Event, release: asyncio.Event) -> None:
        async def work(db: Any) -> None:
            await db.execute("INSERT INTO claims (key, expires_at) VALUES ('held', 0)")
            inside.set()
            await release.wait()

        await self._transaction(work)


async def test_sqlite_reads_do_not_wait_for_a_write_in_progress(tmp_path: Path) -> None:
    store = HoldingSqlite(tmp_path / "wal.db")
    await store.open()
    inside, release = asyncio.Event(), asyncio.Event()
    try:
        await store.append_turn("c", turn("t1"))
        writing = asyncio.create_task(store.hold_a_write(inside, release))
        await inside.wait()

        # Only a safety net against hanging: the read must come back while the write is still open.
        loaded = await asyncio.wait_for(store.load_turns("c"), 30)
        assert ids(loaded) == ["t1"] and not writing.done()
        release.set()
        await writing
    finally:
        release.set()
        await store.close()


async def test_sqlite_unusable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        await open_store(MemoryConfig(store="sqlite", sqlite_path=str(blocker / "state.db")))
    message = str(info.value)
    assert "not-a-folder" in message and "memory.sqlite_path" in message


# --- Redis specifics --------------------------------------------------------------


async def test_redis_history_expires_with_the_ttl(tmp_path: Path) -> None:
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix, history_ttl_s=1000)
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await store.append_turn("c", turn("t1"))
        await store.replace_turns("c", ["t1"], turn("s", summary=True))
        keys = [key async for key in client.scan_iter(match=f"{prefix}conv:*")]
        assert sorted(key.rsplit(":", 1)[1] for key in keys) == ["order", "turns", "version"]
        for key in keys:
            assert 0 < await client.pttl(key) <= 1_000_000
        assert await store.claim("x", 5)
        assert 0 < await client.pttl(f"{prefix}dedupe:x") <= 5000
    finally:
        await store.close()
        await client.aclose()
        await purge_prefix(prefix)


async def test_open_store_picks_redis_and_hides_the_password_when_unreachable() -> None:
    store = await open_store(MemoryConfig(store="redis", redis_url=REDIS_URL, redis_prefix="bgtest:open:"))
    try:
        assert isinstance(store, RedisStore)
    finally:
        await store.close()

    with pytest.raises(StoreError) as info:
        await open_store(MemoryConfig(store="redis", redis_url="redis://:hunter2secret@127.0.0.1:1/0"))
    message = str(info.value)
    assert "hunter2secret" not in message
    assert "127.0.0.1:1" in message and "memory.redis_url" in message


async def test_sqlite_sweep_caps_the_audit_log(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = SqliteStore(tmp_path / "s.db", audit_max_len=3, sweep_interval_s=10, clock=lambda: now[0])
    try:
        for n in range(6):
            await store.record_audit(AuditRecord(f"t{n}", "slack", "C1", "U1", f"q{n}", "done"))
        now[0] += 60  # the next write sweeps
        await store.record_audit(AuditRecord("t6", "slack", "C1", "U1", "q6", "done"))
        assert [r.turn_id for r in await store.audit_records(limit=100)] == ["t4", "t5", "t6"]
    finally:
        await store.close()


async def test_sqlite_sweep_drops_audit_records_past_their_retention(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = SqliteStore(tmp_path / "s.db", audit_retention_s=86400, sweep_interval_s=10, clock=lambda: now[0])
    try:
        await store.record_audit(AuditRecord("old", "slack", "C1", "U1", "q", "done", started_at=now[0] - 90000))
        await store.record_tool_call(ToolCallRow("killed", "c1", "started", "find_host", now[0] - 90000))
        await store.record_tool_call(ToolCallRow("recent", "c1", "started", "find_host", now[0] - 60))
        await store.record_audit(AuditRecord("new", "slack", "C1", "U1", "q", "done", started_at=now[0] - 30))
        now[0] += 60  # the next write sweeps
        await store.record_audit(AuditRecord("newest", "slack", "C1", "U1", "q", "done", started_at=now[0]))
        assert [r.turn_id for r in await store.audit_records()] == ["recent", "new", "newest"]
    finally:
        await store.close()


async def test_redis_trims_audit_records_past_their_retention() -> None:
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix, audit_retention_s=86400)
    raw = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await store.open()
        old = AuditRecord("old", "slack", "C1", "U1", "q", "done", started_at=1000.0)
        # An entry written long ago: stream ids begin with the time they were written.
        await raw.xadd(f"{prefix}audit", {"record": json.dumps(audit_to_dict(old)), "conversation_id": "C1"}, id="1000000-0")
        await store.record_audit(AuditRecord("new", "slack", "C1", "U1", "q", "done", started_at=time.time()))
        assert [r.turn_id for r in await store.audit_records()] == ["new"]
    finally:
        await raw.aclose()
        await store.close()
        await purge_prefix(prefix)


async def test_reading_a_counter_writes_nothing(store: Store) -> None:
    assert await store.add_to_counter("never-counted", 0, 60) == 0
    assert await store.add_to_counter("counted", 2, 60) == 2
    assert await store.add_to_counter("counted", 0, 60) == 2
    if isinstance(store, SqliteStore):
        before = store.write_transactions
        await store.add_to_counter("never-counted", 0, 60)
        assert store.write_transactions == before
    else:
        assert not await store._redis.exists(f"{store.prefix}counter:never-counted")


async def test_a_document_is_shared_replaced_and_expires(make_store: StoreFactory) -> None:
    first, replica = await make_store(), await make_store()
    assert await first.get_document("alert:g1") is None
    await first.put_document("alert:g1", {"status": "firing", "names": ["磁盘满"]}, ttl_s=60)
    assert await replica.get_document("alert:g1") == {"status": "firing", "names": ["磁盘满"]}
    await replica.put_document("alert:g1", {"status": "resolved"}, ttl_s=60)
    assert await first.get_document("alert:g1") == {"status": "resolved"}
    await first.put_document("alert:gone", {"x": 1}, ttl_s=0.001)
    assert await replica.get_document("alert:gone") is None or await _expired(replica, "alert:gone")


async def _expired(store: Store, key: str) -> bool:
    """Wait (bounded) until the store no longer returns ``key``: its expiry has passed."""
    for _ in range(200):
        if await store.get_document(key) is None:
            return True
        await asyncio.sleep(0.005)
    return False
