"""Why the fake card API refuses a call before taking it: its token buckets, and the failures a test scripted.

:class:`CardAPILimits` holds the fake's rate limits, token buckets checked when
a call *arrives* (one per API, :data:`BUCKET_OF_OP`, or with ``one_bucket`` one
for the whole app, as DingTalk's card API counts), and the failures queued with
:meth:`FakeCardAPI.fail <tests.fakes.card_api.FakeCardAPI.fail>`. A throttle
wins over a script: a call past its bucket is refused and no script is spent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["APP_BUCKET", "BUCKET_OF_OP", "CardAPILimits", "Refusal", "ScriptedFailure", "TokenBucket", "format_seconds"]

BUCKET_OF_OP: Mapping[str, str] = {"create": "create", "update": "update", "finalize": "update", "fallback": "message"}
"""Which rate bucket each op draws from (per-API mode), at the fake and in :class:`HttpCardSink` alike."""

APP_BUCKET = "app"
"""The one bucket of ``one_bucket`` mode."""

Refusal = tuple[int, dict[str, Any], float | None, str]
"""How a call is refused: HTTP status, JSON body, ``Retry-After`` seconds (or None) and the recorded reason."""


@dataclass
class ScriptedFailure:
    """Failures a test queued for one op: the next ``times`` matching calls get ``status`` and ``body``."""

    status: int
    """HTTP status answered."""
    times: int
    """How many more calls it refuses."""
    retry_after: float | None
    """``Retry-After`` seconds answered, if any."""
    body: dict[str, Any]
    """JSON body answered."""
    when: Callable[[dict[str, Any]], bool] | None
    """Only calls whose body matches are refused (None: every call)."""


class TokenBucket:
    """The server-side rate limit: a token bucket checked on arrival."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = max(rate, 1e-9)
        self.burst = float(max(burst, 1))
        self.tokens = self.burst
        self.clock = clock
        self.at = clock()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until one is available."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


def format_seconds(seconds: float) -> str:
    """``1``, ``0.05``, ``0.123``: decimal seconds as a Retry-After value."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") or "0"


class CardAPILimits:
    """The fake's buckets and scripted failures, consulted once per arriving call."""

    def __init__(
        self,
        *,
        rate_per_s: float | None,
        burst: int | None,
        rates: Mapping[str, tuple[float, int]] | None,
        one_bucket: bool,
        clock: Callable[[], float],
    ) -> None:
        """The buckets of :class:`~tests.fakes.card_api.FakeCardAPI`'s arguments of the same names."""
        self._one_bucket = one_bucket
        self._buckets: dict[str, TokenBucket] = {}
        names = [APP_BUCKET] if one_bucket else sorted(set(BUCKET_OF_OP.values()))
        for name in names:
            if rates and name in rates:
                rate, size = rates[name]
                self._buckets[name] = TokenBucket(rate, size, clock)
            elif rate_per_s is not None:
                self._buckets[name] = TokenBucket(rate_per_s, burst if burst is not None else max(round(rate_per_s), 1), clock)
        self._failures: dict[str, list[ScriptedFailure]] = {}

    def bucket_name(self, op: str) -> str:
        """The bucket ``op`` draws from."""
        return APP_BUCKET if self._one_bucket else BUCKET_OF_OP[op]

    def script(self, op: str, failure: ScriptedFailure) -> None:
        """Queue ``failure`` for ``op``, after the ones already queued."""
        self._failures.setdefault(op, []).append(failure)

    def clear(self, op: str | None = None) -> None:
        """Forget the scripted failures of ``op`` (of every op when None)."""
        if op is None:
            self._failures.clear()
        else:
            self._failures.pop(op, None)

    def refusal(self, op: str, body: dict[str, Any], retry_after_s: float | None) -> Refusal | None:
        """How a call of ``op`` carrying ``body`` is refused now (a throttle, else a script), or None.

        ``retry_after_s`` fixes a throttle's ``Retry-After``; None answers the exact time until a token.
        """
        bucket = self._buckets.get(self.bucket_name(op))
        wait = bucket.take() if bucket is not None else 0.0
        if wait > 0:
            retry_after = retry_after_s if retry_after_s is not None else wait
            payload = {"code": "QpsLimit", "message": "the app exceeded its calls per second", "retry_after": retry_after}
            return 429, payload, retry_after, "rate_limit"
        for failure in self._failures.get(op, []):
            if failure.times > 0 and (failure.when is None or failure.when(body)):
                failure.times -= 1
                return failure.status, failure.body, failure.retry_after, "scripted"
        return None
