"""The schedule runner with a clock the test moves: once per slot, catch-up within grace, failures, the fleet.

No test sleeps: the runner's loop waits on the test's clock, and the test
waits until the loop is asleep again (until the moment it should next wake)
before it looks at what ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
import structlog

from botgateway.config.schedules import ScheduleConfig
from botgateway.schedules.runner import CLAIM_TTL_MIN_S, ScheduleRunner
from botgateway.schedules.slots import slot_key
from botgateway.stores.base import Store, StoreError
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL
from tests.paths import REPO

MONDAY_9_SHANGHAI = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
"""Monday 2026-11-30 09:00 in Asia/Shanghai."""


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def schedule(name: str = "stopped-prod", cron: str = "0 9 * * 1-5", *, timezone: str = "Asia/Shanghai",
             grace_s: float = 600.0) -> ScheduleConfig:
    return ScheduleConfig(name=name, cron=cron, timezone=timezone, to=["slack:C0OPS"], grace_s=grace_s,
                          prompt="List the stopped servers in prod", role="oncall")


class ManualClock:
    """Wall-clock time that moves only when the test says; a sleeper wakes once the time passes its moment."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._changed = asyncio.Condition()
        self._asleep_until: list[datetime] = []

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, when: datetime) -> None:
        async with self._changed:
            self._asleep_until.append(when)
            self._changed.notify_all()
            try:
                await self._changed.wait_for(lambda: self._now >= when)
            finally:
                self._asleep_until.remove(when)

    async def advance_to(self, when: datetime) -> None:
        async with self._changed:
            self._now = when
            self._changed.notify_all()

    async def asleep_until(self, when: datetime) -> None:
        """Wait until someone sleeps until ``when`` (the runner's loop has done what was due and waits again)."""
        async with asyncio.timeout(10):
            async with self._changed:
                await self._changed.wait_for(lambda: when in self._asleep_until)


class Reports:
    """The ``run_report`` of a runner: records each report; the ones in ``failing`` raise."""

    def __init__(self, failing: set[datetime] | None = None) -> None:
        self.ran: list[tuple[str, datetime]] = []
        self.failing = failing or set()

    async def __call__(self, schedule: ScheduleConfig, slot: datetime) -> None:
        self.ran.append((schedule.name, slot))
        if slot in self.failing:
            raise RuntimeError("the inventory did not answer")


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


async def test_a_slot_runs_once_when_its_time_comes(store: SqliteStore, logs: list[dict[str, Any]]) -> None:
    clock = ManualClock(MONDAY_9_SHANGHAI - timedelta(minutes=1))
    reports = Reports()
    runner = ScheduleRunner([schedule()], store=store, run_report=reports, clock=clock)
    await runner.start()
    await clock.asleep_until(MONDAY_9_SHANGHAI)
    assert reports.ran == []

    await clock.advance_to(MONDAY_9_SHANGHAI)
    await clock.asleep_until(MONDAY_9_SHANGHAI + timedelta(days=1))  # Tuesday's: Monday's was handled
    await clock.advance_to(MONDAY_9_SHANGHAI + timedelta(minutes=5))
    assert await runner.tick(clock.now()) == []
    await runner.aclose()

    assert reports.ran == [("stopped-prod", MONDAY_9_SHANGHAI)]
    # Another replica (or this one restarted) finds the slot claimed.
    other = ScheduleRunner([schedule()], store=store, run_report=reports, clock=clock)
    assert await other.tick(MONDAY_9_SHANGHAI + timedelta(minutes=5)) == []
    assert reports.ran == [("stopped-prod", MONDAY_9_SHANGHAI)]
    # Friday's slot, long past at start-up, was skipped (and said so), not run.
    assert [e["slot"] for e in events(logs, "schedules.slot_skipped")] == [
        (MONDAY_9_SHANGHAI - timedelta(days=3)).isoformat()
    ]


async def test_a_slot_missed_while_stopped_runs_at_start_within_grace_and_only_once(
    store: SqliteStore, logs: list[dict[str, Any]]
) -> None:
    reports = Reports()
    clock = ManualClock(MONDAY_9_SHANGHAI + timedelta(minutes=9))  # the gateway was down at 09:00; grace is 10 min
    runner = ScheduleRunner([schedule()], store=store, run_report=reports, clock=clock)
    await runner.start()
    await clock.asleep_until(MONDAY_9_SHANGHAI + timedelta(days=1))
    await runner.aclose()
    assert reports.ran == [("stopped-prod", MONDAY_9_SHANGHAI)]

    # Restarted again a minute later: the slot is not run twice.
    clock = ManualClock(MONDAY_9_SHANGHAI + timedelta(minutes=10))
    again = ScheduleRunner([schedule()], store=store, run_report=reports, clock=clock)
    await again.start()
    await clock.asleep_until(MONDAY_9_SHANGHAI + timedelta(days=1))
    await again.aclose()
    assert reports.ran == [("stopped-prod", MONDAY_9_SHANGHAI)]
    assert events(logs, "schedules.slot_skipped") == []


