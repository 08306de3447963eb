"""The running gateway's side of ``schedules run NAME``: it takes the requests of its schedules and runs them now.

See :mod:`botgateway.schedules.requests` for the exchange. :class:`RunNowTaker`
says which schedules it runs, polls their request keys every :data:`POLL_S`
(a request waits at most that long), and runs a request whose claim it wins
through the same adapters as a scheduled slot, writing how each card ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from botgateway.background import BackgroundTasks
from botgateway.schedules.requests import (
    OUTCOME_TTL_S,
    REQUEST_CLAIM_TTL_S,
    RunOutcome,
    RunRequest,
    TakerStore,
    outcome_key,
    request_claim_key,
    request_key,
    taker_key,
)

if TYPE_CHECKING:
    from botgateway.config.schedules import ScheduleConfig
    from botgateway.schedules.report import CardResult

__all__ = ["POLL_S", "PRESENCE_REFRESH_S", "PRESENCE_TTL_S", "RunNow", "RunNowTaker"]

log = structlog.get_logger(__name__)

POLL_S = 1.0
"""How often the request keys are read: what a ``schedules run`` waits at most before a gateway takes it."""

PRESENCE_TTL_S = 120.0
"""How long a gateway's word that it takes requests lasts; it is written again every :data:`PRESENCE_REFRESH_S`."""

PRESENCE_REFRESH_S = 30.0
"""How often that word is written again (its instance heartbeat, not this, says whether the gateway lives)."""

RunNow = Callable[["ScheduleConfig", datetime], Awaitable[Sequence["CardResult"]]]
"""Runs one report now (the schedule, the moment it is for) and returns each destination's card once final."""


class RunNowTaker:
    """Takes the ``schedules run`` requests of ``schedules`` from the Store and runs each once, here or elsewhere.

    Args:
        schedules: The schedules this process runs.
        store: Where requests wait and outcomes are written (shared by the fleet with Redis).
        instance_id: This process's instance id (its heartbeat says it lives).
        run: Runs a report now and waits for its cards.
        poll_s: How often the request keys are read.
        close_timeout_s: :meth:`aclose` lets running reports finish for this long, then cancels them.
    """

    def __init__(
        self, schedules: Sequence[ScheduleConfig], *, store: TakerStore, instance_id: str, run: RunNow,
        poll_s: float = POLL_S, close_timeout_s: float = 30.0,
    ) -> None:
        self._schedules = tuple(schedules)
        self._store = store
        self._instance_id = instance_id
        self._run = run
        self._poll_s = poll_s
        self._close_timeout_s = close_timeout_s
        self._runs = BackgroundTasks()
        self._loop_task: asyncio.Task[Any] | None = None
        # The last request of each schedule seen here: a request stays readable until its TTL, claimed or not.
        self._seen: dict[str, str] = {}
        self._failing = False

    async def start(self) -> None:
        """Say which schedules this process takes requests for (before it counts as ready), then poll for them."""
        if not self._schedules or self._loop_task is not None:
            return
        announced = float("-inf")
        try:
            await self._announce()
            announced = time.monotonic()
        except Exception as exc:  # the loop says it again; a Store away at start must not stop the gateway
            log.warning("schedules.run_now_poll_failed", error=type(exc).__name__, detail=str(exc)[:300])
            self._failing = True
        self._loop_task = asyncio.ensure_future(self._loop(announced))

    async def aclose(self) -> None:
        """Stop polling; runs already taken get ``close_timeout_s`` to finish, then are cancelled."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        if not await self._runs.wait(self._close_timeout_s):
            log.warning("schedules.run_now_cancelled", running=len(self._runs))
        await self._runs.aclose()

    async def poll(self) -> None:
        """Read each schedule's request key once, and start running the requests this process wins."""
        for schedule in self._schedules:
            data = await self._store.get_document(request_key(schedule.name))
            request = RunRequest.from_dict(data) if data is not None else None
            if request is None or request.name != schedule.name or self._seen.get(schedule.name) == request.request_id:
                continue
            self._seen[schedule.name] = request.request_id
            if await self._store.claim(request_claim_key(request.request_id), REQUEST_CLAIM_TTL_S):
                self._runs.spawn(self._take(schedule, request), name=f"schedule-run:{schedule.name}")

    async def _loop(self, announced: float) -> None:
        while True:
            await asyncio.sleep(self._poll_s)  # a poll's pace, not a wait for something: nothing signals a request
            try:
                if time.monotonic() - announced >= PRESENCE_REFRESH_S:
                    await self._announce()
                    announced = time.monotonic()
                await self.poll()
            except Exception as exc:  # the Store is away: requests wait, the loop goes on
                if not self._failing:
                    log.warning("schedules.run_now_poll_failed", error=type(exc).__name__, detail=str(exc)[:300])
                self._failing = True
            else:
                self._failing = False

    async def _announce(self) -> None:
        names = [schedule.name for schedule in self._schedules]
        await self._store.put_document(taker_key(self._instance_id), {"names": names}, PRESENCE_TTL_S)

    async def _take(self, schedule: ScheduleConfig, request: RunRequest) -> None:
        slot = datetime.now(UTC).replace(microsecond=0)
        log.info("schedules.run_now_taken", name=schedule.name, request_id=request.request_id,
                 asked_by=request.asked_by, slot=slot.isoformat())
        taken = RunOutcome(request.request_id, "taken", self._instance_id, slot=slot.isoformat())
        await self._record(taken)
        try:
            cards = tuple(await self._run(schedule, slot))
        except asyncio.CancelledError:
            await self._record(RunOutcome(request.request_id, "failed", self._instance_id, slot=taken.slot,
                                          error="the gateway stopped before the report ended"))
            raise
        except Exception as exc:
            log.error("schedules.report_failed", name=schedule.name, slot=taken.slot, error=type(exc).__name__,
                      detail=str(exc))
            await self._record(RunOutcome(request.request_id, "failed", self._instance_id, slot=taken.slot,
                                          error=f"the report failed: {str(exc) or type(exc).__name__}"))
            return
        log.info("schedules.run_now_ended", name=schedule.name, request_id=request.request_id,
                 cards=[card.outcome for card in cards])
        await self._record(RunOutcome(request.request_id, "ended", self._instance_id, slot=taken.slot, cards=cards))

    async def _record(self, outcome: RunOutcome) -> None:
        try:
            await self._store.put_document(outcome_key(outcome.request_id), outcome.as_dict(), OUTCOME_TTL_S)
        except Exception as exc:  # the asker then sees this process go quiet, or gives up
            log.error("schedules.run_now_unrecorded", request_id=outcome.request_id, state=outcome.state,
                      error=type(exc).__name__)
