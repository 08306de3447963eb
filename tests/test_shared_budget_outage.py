"""When Redis cannot be reached, each process spends its share of every limit alone, then goes back to sharing.

A real ``redis-server`` the test starts on a free port, kills in the middle of
the run and starts again (empty, as a Redis without persistence comes back);
and a closed loopback port for a Redis that was never there. The clock is the
test's; the only waiting is for the ledger's own probe to find Redis again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import structlog

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget, RateLimit, RedisLedger, SharedLedger
from tests.fakes.redis_server import RedisServer, closed_port

KEY = "slack:T1:chat.update"
QUICK_PROBE = Backoff(base_s=0.02, max_s=0.1)


class Clock:
    """Wall-clock time the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _ledger(url: str, clock: Clock, *, share: int) -> SharedLedger:
    redis = RedisLedger.connect(url, prefix="bg:", instance_id="proc-1", clock=clock)
    return SharedLedger(redis, share=share, refresh_s=3600.0, probe=QUICK_PROBE)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(tmp_path)
    await server.start()
    try:
        yield server
    finally:
        server.kill()


async def _until(predicate: Callable[[], bool]) -> None:
    """Wait for the ledger's background work (its probe) to make ``predicate`` true."""
    async with asyncio.timeout(20):
        while not predicate():
            await asyncio.sleep(0.01)


async def _grants(ledger: SharedLedger, limit: RateLimit, tries: int, *, live: bool = True) -> int:
    return sum([(await ledger.take(KEY, limit, live=live, later=False)).granted for _ in range(tries)])


def _events(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


async def test_a_redis_that_is_not_there_leaves_each_process_its_share(tmp_path: Path) -> None:
    clock = Clock()
    ledger = _ledger(f"redis://:s3cret@127.0.0.1:{closed_port()}/0", clock, share=3)
    budget = RateBudget(ledger=ledger)
    limit = RateLimit.window(9, 60.0)  # three processes: 3 each
    with structlog.testing.capture_logs() as logs:
        waits = [asyncio.create_task(budget.acquire(KEY, limit, f"card-{i}", priority=True)) for i in range(5)]
        async with asyncio.timeout(20):
            while sum(task.done() for task in waits) < 3:
                await asyncio.wait([t for t in waits if not t.done()], return_when=asyncio.FIRST_COMPLETED)
        assert not ledger.shared and sum(task.done() for task in waits) == 3 and budget.waiting(KEY) == 2
        assert not (await ledger.take(KEY, limit, live=False, later=False)).granted
    [warning] = _events(logs, "rate_budget.shared_unreachable")  # said once, however many calls found it away
    assert warning["log_level"] == "warning" and warning["share"] == "1/3"
    assert warning["redis"].startswith("redis://:***@127.0.0.1:")
    assert "memory.redis_url" in warning["note"] and "gateway.replicas" in warning["note"]
    assert "s3cret" not in repr(logs)
    for task in waits:
        task.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    await ledger.aclose()


async def test_redis_going_away_mid_run_and_coming_back(server: RedisServer) -> None:
    clock = Clock()
    ledger = _ledger(server.url, clock, share=2)
    limit = RateLimit.window(6, 60.0)  # two processes: 3 each while Redis is away
    with structlog.testing.capture_logs() as logs:
        assert await _grants(ledger, limit, 2) == 2 and ledger.shared
        ledger.reserve(KEY, limit, "open-card")
        await ledger.settle()

        server.kill()
        # The share is 3 of the window's 6, less its share of the 2 the fleet had spent (1), one kept for
        # open-card's final: a fresh share would let the fleet spend the window's first calls twice.
        assert await _grants(ledger, limit, 4) == 1
        assert not ledger.shared
        assert (await ledger.take(KEY, limit, live=False, later=False)).granted  # the final still has its call
        assert await _grants(ledger, limit, 3, live=False) == 0  # the share is spent
        ledger.reserve(KEY, limit, "card-opened-meanwhile")
        assert _events(logs, "rate_budget.shared_restored") == []

        await server.start()  # empty, on the same port
        await _until(lambda: ledger.shared)
        # What this process spent on its own is counted in the shared window, and its reservations are back.
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert await client.zcard("bg:budget:{%s}:grants" % KEY) == 2  # its own: one live update, one final
            assert (await client.hget("bg:budget:{%s}:reserved" % KEY, "proc-1") or "").startswith("2 ")
        finally:
            await client.aclose()
        assert await _grants(ledger, limit, 3) == 2  # 6 - 2 spent - 2 reserved: the shared window again
        assert (await ledger.take(KEY, limit, live=False, later=False)).granted
    assert len(_events(logs, "rate_budget.shared_unreachable")) == 1
    assert len(_events(logs, "rate_budget.shared_restored")) == 1
    await ledger.aclose()


async def test_losing_redis_leaves_a_process_its_share_of_what_the_fleet_had_left_until_the_window_slides(
    server: RedisServer,
) -> None:
    clock = Clock()
    ledger = _ledger(server.url, clock, share=2)
    limit = RateLimit.window(10, 60.0)
    assert await _grants(ledger, limit, 8) == 8  # the fleet (this process, here) spent 8 of the window's 10
    server.kill()
    assert await _grants(ledger, limit, 5) == 1  # half of the 2 left, not a fresh half of 10
    assert not ledger.shared
    clock.now += 60.0  # the window slid past what was spent before Redis went away
    assert await _grants(ledger, limit, 6) == 5  # its whole share again
    await ledger.aclose()
