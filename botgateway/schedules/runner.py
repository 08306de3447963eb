"""Running scheduled reports on time, once per slot across the fleet.

:class:`ScheduleRunner` sleeps until the earliest next slot of its schedules,
then runs every slot that is due. Each run is claimed in the Store first
(``schedule:<name>:<slot>``), so of several replicas (or worker processes)
sharing the Store exactly one runs a slot. At start-up it catches up: the
latest slot of each schedule that nobody ran yet runs at once if it is at most
``grace_s`` old, and is skipped (one log line for the fleet) if older.
With a :class:`~botgateway.schedules.taker.RunNowTaker` it also runs the
reports ``botgateway schedules run NAME`` hands to this process.

Time comes from a :class:`WallClock`, so tests move it by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from botgateway.background import BackgroundTasks
from botgateway.schedules.slots import next_runs, next_slot, previous_slot, slot_key

if TYPE_CHECKING:
    from botgateway.config.schedules import ScheduleConfig
    from botgateway.schedules.taker import RunNowTaker
    from botgateway.stores.base import ClaimStore

__all__ = ["CLAIM_TTL_MIN_S", "ON_TIME_S", "ScheduleRunner", "SystemClock", "WallClock"]

log = structlog.get_logger(__name__)

CLAIM_TTL_MIN_S = 2 * 86400.0
"""A slot's claim is kept at least this long (and at least twice the schedule's grace), past any catch-up."""

ON_TIME_S = 60.0
"""A slot at most this far behind the clock is on time whatever its ``grace_s`` (even 0): the loop wakes a little
after the slot, later still on a busy event loop or a slow claim."""

_NAP_S = 60.0
"""The real clock checks the time at least this often while it waits, so a wall-clock jump is seen within a minute."""


class WallClock(Protocol):
    """Wall-clock time, and waiting for a moment of it."""

    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once :meth:`now` has reached ``when`` (at once when it already has)."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        """Sleep until ``when`` by the wall clock (not the monotonic one: NTP steps and suspends move it)."""
        while (left := (when - self.now()).total_seconds()) > 0:  # noqa: ASYNC110 - a wait for a time: no event
            await asyncio.sleep(min(left, _NAP_S))


class ScheduleRunner:
    """Runs each schedule's report at its slots; one replica per slot, through claims in the Store.

    Args:
        schedules: The schedules to run (names unique).
        store: Where slots are claimed (shared by the fleet with Redis).
        run_report: Runs one report (the schedule and the slot it is for); its failure is logged, never raised here.
        clock: Wall-clock time (a :class:`SystemClock` in production).
        background: Where the loop and the reports run (the caller's, to end them with its other work);
            the runner's own when ``None``.
        close_timeout_s: :meth:`aclose` lets running reports finish for this long, then cancels them.
        taker: Takes the runs ``schedules run`` hands over, started and stopped with the runner; None: none.
    """

    def __init__(
        self,
        schedules: Sequence[ScheduleConfig],
        *,
        store: ClaimStore,
        run_report: Callable[[ScheduleConfig, datetime], Awaitable[None]],
        clock: WallClock,
        background: BackgroundTasks | None = None,
        close_timeout_s: float = 30.0,
        taker: RunNowTaker | None = None,
    ) -> None:
        self._schedules = tuple(schedules)
        self._taker = taker
        self._store = store
        self._run_report = run_report
        self._clock = clock
        self._own_background = background is None
        self._background = background if background is not None else BackgroundTasks()
        self._close_timeout_s = close_timeout_s
        # The latest slot of each schedule already handled here (run, claimed by another replica, or skipped).
        self._handled: dict[str, datetime] = {}
        self._loop_task: asyncio.Task[Any] | None = None
        self._ticks: set[asyncio.Task[Any]] = set()

    @property
    def schedules(self) -> tuple[ScheduleConfig, ...]:
        """The schedules this runner runs."""
        return self._schedules

    def next_runs(self, now: datetime) -> list[tuple[ScheduleConfig, datetime]]:
        """Each schedule with its next slot after ``now`` (in the schedule's zone), in config order."""
        return next_runs(self._schedules, now)

    async def start(self) -> None:
        """Catch up on the slots missed while stopped (in the background), then run every slot as it comes."""
        if not self._schedules or self._loop_task is not None:
            return
        self._spawn_tick(self._clock.now())
        self._loop_task = self._background.spawn(self._loop(), name="schedules")
        if self._taker is not None:
            await self._taker.start()

    async def tick(self, now: datetime) -> list[tuple[str, datetime]]:
        """Run what is due at ``now`` and wait for it; returns the ``(name, slot)`` of the reports run here.

        For each schedule only its latest slot at or before ``now`` that this runner has not handled yet counts:
        it runs if it is at most ``grace_s`` (or :data:`ON_TIME_S`) old and this replica wins its claim. Slots
        before it that were never handled (the clock jumped, or the process was stopped) are skipped, with one
        log line.
        """
        return await self._run_due(self._due(now), now)

    async def aclose(self) -> None:
        """Stop the loop; reports already running get ``close_timeout_s`` to finish, then are cancelled."""
        if self._taker is not None:
            await self._taker.aclose()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        ticks = [task for task in self._ticks if not task.done()]
        if ticks:
            _, late = await asyncio.wait(ticks, timeout=self._close_timeout_s)
            for task in late:
                log.warning("schedules.report_cancelled", task=task.get_name())
                task.cancel()
            await asyncio.gather(*ticks, return_exceptions=True)
        if self._own_background:
            await self._background.aclose()

    # --- the loop ------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            wake = min(self._next_after_handled(schedule) for schedule in self._schedules)
            await self._clock.sleep_until(wake)
            self._spawn_tick(self._clock.now())

    def _next_after_handled(self, schedule: ScheduleConfig) -> datetime:
        after = self._handled.get(schedule.name) or self._clock.now()
        return next_slot(schedule.cron, schedule.timezone, after)

    def _spawn_tick(self, now: datetime) -> None:
        # What is due is decided here, before the next wait: the loop never sees one slot twice.
        task = self._background.spawn(self._run_due(self._due(now), now), name="schedules-tick")
        if task is not None:
            self._ticks.add(task)
            task.add_done_callback(self._ticks.discard)

    def _due(self, now: datetime) -> list[tuple[ScheduleConfig, datetime, datetime | None]]:
        """Each schedule's latest unhandled slot at ``now``, with the slot before it when that one was missed too."""
        due: list[tuple[ScheduleConfig, datetime, datetime | None]] = []
        for schedule in self._schedules:
            slot = previous_slot(schedule.cron, schedule.timezone, now)
            handled = self._handled.get(schedule.name)
            if handled is not None and slot <= handled:
                continue
            self._handled[schedule.name] = slot
            missed = None
            if handled is not None:
                before = previous_slot(schedule.cron, schedule.timezone, slot - timedelta(microseconds=1))
                missed = before if before > handled else None
            due.append((schedule, slot, missed))
        return due

    async def _run_due(
        self, due: list[tuple[ScheduleConfig, datetime, datetime | None]], now: datetime
    ) -> list[tuple[str, datetime]]:
        ran = await asyncio.gather(*(self._handle(schedule, slot, missed, now) for schedule, slot, missed in due))
        return [(schedule.name, slot) for (schedule, slot, _), done in zip(due, ran, strict=True) if done]

    # --- one slot ------------------------------------------------------------

    async def _handle(self, schedule: ScheduleConfig, slot: datetime, missed: datetime | None, now: datetime) -> bool:
        """Skip ``missed`` (an older slot never run), then run ``slot`` when it is still in grace; True when run."""
        if missed is not None:
            await self._skip(schedule, missed, now)
        if (now - slot).total_seconds() > max(schedule.grace_s, ON_TIME_S):
            await self._skip(schedule, slot, now)
            return False
        if not await self._claim(schedule, slot):
            return False
        try:
            await self._run_report(schedule, slot)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one failed report must not stop the schedules
            log.error("schedules.report_failed", name=schedule.name, slot=_iso(slot),
                      error=type(exc).__name__, detail=str(exc))
            log.debug("schedules.report_failed.traceback", name=schedule.name, exc_info=True)
        return True

    async def _claim(self, schedule: ScheduleConfig, slot: datetime) -> bool:
        """True when this replica wins ``slot``.

        When the Store cannot be reached the slot is skipped here (``schedules.claim_failed``): without the
        claim there is no telling whether another replica runs it, and every replica would post the report.
        """
        ttl_s = max(CLAIM_TTL_MIN_S, 2 * schedule.grace_s)
        try:
            return await self._store.claim(slot_key(schedule.name, slot), ttl_s)
        except Exception as exc:
            log.error("schedules.claim_failed", name=schedule.name, slot=_iso(slot),
                      error=type(exc).__name__, detail=str(exc))
            return False

    async def _skip(self, schedule: ScheduleConfig, slot: datetime, now: datetime) -> None:
        """Log a slot too old to run, once for the fleet: its claim says whether it was run or logged already."""
        if await self._claim(schedule, slot):
            log.warning("schedules.slot_skipped", name=schedule.name, slot=_iso(slot),
                        late_s=round((now - slot).total_seconds()), grace_s=schedule.grace_s)


def _iso(slot: datetime) -> str:
    return slot.isoformat()
