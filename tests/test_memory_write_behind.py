"""Memory off the critical path: history from the per-conversation cache, commits written behind the turn.

Real stores throughout: SQLite in ``tmp_path`` and the Redis on 127.0.0.1:6379
(a unique key prefix per test). Store calls are counted, held or failed by
small subclasses of the real stores, never by patching. Nothing waits on the
clock: tests await the writer (``flush``/``aclose``) or events they hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import structlog
import structlog.testing

from botgateway.backoff import Backoff
from botgateway.history import Memory
from botgateway.stores.base import HistorySnapshot, HistoryWrite, StoredTurn, StoreError, VersionStep
from botgateway.stores.redis import RedisStore
from botgateway.stores.redis_history import conversation_keys
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

Message = dict[str, Any]
FAST = Backoff(base_s=0.001, max_s=0.01, jitter=(1.0, 1.0))
"""The writer's retries in these tests: real pauses, just short ones."""


class Instrumented:
    """Mixed into a real store: counts history reads and writes; can hold or fail them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[list[str]] = []
        """The conversation ids of each ``load_histories`` call."""
        self.full_reads = 0
        """Conversations whose turns were actually read (not answered "unchanged")."""
        self.writes: list[list[HistoryWrite]] = []
        """Each successful ``write_history`` group."""
        self.fail_writes = 0
        """The next this many ``write_history`` calls fail."""
        self.failed = 0
        self.hold_writes: asyncio.Event | None = None
        """While set to an unset event, the next write waits for it (``write_started`` tells when it waits)."""
        self.write_started = asyncio.Event()
        self.hold_reads: asyncio.Event | None = None
        """While set to an unset event, a read waits for it after reading (its answer is late, not its snapshot)."""
        self.read_done = asyncio.Event()
        self.listed = asyncio.Event()
        """Set once the store answered ``history_index``."""

    async def load_histories(
        self, conversation_ids: Sequence[str], *, unless_version: Mapping[str, int] | None = None
    ) -> dict[str, HistorySnapshot]:
        self.reads.append(list(conversation_ids))
        found = await super().load_histories(conversation_ids, unless_version=unless_version)  # type: ignore[misc]
        self.full_reads += sum(1 for snapshot in found.values() if snapshot.turns is not None)
        if self.hold_reads is not None:
            self.read_done.set()
            await self.hold_reads.wait()
        return found  # type: ignore[no-any-return]

    async def history_index(self, limit: int) -> frozenset[str] | None:
        listed = await super().history_index(limit)  # type: ignore[misc]
        self.listed.set()
        return listed  # type: ignore[no-any-return]

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        if self.hold_writes is not None:
            gate, self.hold_writes = self.hold_writes, None
            self.write_started.set()
            await gate.wait()
        if self.fail_writes:
            self.fail_writes -= 1
            self.failed += 1
            raise StoreError("the store is down for a moment")
        steps = await super().write_history(writes)  # type: ignore[misc]
        self.writes.append(list(writes))
        return steps  # type: ignore[no-any-return]


class CountingSqlite(Instrumented, SqliteStore):
    """A real SQLite store, instrumented."""


class CountingRedis(Instrumented, RedisStore):
    """A real Redis store, instrumented."""


Backend = Callable[[], Any]


@pytest.fixture(params=["sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Opens instrumented stores on one backing (file or key prefix): a second one is another process."""
    prefix = unique_prefix()
    opened: list[Any] = []

    async def factory() -> CountingSqlite | CountingRedis:
        store: CountingSqlite | CountingRedis
        if request.param == "sqlite":
            store = CountingSqlite(tmp_path / "history.db", history_ttl_s=3600)
        else:
            store = CountingRedis(REDIS_URL, prefix, history_ttl_s=3600)
        await store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()
    if request.param == "redis":
        await purge_prefix(prefix)


def memory_on(store: Any, **kwargs: Any) -> Memory:
    return Memory(store, max_history_tokens=4000, keep_recent_turns=2, write_backoff=FAST, **kwargs)


def plain_turn(n: int, size: int = 20) -> list[Message]:
    return [
        {"role": "user", "content": f"question {n} " + "q" * size},
        {"role": "assistant", "content": f"answer {n} " + "a" * size},
    ]


def ids(turns: list[StoredTurn]) -> list[str]:
    return [turn.turn_id for turn in turns]


# --- the cache ------------------------------------------------------------------------