async def test_a_slot_missed_past_its_grace_is_skipped_and_logged_once(
    store: SqliteStore, logs: list[dict[str, Any]]
) -> None:
    reports = Reports()
    for late_min in (11, 12):  # two starts (or two replicas) past the 10-minute grace
        clock = ManualClock(MONDAY_9_SHANGHAI + timedelta(minutes=late_min))
        runner = ScheduleRunner([schedule()], store=store, run_report=reports, clock=clock)
        await runner.start()
        await clock.asleep_until(MONDAY_9_SHANGHAI + timedelta(days=1))
        await runner.aclose()

    assert reports.ran == []
    skipped = events(logs, "schedules.slot_skipped")
    assert [(e["name"], e["slot"], e["late_s"]) for e in skipped] == [
        ("stopped-prod", MONDAY_9_SHANGHAI.isoformat(), 660)
    ]


async def test_a_failing_report_is_logged_and_the_next_slot_still_runs(
    store: SqliteStore, logs: list[dict[str, Any]]
) -> None:
    every_5 = schedule("disk", "*/5 * * * *", timezone="UTC", grace_s=60)
    reports = Reports(failing={utc(2026, 11, 30, 10, 5)})
    clock = ManualClock(utc(2026, 11, 30, 10, 2))
    runner = ScheduleRunner([every_5], store=store, run_report=reports, clock=clock)
    await runner.start()
    for minute in (5, 10):
        await clock.asleep_until(utc(2026, 11, 30, 10, minute))
        await clock.advance_to(utc(2026, 11, 30, 10, minute))
    await clock.asleep_until(utc(2026, 11, 30, 10, 15))
    await runner.aclose()

    assert reports.ran == [("disk", utc(2026, 11, 30, 10, 5)), ("disk", utc(2026, 11, 30, 10, 10))]
    failed = events(logs, "schedules.report_failed")
    assert [(e["slot"], e["error"]) for e in failed] == [(utc(2026, 11, 30, 10, 5).isoformat(), "RuntimeError")]


async def test_a_clock_jump_runs_only_the_latest_slot_within_grace(
    store: SqliteStore, logs: list[dict[str, Any]]
) -> None:
    every_5 = schedule("disk", "*/5 * * * *", timezone="UTC", grace_s=60)
    reports = Reports()
    clock = ManualClock(utc(2026, 11, 30, 10, 2))
    runner = ScheduleRunner([every_5], store=store, run_report=reports, clock=clock)
    await runner.start()
    await clock.asleep_until(utc(2026, 11, 30, 10, 5))
    await clock.advance_to(utc(2026, 11, 30, 10, 21))  # 10:05 … 10:20 all passed at once
    await clock.asleep_until(utc(2026, 11, 30, 10, 25))
    await runner.aclose()

    assert reports.ran == [("disk", utc(2026, 11, 30, 10, 20))]
    skipped = [e["slot"] for e in events(logs, "schedules.slot_skipped")]
    assert skipped == [utc(2026, 11, 30, 10, 0).isoformat(), utc(2026, 11, 30, 10, 15).isoformat()]


async def test_without_grace_a_slot_the_loop_wakes_for_a_little_late_still_runs(store: SqliteStore) -> None:
    no_grace = schedule("disk", "*/5 * * * *", timezone="UTC", grace_s=0)
    reports = Reports()
    clock = ManualClock(utc(2026, 11, 30, 10, 2))
    runner = ScheduleRunner([no_grace], store=store, run_report=reports, clock=clock)
    await runner.start()
    await clock.asleep_until(utc(2026, 11, 30, 10, 5))
    await clock.advance_to(utc(2026, 11, 30, 10, 5, 2))  # a busy event loop woke two seconds late
    await clock.asleep_until(utc(2026, 11, 30, 10, 10))
    await runner.aclose()
    # 10:00 was missed two minutes before the start: skipped; 10:05 is on time.
    assert reports.ran == [("disk", utc(2026, 11, 30, 10, 5))]


