"""``botgateway schedules list`` and ``botgateway schedules run NAME``: the scheduled reports of config.yaml.

``list`` reads the configuration only (no store, no model, no platform): each
schedule with its next run in its own time zone and in UTC, and where its
card goes. ``run NAME`` runs one report now, as ``botgateway run`` would at
its slot, and waits for its cards to be final: through the running gateway when
one runs the schedule (see :mod:`botgateway.schedules.handover`), else with
adapters of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import structlog

from botgateway.config import Config, ScheduleConfig
from botgateway.destinations import parse_destination
from botgateway.schedules.slots import next_runs, zone

if TYPE_CHECKING:
    from botgateway.cli.runtime import Runtime
    from botgateway.schedules.report import CardResult
    from botgateway.sink import Adapter
    from botgateway.stores.base import Store

__all__ = ["COLUMNS", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "FORMATS", "parse_after", "schedule_rows",
           "schedules_list", "schedules_run", "unknown_schedule", "write_schedules"]

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

FORMATS = ("table", "json")
"""The output formats of ``schedules list``."""

COLUMNS = ("name", "cron", "timezone", "next_run", "next_run_utc", "to")
"""The columns of the table, in order (the JSON objects have these keys, and ``role`` and ``grace_s``)."""

_HEADERS = {"next_run": "next run (its zone)", "next_run_utc": "next run (UTC)"}


def parse_after(text: str) -> datetime:
    """``--after``: an ISO date or time (UTC unless it names its offset); ``argparse.ArgumentTypeError`` otherwise."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO date or time (2026-11-30, 2026-11-30T08:00, 2026-11-30T08:00+08:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def schedule_rows(schedules: Sequence[ScheduleConfig], now: datetime) -> list[dict[str, Any]]:
    """One row per schedule, in config order: its next run after ``now`` in its zone and in UTC, its destinations."""
    rows: list[dict[str, Any]] = []
    for schedule, slot in next_runs(schedules, now):
        local = slot.astimezone(zone(schedule.timezone))
        rows.append({
            "name": schedule.name,
            "cron": schedule.cron,
            "timezone": schedule.timezone,
            "next_run": local.isoformat(),
            "next_run_utc": slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "to": list(schedule.to),
            "role": schedule.role,
            "grace_s": schedule.grace_s,
        })
    return rows


