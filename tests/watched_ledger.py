"""A real in-memory ledger that tells a test each call it refuses the budget's dispatcher.

A refusal is the moment a waiting call is known not to go: the dispatcher
asked the accounts for it, was told no, and sleeps until a release, a pause
or the time the ledger named. A test that asserts "not granted" waits for
that moment instead of yielding a guessed number of times and asserting on
a dispatcher that may not have asked yet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from botgateway.budget import LocalLedger, RateLimit, Verdict

__all__ = ["CountsRefusals", "WatchedLedger"]


class CountsRefusals:
    """Mixed into a ledger (in-memory or shared): counts the calls it refuses (:attr:`refusals`), awaitable with
    :meth:`refused`."""

    refusal_wait_s = 10.0
    """How long :meth:`refused` waits by default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusals = 0
        """Calls refused so far."""
        self._change = asyncio.Event()

    async def take(self, key: str, limit: RateLimit, **kwargs: Any) -> Verdict:
        """The ledger's answer, counted when it refuses."""
        verdict: Verdict = await super().take(key, limit, **kwargs)  # type: ignore[misc]
        if not verdict.granted:
            self.refusals += 1
            change, self._change = self._change, asyncio.Event()
            change.set()
        return verdict

    async def refused(self, count: int, timeout_s: float | None = None) -> None:
        """Wait until ``count`` calls in all were refused; an assertion fails when they never are (the call that
        was to wait went instead)."""
        try:
            async with asyncio.timeout(timeout_s or self.refusal_wait_s):
                while self.refusals < count:
                    await self._change.wait()
        except TimeoutError:
            raise AssertionError(f"{self.refusals} calls refused, not {count}: a call that was to wait went") from None


class WatchedLedger(CountsRefusals, LocalLedger):
    """:class:`LocalLedger` counting the calls it refuses (:attr:`refusals`), awaitable with :meth:`refused`."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock=clock)