async def test_schedules_due_together_each_run_and_next_runs_lists_them_in_config_order(store: SqliteStore) -> None:
    daily = schedule("daily", "0 9 * * *")
    weekdays = schedule("weekdays")
    reports = Reports()
    runner = ScheduleRunner([weekdays, daily], store=store, run_report=reports, clock=ManualClock(MONDAY_9_SHANGHAI))
    ran = await runner.tick(MONDAY_9_SHANGHAI)
    assert sorted(ran) == [("daily", MONDAY_9_SHANGHAI), ("weekdays", MONDAY_9_SHANGHAI)]
    saturday = utc(2026, 12, 5, 1, 0)
    assert [(s.name, at) for s, at in runner.next_runs(utc(2026, 12, 4, 2, 0))] == [
        ("weekdays", saturday + timedelta(days=2)), ("daily", saturday)
    ]


class _DownStore:
    """A store that cannot be reached."""

    def __init__(self) -> None:
        self.claims = 0

    async def claim(self, key: str, ttl_s: float) -> bool:
        self.claims += 1
        raise StoreError("Redis at redis://127.0.0.1:6379/0 is unreachable")


async def test_a_slot_whose_claim_fails_is_skipped_and_logged(logs: list[dict[str, Any]]) -> None:
    down = _DownStore()
    reports = Reports()
    runner = ScheduleRunner([schedule()], store=cast(Store, down), run_report=reports,
                            clock=ManualClock(MONDAY_9_SHANGHAI))
    assert await runner.tick(MONDAY_9_SHANGHAI) == []
    assert reports.ran == [] and down.claims == 1
    failed = events(logs, "schedules.claim_failed")
    assert [(e["name"], e["error"]) for e in failed] == [("stopped-prod", "StoreError")]


async def test_two_runners_on_two_redis_stores_sharing_a_prefix_run_a_slot_once(redis_prefix: str) -> None:
    stores = [RedisStore(REDIS_URL, redis_prefix) for _ in range(2)]
    for each in stores:
        await each.open()
    try:
        reports = Reports()
        now = MONDAY_9_SHANGHAI + timedelta(seconds=1)
        runners = [ScheduleRunner([schedule()], store=each, run_report=reports, clock=ManualClock(now))
                   for each in stores]
        ran = await asyncio.gather(*(runner.tick(now) for runner in runners))
        assert sorted(len(r) for r in ran) == [0, 1]
        assert reports.ran == [("stopped-prod", MONDAY_9_SHANGHAI)]
        # The claim outlives any catch-up: at least two days.
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            ttl_ms = await client.pttl(f"{redis_prefix}dedupe:{slot_key('stopped-prod', MONDAY_9_SHANGHAI)}")
        finally:
            await client.aclose()
        assert ttl_ms > (CLAIM_TTL_MIN_S - 60) * 1000
    finally:
        for each in stores:
            await each.close()


async def _ready(proc: asyncio.subprocess.Process) -> None:
    """Wait for the tick process's ``ready`` line (its log lines may come first)."""
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while (line := await proc.stdout.readline()) and line.strip() != b"ready":
            pass
    assert line, "the tick process ended before it was ready"


async def test_a_slot_runs_once_across_two_gateway_processes_sharing_redis(redis_prefix: str) -> None:
    now = MONDAY_9_SHANGHAI + timedelta(seconds=2)
    args = [REDIS_URL, redis_prefix, now.isoformat(), "stopped-prod", "0 9 * * 1-5", "Asia/Shanghai", "600"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.schedules.tick_process", *args, cwd=REPO,
                                             env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        for proc in procs:
            await _ready(proc)
        client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
        try:
            await client.rpush(f"{redis_prefix}go", "go", "go")  # both tick at once
            outputs = [await asyncio.wait_for(proc.communicate(), 30) for proc in procs]
            reports = await client.lrange(f"{redis_prefix}reports", 0, -1)
        finally:
            await client.aclose()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], [err.decode()[-2000:] for _, err in outputs]
    pids = {str(proc.pid) for proc in procs}
    assert len(reports) == 1, reports
    pid, name, slot = reports[0].split(" ")
    assert (pid in pids, name, slot) == (True, "stopped-prod", MONDAY_9_SHANGHAI.isoformat())
    ran = sorted(json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs)
    assert ran == [[], [["stopped-prod", MONDAY_9_SHANGHAI.isoformat()]]]
