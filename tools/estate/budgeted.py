"""One remote call under a budget: wait for the API's budget, make the call, and retry a throttle with backoff.

Every estate source (the clouds' SDK calls, the Kubernetes API) draws each
call from a :class:`~botgateway.budget.RateBudget` key (one per API and
account), so a fan-out never fires past a documented rate. A throttle answer
pauses the key for every caller and is retried, paced by
:data:`THROTTLE_BACKOFF` or the server's ``Retry-After``, while the deadline
allows; never in a tight loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget, RateLimit
from tools.estate.source import SourceError

__all__ = ["THROTTLE_BACKOFF", "call_within_budget"]

log = structlog.get_logger(__name__)

V = TypeVar("V")

THROTTLE_BACKOFF = Backoff(base_s=0.2, max_s=2.0)
"""Pacing of retries after a throttle answer (jittered, so concurrent callers spread out)."""


async def call_within_budget(
    budget: RateBudget,
    key: str,
    limit: RateLimit,
    call: Callable[[], Awaitable[V]],
    *,
    deadline: float,
    api: str,
    timeout_s: float,
) -> V:
    """``await call()`` once ``key``'s budget grants it; a :class:`SourceError` ``throttled`` is retried until
    ``deadline`` (a ``time.monotonic()`` instant), every other error raised at once.
    """
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SourceError("timeout", f"timed out after {timeout_s:g} s ({api})")
        try:
            await asyncio.wait_for(budget.acquire(key, limit, owner=key), remaining)
        except TimeoutError:
            raise SourceError("throttled", f"{api}: call budget exhausted for {timeout_s:g} s") from None
        try:
            return await call()
        except SourceError as exc:
            if exc.kind != "throttled":
                raise
            pause = max(exc.retry_after_s or 0.0, THROTTLE_BACKOFF.delay(attempt))
            budget.pause(key, pause)
            if time.monotonic() + pause >= deadline:
                raise SourceError(
                    "throttled", f"throttled by {api}; tried {attempt + 1} times, try again shortly",
                    retry_after_s=exc.retry_after_s,
                ) from None
            log.info("estate_throttled", key=key, api=api, attempt=attempt, pause_s=round(pause, 2))
            attempt += 1
            await asyncio.sleep(pause)  # pacing a retry, not waiting for an event
        finally:
            budget.landed(key)
