"""One gateway process's schedule runner, ticking once at a fixed moment: run by tests as a subprocess.

    python -m tests.schedules.tick_process REDIS_URL PREFIX NOW NAME CRON TIMEZONE GRACE_S

It opens a real :class:`~botgateway.stores.redis.RedisStore` under ``PREFIX``,
prints ``ready``, waits for a token on the Redis list ``<PREFIX>go`` (so the
test can let every process tick at the same moment), then ticks once at
``NOW`` (ISO 8601). Its report appends ``"<pid> <name> <slot>"`` to the Redis
list ``<PREFIX>reports``. The last line printed is the JSON list of the
``[name, slot]`` it ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import datetime

import redis.asyncio as aioredis

from botgateway.config.schedules import ScheduleConfig
from botgateway.schedules.runner import ScheduleRunner
from botgateway.stores.redis import RedisStore


class FixedClock:
    """Always ``now``; never sleeps (only :meth:`ScheduleRunner.tick` is used)."""

    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, when: datetime) -> None:
        raise AssertionError("the tick process does not run the loop")


async def main(url: str, prefix: str, now_text: str, name: str, cron: str, tz: str, grace_s: str) -> int:
    now = datetime.fromisoformat(now_text)
    schedule = ScheduleConfig(name=name, cron=cron, timezone=tz, grace_s=float(grace_s), to=["slack:C0OPS"],
                              prompt="List the stopped servers", role="oncall")
    client = aioredis.Redis.from_url(url, decode_responses=True)
    store = RedisStore(url, prefix)
    await store.open()
    try:

        async def run_report(config: ScheduleConfig, slot: datetime) -> None:
            await client.rpush(f"{prefix}reports", f"{os.getpid()} {config.name} {slot.isoformat()}")

        runner = ScheduleRunner([schedule], store=store, run_report=run_report, clock=FixedClock(now))
        print("ready", flush=True)
        if await client.blpop([f"{prefix}go"], timeout=30) is None:
            print("no go signal within 30 s", file=sys.stderr)
            return 1
        ran = await runner.tick(now)
        await runner.aclose()
    finally:
        await store.close()
        await client.aclose()
    print(json.dumps([[n, slot.isoformat()] for n, slot in ran]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:8])))
