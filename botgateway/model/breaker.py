"""A small circuit breaker per model endpoint: a failing endpoint is skipped for a cool-down.

Closed, an endpoint is tried on every turn. After ``failures`` consecutive
failures before the first token (each already after the endpoint's own retries)
it opens: turns skip it and go straight to the next endpoint of their chain.
Once ``cooldown_s`` has passed it is half-open: exactly one turn tries it (the
*trial*); others keep skipping it until that trial ends. A trial that answers
closes the breaker; one that fails opens it for another cool-down; one that ends
without saying either (stopped, or refused as a bad request) lets the next turn
try. Each change of state is logged once.

Every attempt holds an :class:`Attempt`, the token :meth:`CircuitBreaker.try_acquire`
gives (or :meth:`CircuitBreaker.unacquired` when every endpoint is cooling down
and this one is asked anyway); only the attempt that is the trial can end it, so
a turn that asked without the trial never frees it for a second one.

The clock is injected (``time.monotonic`` by default), so tests move time
instead of waiting for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import structlog

__all__ = ["Attempt", "BreakerState", "CircuitBreaker"]

log = structlog.get_logger(__name__)

BreakerState: TypeAlias = Literal["closed", "open", "half_open"]
"""Closed: tried on every turn. Open: skipped until the cool-down ends. Half-open: one trial may run."""


@dataclass(frozen=True, eq=False)
class Attempt:
    """One turn's attempt at an endpoint, to hand back with its outcome; compared by identity."""

    trial: bool = False
    """The breaker was half-open and this attempt is its one trial."""


class CircuitBreaker:
    """Whether one endpoint should be tried now, from how its recent attempts went.

    Args:
        endpoint: The endpoint's name, for the log.
        failures: Consecutive failures that open the breaker.
        cooldown_s: How long an open breaker skips the endpoint.
        clock: Seconds on a monotonic clock.
    """

    def __init__(
        self, endpoint: str, *, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1:
            raise ValueError("failures must be at least 1")
        self.endpoint = endpoint
        """The endpoint's name."""
        self._threshold = failures
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0  # consecutive, since the last success
        self._opened_at = 0.0
        self._open = False
        self._trial: Attempt | None = None  # the half-open trial running, if any

    @property
    def state(self) -> BreakerState:
        """The breaker's state now (an open breaker whose cool-down has passed is half-open)."""
        if not self._open:
            return "closed"
        return "half_open" if self._clock() - self._opened_at >= self._cooldown_s else "open"

    def try_acquire(self) -> Attempt | None:
        """The attempt this turn may make at the endpoint, or None when it should skip it.

        An attempt from a half-open breaker is its one trial. Every attempt must be handed back to exactly one of
        :meth:`succeeded`, :meth:`failed` or :meth:`released`.
        """
        state = self.state
        if state == "closed":
            return Attempt()
        if state == "open" or self._trial is not None:
            return None
        self._trial = Attempt(trial=True)
        log.info("llm_breaker_half_open", endpoint=self.endpoint, cooldown_s=self._cooldown_s)
        return self._trial

    @staticmethod
    def unacquired() -> Attempt:
        """An attempt made without the breaker's leave (every endpoint of the chain was cooling down): never a trial."""
        return Attempt()

    def succeeded(self, attempt: Attempt) -> None:
        """The endpoint answered (its first token arrived): the breaker closes."""
        self._failures = 0
        self._end(attempt)
        if self._open:
            self._open = False
            self._trial = None  # closed: a trial still running has nothing left to decide
            log.info("llm_breaker_closed", endpoint=self.endpoint)

    def failed(self, attempt: Attempt) -> None:
        """The endpoint failed before its first token (429, 5xx, a timeout, a connection error)."""
        self._failures += 1
        trial = self._end(attempt)
        if trial or (not self._open and self._failures >= self._threshold):
            self._open = True
            self._opened_at = self._clock()
            log.warning(
                "llm_breaker_open", endpoint=self.endpoint, failures=self._failures, cooldown_s=self._cooldown_s
            )

    def released(self, attempt: Attempt) -> None:
        """The attempt ended without telling whether the endpoint works (stopped, or the request refused)."""
        self._end(attempt)

    def _end(self, attempt: Attempt) -> bool:
        """End ``attempt``; True when it was the running trial (only the trial's own attempt frees the trial)."""
        if attempt is not self._trial:
            return False
        self._trial = None
        return True
