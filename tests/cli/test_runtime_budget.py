"""``botgateway run`` builds the fleet's shared budget with a Redis store, and the process's own with SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis.asyncio as aioredis

from botgateway.budget import RateLimit
from botgateway.cli.runtime import build_runtime
from botgateway.config import parse_config
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

KEY = "slack:T1:chat.update"
LIMIT = RateLimit.window(5, 60.0)


async def test_a_redis_store_shares_the_budget_with_the_fleet() -> None:
    prefix = unique_prefix()
    config = parse_config({"llm": {"provider": "demo"}, "gateway": {"instance_id": "proc-a"},
                           "memory": {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}}, env={})
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        async with build_runtime(config) as runtime:
            assert not runtime.budget.try_acquire(KEY, LIMIT, "card-1")  # the fleet's accounts are in Redis
            assert await runtime.budget.acquire(KEY, LIMIT, "card-1") >= 0
            assert await client.zcard(f"{prefix}budget:{{{KEY}}}:grants") == 1
            runtime.budget.reserve(KEY, LIMIT, "card-2")
            async with asyncio.timeout(20):  # told to the fleet in the background, under this process's id
                while not await client.hget(f"{prefix}budget:{{{KEY}}}:reserved", "proc-a"):
                    await asyncio.sleep(0.01)
            runtime.budget.release(KEY, "card-2")
        # A clean stop leaves nothing reserved in the fleet's name.
        assert await client.hget(f"{prefix}budget:{{{KEY}}}:reserved", "proc-a") is None
    finally:
        await client.aclose()
        await purge_prefix(prefix)


async def test_a_sqlite_store_keeps_the_budget_in_the_process(tmp_path: Path) -> None:
    config = parse_config({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "m.db")}}, env={})
    async with build_runtime(config) as runtime:
        assert runtime.budget.try_acquire(KEY, LIMIT, "card-1")  # no round trip: taken at once
