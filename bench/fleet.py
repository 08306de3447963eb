"""What a scenario of several botgateway processes shares: the machine's Redis under a key prefix of its own.

Several core workers (``--workers K``) and several Slack replicas
(``--replicas K``) keep the fleet's state in the Redis the tests use
(:data:`REDIS_URL`), under a prefix no other scenario uses (``bgbench:<random>:``);
:func:`scenario_redis` checks that Redis answers before any process starts,
and deletes every key under the prefix afterwards, whatever happened.
:func:`every` starts or stops such processes together.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bench.worker_process import WorkerFailed
from tests.fakes.stores import REDIS_URL, purge_prefix

__all__ = ["REDIS_URL", "every", "scenario_redis"]

T = TypeVar("T")


@contextlib.asynccontextmanager
async def scenario_redis(why: str) -> AsyncIterator[tuple[aioredis.Redis, str]]:
    """A client of :data:`REDIS_URL` that answers, and a key prefix of the scenario alone, purged on the way out.

    ``why``: what needs Redis (``--workers above 1``), for the :class:`WorkerFailed` raised when it does not answer.
    """
    client = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"bgbench:{uuid.uuid4().hex}:"
    try:
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            raise WorkerFailed(f"{why} runs the processes on the Redis store, and the Redis at {REDIS_URL} "
                               f"does not answer ({type(exc).__name__}: {exc}): start redis-server there") from None
        try:
            yield client, prefix
        finally:
            await purge_prefix(prefix)
    finally:
        await client.aclose()


async def every(steps: Iterable[Awaitable[T]]) -> list[T]:
    """Every step's result, in order; the first failure is raised once all have ended (none is left unawaited)."""
    done = await asyncio.gather(*steps, return_exceptions=True)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
    return list(done)  # type: ignore[arg-type]  # no exception among them: all are T