def write_schedules(rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    """Print ``rows`` as a ``table`` or as ``json`` (one array of objects)."""
    if fmt == "json":
        out.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
        return
    if not rows:
        out.write("No schedules are configured (see the schedules: section of config.yaml).\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} schedule(s)", show_lines=False)
    for column in COLUMNS:
        table.add_column(_HEADERS.get(column, column), overflow="fold")
    for row in rows:
        table.add_row(row["name"], row["cron"], row["timezone"], _shown_local(row["next_run"]),
                      row["next_run_utc"], ", ".join(row["to"]))
    # Piped into a file or a pager, 80 columns would fold every destination; a terminal keeps its own width.
    width = None if out.isatty() else 200
    Console(file=out, soft_wrap=False, width=width, highlight=False).print(table)


def _shown_local(iso: str) -> str:
    """``2026-11-30T09:00:00+08:00`` → ``Mon 2026-11-30 09:00 +08:00``: the weekday is what a cron line is read for."""
    moment = datetime.fromisoformat(iso)
    return moment.strftime("%a %Y-%m-%d %H:%M ") + moment.strftime("%z")[:3] + ":" + moment.strftime("%z")[3:]


def schedules_list(
    config: Config, *, fmt: str = "table", after: datetime | None = None, out: TextIO | None = None
) -> int:
    """``botgateway schedules list``: every schedule's next run after ``after`` (default: now); the exit code."""
    write_schedules(schedule_rows(config.schedules, after or datetime.now(UTC)), fmt, out or sys.stdout)
    return EXIT_OK


def unknown_schedule(config: Config, name: str, err: TextIO | None = None) -> int:
    """Say that no schedule is called ``name`` and list the names there are; returns :data:`EXIT_USAGE`."""
    names = ", ".join(s.name for s in config.schedules) or "none is configured (see the schedules: section)"
    print(f"botgateway schedules run: no schedule is called {name!r}; schedules: {names}", file=err or sys.stderr)
    return EXIT_USAGE


async def schedules_run(config: Config, name: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``botgateway schedules run NAME``: run the report now (no slot is claimed) and wait for its cards.

    When a gateway that runs the schedule is up (its heartbeat in the Store), the run is handed to it: its adapters
    post the cards, and no second connection or listener is opened here. Only when none runs does this process
    start the adapters of the report's destinations itself, taking no questions on them. Returns 0 when every
    destination's card ended with an answer, 1 otherwise, 2 for an unknown name.
    """
    out, err = out or sys.stdout, err or sys.stderr
    schedule = next((s for s in config.schedules if s.name == name), None)
    if schedule is None:
        return unknown_schedule(config, name, err)
    from botgateway.stores import open_store

    store = await open_store(config.memory, audit_retention_days=config.audit.retention_days)
    try:
        results = await _hand_over(store, schedule, err)
    finally:
        await store.close()
    if results is None:
        from botgateway.cli.runtime import build_runtime

        async with build_runtime(config) as runtime:
            results = await _run_alone(runtime, schedule, err)
    return _report(schedule, results, out, err)


async def _hand_over(store: Store, schedule: ScheduleConfig, err: TextIO) -> list[CardResult] | None:
    """The cards of the run handed to a running gateway; None when no gateway runs the schedule (run it here)."""
    from botgateway.schedules.handover import HandoverFailed, find_takers, hand_over, wait_ended

    takers = await find_takers(store, schedule.name)
    if not takers.taking:
        if takers.live:
            print(f"botgateway schedules run: {len(takers.live)} botgateway process(es) are running, but none runs "
                  f"the schedule {schedule.name!r} (another config, or not 'botgateway run'); running it here",
                  file=err)
        return None
    try:
        taken = await hand_over(store, schedule.name)
        print(f"botgateway schedules run: the running gateway (instance {taken.instance_id}) took "
              f"{schedule.name!r}; waiting for its cards", file=err, flush=True)
        ended = await wait_ended(store, taken)
    except HandoverFailed as exc:
        print(f"botgateway schedules run: {exc}", file=err)
        return []
    if ended.state == "failed":
        print(f"botgateway schedules run: the gateway could not run {schedule.name!r}: {ended.error}", file=err)
    return list(ended.cards)


async def _run_alone(runtime: Runtime, schedule: ScheduleConfig, err: TextIO) -> list[CardResult]:
    """Start the destinations' adapters here, post the report, wait for its cards, stop the adapters."""
    adapters = await _posting_adapters(runtime, schedule, err)
    try:
        return await _run_report(runtime, adapters, schedule) if adapters else []
    finally:
        await runtime.gateway.aclose()
        for adapter in reversed(adapters):
            await _stop(adapter)


def _report(schedule: ScheduleConfig, results: list[CardResult], out: TextIO, err: TextIO) -> int:
    """One line per destination's card; the exit code."""
    for result in results:
        mark = "✓" if result.delivered else "✗"
        how = f"card {result.outcome} (turn {result.turn_id})" if result.turn_id else f"{result.outcome}: {result.reason}"
        print(f"{mark} {schedule.name} → {result.destination}: {how}", file=out)
    posted = sum(result.delivered for result in results)
    if posted < len(schedule.to):
        print(f"botgateway schedules run: {posted} of {len(schedule.to)} destination(s) of {schedule.name!r} got "
              "the report; the lines above say why", file=err)
        return EXIT_FAILED
    return EXIT_OK


async def _posting_adapters(runtime: Runtime, schedule: ScheduleConfig, err: TextIO) -> list[Adapter]:
    """Start the enabled adapters the schedule posts to, and close their inbound side at once."""
    from botgateway.cli.run import build_adapter, enabled_adapters

    wanted = {parse_destination(text).platform for text in schedule.to}
    enabled = dict(enabled_adapters(runtime.config))
    adapters: list[Adapter] = []
    for platform in sorted(wanted):
        if platform not in enabled:
            print(f"botgateway schedules run: adapters.{platform} is not enabled or has no credentials; "
                  f"the report's {platform} destinations are skipped", file=err)
            continue
        try:
            adapter = build_adapter(platform, enabled[platform], runtime)
            await adapter.start(runtime.gateway)
        except Exception as exc:
            print(f"botgateway schedules run: the {platform} adapter could not start: {str(exc) or type(exc).__name__}",
                  file=err)
            continue
        adapters.append(adapter)
        # This process only posts: questions on the platform stay with the gateway that is running.
        await adapter.stop_receiving()
    return adapters


async def _run_report(runtime: Runtime, adapters: list[Adapter], schedule: ScheduleConfig) -> list[CardResult]:
    from botgateway.cli.unprompted import channels_of
    from botgateway.schedules.report import report_cards

    slot = datetime.now(UTC).replace(microsecond=0)
    return await report_cards(channels_of(runtime, adapters), schedule, slot, tools=runtime.tools.read_only_names(),
                              by_hand=True)


async def _stop(adapter: Adapter) -> None:
    try:
        await asyncio.wait_for(adapter.stop(), timeout=10)
    except Exception as exc:
        log.warning("adapter.stop_failed", adapter=adapter.name, error=type(exc).__name__)