async def test_a_commit_is_in_the_history_at_once_without_reading_the_store(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    assert await memory.history("c") == []  # the one read
    store.hold_writes = gate = asyncio.Event()  # the store does not see the commit yet

    await memory.commit("c", "t1", plain_turn(1))
    history = await memory.history("c")

    assert history == plain_turn(1)
    assert store.full_reads == 1  # the cached copy answered (Redis only confirmed it is current)
    if isinstance(store, SqliteStore):
        assert len(store.reads) == 1  # SQLite is this process's own: not even a check
    gate.set()
    await memory.aclose()
    assert ids(await store.load_turns("c")) == ["t1"]


async def test_misses_of_one_moment_share_one_read_and_each_conversation_is_read_once(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)

    histories = await asyncio.gather(*(memory.history(f"c{n % 5}") for n in range(20)))

    assert histories == [[]] * 20
    assert store.reads == [[f"c{n}" for n in range(5)]]


async def test_a_conversation_first_read_after_commits_in_flight_shows_them(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    store.hold_writes = gate = asyncio.Event()
    await memory.commit("c", "t1", plain_turn(1))  # never read before: nothing cached
    await store.write_started.wait()

    assert await memory.history("c") == plain_turn(1)  # the store still has nothing; the change in flight is applied
    gate.set()
    await memory.flush()
    assert ids(await store.load_turns("c")) == ["t1"]


async def test_a_change_written_while_a_read_is_on_its_way_is_not_lost(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    await memory.commit("c", "t1", plain_turn(1))
    store.hold_writes = writing = asyncio.Event()
    await memory.commit("c", "t2", plain_turn(2))  # the writer holds t1 and t2 (or t2 alone)
    await store.write_started.wait()
    store.hold_reads = reading = asyncio.Event()
    history = asyncio.create_task(memory.history("c"))
    await store.read_done.wait()  # the snapshot is taken, its answer held back
    writing.set()
    await memory.flush()  # written while the read was on its way
    reading.set()

    assert await history == plain_turn(1) + plain_turn(2)


async def test_eviction_reads_the_conversation_again(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store, cached_conversations=1)
    await memory.history("a")
    await memory.commit("a", "a1", plain_turn(1))
    await memory.history("b")  # evicts a

    assert await memory.history("a") == plain_turn(1)
    assert [read for read in store.reads if "a" in read] == [["a"], ["a"]]
    await memory.aclose()


async def test_a_summary_replaces_the_cached_turns_and_the_stored_ones(make_store: Backend) -> None:
    store = await make_store()
    calls: list[list[Message]] = []

    async def summarizer(request: list[Message]) -> str:
        calls.append(request)
        return "questions 1-4 were about hosts"

    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=summarizer, write_backoff=FAST)
    for n in range(1, 7):
        await memory.commit("c", f"t{n}", plain_turn(n, size=200))

    first = await memory.history("c")
    again = await memory.history("c")

    assert again == first and len(calls) == 1
    assert first[2:] == plain_turn(5, 200) + plain_turn(6, 200)
    await memory.aclose()
    stored = await store.load_turns("c")
    assert stored[0].is_summary and ids(stored)[1:] == ["t5", "t6"]
    assert await memory_on(store).history("c") == first  # a new process reads the same history


async def test_an_idle_conversation_is_forgotten_in_memory_as_in_the_store(tmp_path: Path) -> None:
    now = [1000.0]
    store = SqliteStore(tmp_path / "ttl.db", history_ttl_s=60, clock=lambda: now[0])
    memory = Memory(store, max_history_tokens=4000, keep_recent_turns=2, clock=lambda: now[0])
    try:
        await memory.commit("c", "t1", plain_turn(1))
        assert await memory.history("c") == plain_turn(1)
        await memory.flush()
        now[0] += 61

        assert await memory.history("c") == []
        await memory.commit("c", "t2", plain_turn(2))
        assert await memory.history("c") == plain_turn(2)
    finally:
        await memory.aclose()
        await store.close()


# --- the writer -----------------------------------------------------------------------


async def test_grouped_writes_keep_each_conversations_order(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    store.hold_writes = gate = asyncio.Event()
    await memory.commit("a", "a1", plain_turn(1))
    await store.write_started.wait()  # the first group is on its way; the rest queue behind it
    for n in range(2, 8):
        await memory.commit("a", f"a{n}", plain_turn(n))
        await memory.commit("b", f"b{n}", plain_turn(n))
    gate.set()
    await memory.flush()

    assert ids(await store.load_turns("a")) == [f"a{n}" for n in range(1, 8)]
    assert ids(await store.load_turns("b")) == [f"b{n}" for n in range(2, 8)]
    assert max(len(group) for group in store.writes) > 1  # grouped
    written = [write.turn.turn_id for group in store.writes for write in group if write.turn]
    assert [t for t in written if t.startswith("a")] == [f"a{n}" for n in range(1, 8)]


async def test_a_failed_write_is_retried_until_it_is_stored(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    store.fail_writes = 3

    await memory.commit("c", "t1", plain_turn(1))
    await memory.flush()

    assert store.failed == 3
    assert ids(await store.load_turns("c")) == ["t1"]


async def test_a_write_failing_past_the_retries_is_reported_and_kept(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    store.fail_writes = 7  # more than one round of attempts (5)

    with structlog.testing.capture_logs() as logs:
        await memory.commit("c", "t1", plain_turn(1))
        with pytest.raises(StoreError, match="error id"):
            await memory.flush()
        await memory.flush()  # the change was kept: a later attempt stores it

    [incident] = [entry for entry in logs if entry["event"] == "history.write_failed"]
    assert incident["log_level"] == "error" and len(incident["error_id"]) == 8
    assert incident["conversations"] == ["c"]
    assert ids(await store.load_turns("c")) == ["t1"]


async def test_shutdown_drains_what_is_queued(tmp_path: Path) -> None:
    path = tmp_path / "drain.db"
    store = CountingSqlite(path)
    memory = Memory(store, max_history_tokens=4000, keep_recent_turns=2)
    store.hold_writes = gate = asyncio.Event()
    for n in range(1, 6):
        await memory.commit(f"c{n % 2}", f"t{n}", plain_turn(n))
    await store.write_started.wait()
    closing = asyncio.create_task(memory.aclose())
    gate.set()
    await closing
    with pytest.raises(StoreError, match="shut down"):
        await memory.commit("c1", "late", plain_turn(9))
    await store.close()

    reopened = SqliteStore(path)
    later = Memory(reopened, max_history_tokens=4000, keep_recent_turns=2)
    try:
        assert await later.history("c1") == plain_turn(1) + plain_turn(3) + plain_turn(5)
        assert await later.history("c0") == plain_turn(2) + plain_turn(4)
    finally:
        await later.aclose()
        await reopened.close()


async def test_clear_forgets_in_memory_and_in_the_store(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    await memory.commit("c", "t1", plain_turn(1))
    await memory.commit("other", "o1", plain_turn(2))
    assert await memory.history("c") == plain_turn(1)

    await memory.clear("c")  # returns once the store has forgotten it too

    assert await memory.history("c") == []
    assert await store.load_turns("c") == []
    assert await memory_on(store).history("c") == []
    assert await memory.history("other") == plain_turn(2)
    await memory.commit("c", "t2", plain_turn(3))
    assert await memory.history("c") == plain_turn(3)
    await memory.aclose()


# --- replicas on one Redis ------------------------------------------------------------


async def test_replicas_on_one_redis_see_each_others_commits(tmp_path: Path) -> None:
    prefix = unique_prefix()
    one, two = CountingRedis(REDIS_URL, prefix), CountingRedis(REDIS_URL, prefix)
    first, second = memory_on(one), memory_on(two)
    try:
        assert await first.history("c") == []  # cached by the first replica
        await second.commit("c", "t1", plain_turn(1))
        await second.flush()

        assert await first.history("c") == plain_turn(1)  # the version moved: read again

        await first.commit("c", "t2", plain_turn(2))
        await first.flush()
        reads = one.full_reads
        assert await first.history("c") == plain_turn(1) + plain_turn(2)
        assert one.full_reads == reads  # its own write kept its copy current: nothing read
        assert await second.history("c") == plain_turn(1) + plain_turn(2)

        # Both write before the first reads again: its own step starts from a version it never saw.
        await second.commit("c", "t3", plain_turn(3))
        await second.flush()
        await first.commit("c", "t4", plain_turn(4))
        await first.flush()
        assert await first.history("c") == plain_turn(1) + plain_turn(2) + plain_turn(3) + plain_turn(4)

        await second.clear("c")
        assert await first.history("c") == []
    finally:
        for memory in (first, second):
            await memory.aclose()
        for store in (one, two):
            await store.close()
        await purge_prefix(prefix)


async def test_a_commit_under_a_lost_lease_is_refused_logged_once_and_dropped_and_the_copy_read_again() -> None:
    prefix = unique_prefix()
    store = CountingRedis(REDIS_URL, prefix)
    tokens = {"c": 41}  # the token of the lease this process holds (as fleet.lease hands it out)
    memory = memory_on(store, fences=tokens.get)
    try:
        await memory.commit("c", "t1", plain_turn(1))
        assert await memory.settle("c", timeout_s=10)
        assert store.writes[-1][0].fence == 41  # every change carries the lease's token

        async with aioredis.Redis.from_url(REDIS_URL) as raw:
            await raw.set(conversation_keys(prefix, "c").fence, 42)  # another process took the lease since
        store.hold_writes = gate = asyncio.Event()
        with structlog.testing.capture_logs() as logs:
            await memory.commit("c", "t2", plain_turn(2))
            await store.write_started.wait()
            assert await memory.history("c") == plain_turn(1) + plain_turn(2)  # shown at once, as any commit
            gate.set()
            assert await memory.settle("c", timeout_s=10)  # refused counts as settled: it will never be written
        fenced = [entry for entry in logs if entry["event"] == "history.write_fenced"]
        assert len(fenced) == 1 and fenced[0]["conversation"] == "c" and fenced[0]["log_level"] == "warning"
        assert "question 2" not in repr(fenced[0])  # no content in the log
        assert ids(await store.load_turns("c")) == ["t1"]
        assert await memory.history("c") == plain_turn(1)  # the copy that showed the refused change is read again
        await memory.flush()
        sent = [w for group in store.writes for w in group if w.turn is not None and w.turn.turn_id == "t2"]
        assert len(sent) == 1  # dropped, not retried
    finally:
        await memory.aclose()
        await store.close()
        await purge_prefix(prefix)


async def test_settle_waits_for_the_conversations_changes_and_gives_up_after_its_timeout(make_store: Backend) -> None:
    store = await make_store()
    memory = memory_on(store)
    assert await memory.settle("c", timeout_s=0.01)  # nothing queued: settled at once
    store.hold_writes = gate = asyncio.Event()
    await memory.commit("c", "t1", plain_turn(1))
    await store.write_started.wait()
    assert not await memory.settle("c", timeout_s=0.05)  # the store has not taken it
    settled = asyncio.create_task(memory.settle("c", timeout_s=30))
    gate.set()
    assert await settled
    assert ids(await store.load_turns("c")) == ["t1"]
    await memory.aclose()


# --- the list of conversations with history -----------------------------------------------


async def listed_memory(store: Any, **kwargs: Any) -> Memory:
    """A memory whose cache has asked the store for its list of conversations (the first miss asks)."""
    memory = memory_on(store, **kwargs)
    await memory.history("warm-up")
    await store.listed.wait()  # the cache takes the list in the same step as the store answers
    return memory


async def test_sqlite_lists_its_conversations_so_a_new_one_needs_no_read(tmp_path: Path) -> None:
    earlier = CountingSqlite(tmp_path / "history.db", history_ttl_s=3600)
    await earlier.open()
    before = memory_on(earlier)
    await before.commit("old", "t1", plain_turn(1))
    await before.aclose()
    await earlier.close()

    store = CountingSqlite(tmp_path / "history.db", history_ttl_s=3600)
    await store.open()
    try:
        memory = await listed_memory(store, cached_conversations=1)
        reads = len(store.reads)
        assert await memory.history("new") == []
        assert len(store.reads) == reads  # known empty: no read

        # A conversation with history is on the list: read, never taken for empty.
        assert next(m["content"] for m in await memory.history("old")).startswith("question 1")
        assert len(store.reads) == reads + 1

        # What this process writes joins the list: evicted from the cache (it holds one), it is read again.
        await memory.commit("new", "t2", plain_turn(2))
        await memory.flush()
        await memory.history("old")  # evicts "new"
        reads = len(store.reads)
        assert next(m["content"] for m in await memory.history("new")).startswith("question 2")
        assert len(store.reads) == reads + 1
        await memory.aclose()
    finally:
        await store.close()


async def test_a_store_shared_by_replicas_gives_no_list_so_every_new_conversation_is_read() -> None:
    prefix = unique_prefix()
    store = CountingRedis(REDIS_URL, prefix, history_ttl_s=3600)
    await store.open()
    try:
        assert await store.history_index(1000) is None
        memory = await listed_memory(store)
        reads = len(store.reads)
        assert await memory.history("new") == []
        assert len(store.reads) == reads + 1
        await memory.aclose()
    finally:
        await store.close()
        await purge_prefix(prefix)


async def test_sqlite_gives_no_list_past_the_limit(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "history.db", history_ttl_s=3600)
    await store.open()
    try:
        await store.write_history([HistoryWrite(f"c{n}", "append", StoredTurn(f"t{n}", tuple(plain_turn(n)), 0.0))
                                   for n in range(3)])
        assert await store.history_index(3) == frozenset({"c0", "c1", "c2"})
        assert await store.history_index(2) is None
    finally:
        await store.close()
