"""The shape of one platform rate limit: a token bucket, or a window spendable in a burst."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RateLimit"]


@dataclass(frozen=True)
class RateLimit:
    """A token bucket (sustained ``rate_per_s``, bursts up to ``burst``), or with ``window_s`` a window."""

    rate_per_s: float
    """Refill rate in calls per second (a window: ``burst / window_s``, informational)."""
    burst: int = 1
    """Bucket size; for a window, the calls allowed in any ``window_s`` seconds."""
    window_s: float = 0.0
    """Above 0: a sliding window of ``burst`` calls per ``window_s`` seconds instead of a token bucket."""

    @classmethod
    def window(cls, calls: int, window_s: float) -> RateLimit:
        """At most ``calls`` calls in any ``window_s`` seconds."""
        return cls(rate_per_s=calls / window_s, burst=max(int(calls), 1), window_s=window_s)

    @property
    def windowed(self) -> bool:
        """A window-shaped limit."""
        return self.window_s > 0

    def share(self, parts: int) -> RateLimit:
        """One of ``parts`` equal shares of this limit (at least one call per window or bucket)."""
        parts = max(int(parts), 1)
        if parts == 1:
            return self
        if self.windowed:
            return RateLimit.window(max(self.burst // parts, 1), self.window_s)
        return RateLimit(rate_per_s=self.rate_per_s / parts, burst=max(self.burst // parts, 1))
