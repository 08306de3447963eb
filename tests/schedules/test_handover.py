"""``schedules run`` handed to running gateways through the Store: found by heartbeat, run once, outcome read back.

The gateways here are :class:`RunNowTaker` objects on one SQLite store, each
under an instance id with a live heartbeat; their report is a stand-in that
records the run and returns the cards. The end-to-end run (a real gateway
process, the fake Slack) is in tests/cli/test_schedules_cli.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import pytest

from botgateway.config.schedules import ScheduleConfig
from botgateway.schedules.handover import HandoverFailed, find_takers, hand_over, wait_ended
from botgateway.schedules.report import CardResult
from botgateway.schedules.requests import taker_key
from botgateway.schedules.taker import RunNow, RunNowTaker
from botgateway.stores.sqlite import SqliteStore


def schedule(name: str = "stopped-prod") -> ScheduleConfig:
    return ScheduleConfig(name=name, cron="0 9 * * 1-5", timezone="Asia/Shanghai", to=["slack:C0OPS"],
                          prompt="List the stopped servers in prod", role="oncall")


class Reports:
    """The report a taker runs: records who ran what; ``hold`` keeps a run going until it is set."""

    def __init__(self, *, hold: asyncio.Event | None = None) -> None:
        self.ran: list[tuple[str, str, datetime]] = []
        self.running = asyncio.Event()
        self._hold = hold

    def of(self, instance_id: str) -> RunNow:
        async def run(config: ScheduleConfig, slot: datetime) -> Sequence[CardResult]:
            self.ran.append((instance_id, config.name, slot))
            self.running.set()
            if self._hold is not None:
                await self._hold.wait()
            return [CardResult("slack:C0OPS", "done", f"turn-{instance_id}")]

        return run


async def started_taker(store: SqliteStore, instance_id: str, reports: Reports, *names: str) -> RunNowTaker:
    await store.heartbeat(instance_id, 60)
    taker = RunNowTaker([schedule(name) for name in names or ("stopped-prod",)], store=store,
                        instance_id=instance_id, run=reports.of(instance_id), poll_s=0.05)
    await taker.start()
    return taker


async def test_a_run_handed_to_two_gateways_runs_once_and_its_cards_come_back(store: SqliteStore) -> None:
    reports = Reports()
    takers = [await started_taker(store, instance, reports) for instance in ("gw-a", "gw-b")]
    try:
        found = await find_takers(store, "stopped-prod")
        assert found.taking == ("gw-a", "gw-b")

        taken = await hand_over(store, "stopped-prod")
        ended = await wait_ended(store, taken)
    finally:
        for taker in takers:
            await taker.aclose()

    assert len(reports.ran) == 1
    instance, name, slot = reports.ran[0]
    assert (taken.instance_id, name, ended.state, ended.slot) == (instance, "stopped-prod", "ended", slot.isoformat())
    assert ended.cards == (CardResult("slack:C0OPS", "done", f"turn-{instance}"),)


async def test_only_a_live_gateway_that_runs_the_schedule_takes_it(store: SqliteStore) -> None:
    reports = Reports()
    other = await started_taker(store, "gw-other", reports, "nightly")  # another config: not this schedule
    await other.aclose()
    await store.heartbeat("cli-ask", 60)  # a live instance that takes no requests (botgateway ask)
    await store.put_document(taker_key("gw-gone"), {"names": ["stopped-prod"]}, 60)  # its heartbeat is gone

    found = await find_takers(store, "stopped-prod")

    assert found.taking == ()
    assert found.live == {"gw-other", "cli-ask"}


async def test_a_run_nobody_takes_in_time_fails_clearly_and_is_never_run_late(store: SqliteStore) -> None:
    await store.heartbeat("gw-stuck", 60)
    await store.put_document(taker_key("gw-stuck"), {"names": ["stopped-prod"]}, 60)  # says so, never polls

    with pytest.raises(HandoverFailed, match=r"no running gateway took the run within 0.2 s, so nothing was posted"):
        await hand_over(store, "stopped-prod", pickup_s=0.2)

    # A gateway that reads the request only now finds it withdrawn.
    reports = Reports()
    late = RunNowTaker([schedule()], store=store, instance_id="gw-late", run=reports.of("gw-late"))
    await late.poll()
    await late.aclose()
    assert reports.ran == []
    # The schedule can be asked for again at once.
    taker = await started_taker(store, "gw-late", reports)
    try:
        taken = await hand_over(store, "stopped-prod")
        assert (await wait_ended(store, taken)).state == "ended"
    finally:
        await taker.aclose()


async def test_a_gateway_that_stops_during_the_run_is_a_clear_failure(store: SqliteStore) -> None:
    hold = asyncio.Event()
    reports = Reports(hold=hold)
    taker = await started_taker(store, "gw-a", reports)
    try:
        taken = await hand_over(store, "stopped-prod")
        await reports.running.wait()
        await store.forget_instance("gw-a")  # its heartbeat ends, as at a shutdown or a crash

        with pytest.raises(HandoverFailed, match=r"instance gw-a\) stopped before the report ended"):
            await wait_ended(store, taken, liveness_s=0.0)
    finally:
        hold.set()
        await taker.aclose()


async def test_a_gateway_stopping_mid_run_records_why(store: SqliteStore) -> None:
    reports = Reports(hold=asyncio.Event())  # never released: the run is still going at shutdown
    taker = RunNowTaker([schedule()], store=store, instance_id="gw-a", run=reports.of("gw-a"),
                        poll_s=0.05, close_timeout_s=0.0)
    await store.heartbeat("gw-a", 60)
    await taker.start()
    taken = await hand_over(store, "stopped-prod")
    await reports.running.wait()
    await taker.aclose()

    ended = await wait_ended(store, taken)
    assert (ended.state, ended.error) == ("failed", "the gateway stopped before the report ended")
