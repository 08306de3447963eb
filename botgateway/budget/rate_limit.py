"""The shape of one platform rate limit: a token bucket, or a window spendable in a burst; and how many calls the
platform may see arrive in one second."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["LIVE_TRICKLE", "RateLimit", "live_room"]

LIVE_TRICKLE = 10
"""Under a limit on arrivals, live updates always keep one call in this many of the window, reservations or not."""


@dataclass(frozen=True)
class RateLimit:
    """A token bucket (sustained ``rate_per_s``, bursts up to ``burst``), or with ``window_s`` a window."""

    rate_per_s: float
    """Refill rate in calls per second (a window: ``burst / window_s``, informational)."""
    burst: int = 1
    """Bucket size; for a window, the calls allowed in any ``window_s`` seconds."""
    window_s: float = 0.0
    """Above 0: a sliding window of ``burst`` calls per ``window_s`` seconds instead of a token bucket."""
    arrivals_per_s: int = 0
    """Above 0: besides the bucket, at most this many calls in any :attr:`arrival_window_s` (a second unless it
    says otherwise) *as the platform counts them*, on arrival.

    A call counts from its grant until one window after its answer came back: the platform counted it somewhere
    in between. Pacing what is sent cannot keep a limit on arrivals: a network or server stall holds calls sent
    apart and lets them arrive together. Counting the time a call may have been on its way keeps the limit
    whatever the stall, at the cost of one round trip per window: ``arrivals_per_s`` calls per
    ``arrival_window_s + round trip`` at most. An open card's reserved final holds back live updates here too
    (the ledgers leave them a tenth of the window at least), so finals due together find the window free."""
    arrival_window_s: float = 1.0
    """The span :attr:`arrivals_per_s` counts over (a Slack channel's: its window of a few seconds)."""

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
            shared = RateLimit.window(max(self.burst // parts, 1), self.window_s)
        else:
            shared = RateLimit(rate_per_s=self.rate_per_s / parts, burst=max(self.burst // parts, 1))
        if self.arrivals_per_s > 0:
            shared = replace(shared, arrivals_per_s=max(self.arrivals_per_s // parts, 1),
                             arrival_window_s=self.arrival_window_s)
        return shared


def live_room(arrivals: int, reserved: int) -> int:
    """Of ``arrivals`` calls per arrival window (a limit's, maybe learned lower), how many live updates may have
    counting: what ``reserved`` finals leave, and one call in :data:`LIVE_TRICKLE` at least (a trickle, so a
    burst's cards still move)."""
    trickle = max(arrivals // LIVE_TRICKLE, 1)
    return max(arrivals - min(reserved, arrivals - trickle), trickle)
