"""Losing Redis under a shared ledger and getting it back: the switch to the local share and back, each said once.

A shared ledger (:class:`~botgateway.budget.ledgers.shared.SharedLedger`) spends the fleet's
accounts in Redis. When a call to Redis fails (refused, timed out, failing over), the
:class:`OutageWatch` turns the ledger to its local share, says so once, and probes Redis
with the core backoff. When Redis answers again, this process's reservations and the
window grants its local share made meanwhile are written there before the shared
accounts take over again (said once too), so no call is spent twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.budget.ledgers.local import LocalLedger
from botgateway.budget.ledgers.redis import RedisLedger
from botgateway.budget.ledgers.reservations import ReservationBook
from botgateway.budget.rate_limit import RateLimit
from botgateway.redaction import redact_text

__all__ = ["OutageWatch"]

log = structlog.get_logger(__name__)


class OutageWatch:
    """Whether a shared ledger's accounts are Redis's (:attr:`shared`), and the switch each way when Redis goes and comes.

    Args:
        redis: The fleet's accounts.
        local: The local share spent while Redis is away; what it granted is counted in Redis on the way back.
        book: This process's reservations: kept here while Redis is away, written there again on the way back.
        limits: The limit of every key the ledger was asked about (read on the way back).
        share: Processes in the fleet; this process spends ``1/share`` of every limit while Redis is away.
        probe: How often an unreachable Redis is tried again.
        tasks: Owns the probe and the background writes.
        on_lost: Forgets what only Redis holds (called once Redis is lost).
        on_back: Forgets what was seen before the outage (called once the shared accounts are back).
    """

    def __init__(
        self,
        redis: RedisLedger,
        local: LocalLedger,
        book: ReservationBook,
        *,
        limits: Mapping[str, RateLimit],
        share: int,
        probe: Backoff,
        tasks: BackgroundTasks,
        on_lost: Callable[[], None],
        on_back: Callable[[], None],
    ) -> None:
        self._redis = redis
        self._local = local
        self._book = book
        self._limits = limits
        self._share = share
        self._probe = probe
        self._tasks = tasks
        self._on_lost = on_lost
        self._on_back = on_back
        self._absorbed: dict[str, float] = {}
        self._pushes: set[asyncio.Task[Any]] = set()
        self.shared = True
        """True while the accounts are Redis's; False while this process spends its local share."""

    def push(self, call: Coroutine[Any, Any, Any], *, name: str) -> None:
        """Tell Redis something in the background (an outage turns to the fallback)."""
        task = self._tasks.spawn(self._quietly(call), name=name)
        if task is not None:
            self._pushes.add(task)
            task.add_done_callback(self._pushes.discard)

    async def pushed(self) -> None:
        """Wait until every background write started so far is done (or found Redis away)."""
        if self._pushes:
            await asyncio.wait(set(self._pushes))

    async def _quietly(self, call: Coroutine[Any, Any, Any]) -> None:
        try:
            await call
        except Exception as exc:
            self.lost(exc)

    def lost(self, exc: BaseException) -> None:
        """Redis did not answer: spend the local share from now on, say so once, and probe."""
        if not self.shared:
            return
        self.shared = False
        self._book.enabled = False
        self._on_lost()
        log.warning(
            "rate_budget.shared_unreachable",
            redis=self._redis.safe_url,
            error=redact_text(str(exc)) or type(exc).__name__,
            share=f"1/{self._share}",
            note=(f"the fleet's shared rate budget is unreachable: this process now spends 1/{self._share} of every "
                  "platform rate limit on its own, and returns to the shared budget when Redis answers; check that "
                  "Redis is running and reachable at memory.redis_url, and that gateway.replicas and gateway.workers "
                  "say how many processes run"),
        )
        self._tasks.spawn(self._probe_until_back(), name="rate-budget:probe")

    async def _probe_until_back(self) -> None:
        attempt = 0
        while True:
            await asyncio.sleep(self._probe.delay(attempt))
            attempt += 1
            try:
                await self._redis.ping()
                self._book.mark_all()
                await self._book.flush()
                await self._absorb()
            except Exception:  # still away (or answering what we cannot read): try again later
                continue
            self._on_back()
            self.shared = True
            self._book.enabled = True
            log.info("rate_budget.shared_restored", redis=self._redis.safe_url,
                     note="Redis answers again: the fleet shares one rate budget again")
            return

    async def _absorb(self) -> None:
        """Count in the shared windows the calls this process made on its own share, so none is spent twice."""
        for key, limit in list(self._limits.items()):
            times = self._local.recent_grants(key, since=self._absorbed.get(key, float("-inf")))
            if times:
                await self._redis.absorb(key, limit, times)
                self._absorbed[key] = times[-1]
