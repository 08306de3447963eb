"""Test helpers for the stores: the loopback Redis and clean-up of a test's keys.

Redis is a real server on 127.0.0.1:6379 (CI starts it). Tests use a unique
key prefix each and delete everything under it afterwards.
"""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

REDIS_URL = "redis://127.0.0.1:6379/0"
"""The loopback Redis every store test uses."""


def unique_prefix() -> str:
    """A key prefix no other test (or run) uses."""
    return f"bgtest:{uuid.uuid4().hex}:"


async def purge_prefix(prefix: str) -> None:
    """Delete every key under ``prefix``."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
