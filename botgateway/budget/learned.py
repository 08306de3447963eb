"""A rate key's limit as the platform taught it: lowered at once by a throttle, given back step by step in quiet.

A configured limit is a guess until the platform answers. Every throttle
answer (HTTP 429, DingTalk's 403 ``QpsLimit``, Slack's ``ratelimited``) for a
key lowers that key's *learned share* of its configured limit (multiplicative
decrease, floored), and every quiet period without one gives a step of it
back (additive increase, up to the configured limit): AIMD, as a congested
network link is shared. The ledgers grant calls by the learned limit, so a
plan never fires more calls at a key than the current estimate allows.

The state is three numbers per key (:class:`Learned`), computed forward
lazily from when it last changed: the in-memory ledger keeps it per key, the
Redis ledger keeps the same three beside the key's bucket (so the fleet
learns as one), with the same arithmetic in its scripts.

Two shapes learn alike, with one difference:

- a token bucket (DingTalk's QPS, Slack's one message a second per channel)
  has its rate, burst and limit on arrivals multiplied by :attr:`Learning.decrease`;
- a window (Slack's per-minute tiers) measures what the platform allowed: it
  was refused with ``n`` calls in the window, so it is lowered towards ``n``,
  by :attr:`Learning.window_decrease` at most per throttle (our window may not
  be the platform's: step by step), and grows back one step per quiet window.

Throttles answering calls sent before the last one was heard (a volley in
flight) say nothing new: a throttle that comes while the key is still paused
by an earlier one is counted but does not lower the estimate again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from botgateway.budget.rate_limit import RateLimit

__all__ = ["LEARN_BACK", "Estimate", "Learned", "Learning", "learned_limit"]

LEARN_BACK = 0.1
"""The default step: a quiet period gives back this share of the configured limit; a window's throttle lowers it by as
much at most."""

_EPSILON = 1e-9
"""Slack when flooring a scaled count (``20 × 0.9`` is 18 calls, never 17.999… of them)."""


@dataclass(frozen=True)
class Learning:
    """How every key of a ledger learns from throttles (the knobs; the defaults suit Slack and DingTalk)."""

    decrease: float = 0.5
    """A token bucket's learned share is multiplied by this on a throttle (rate, burst and limit on arrivals)."""
    window_decrease: float = 1.0 - LEARN_BACK
    """A window's learned share is multiplied by this at most on a throttle: never below the calls the window held
    when the platform refused the next one."""
    floor: float = 0.1
    """No key is learned below this share of its configured limit (nor below one call)."""
    quiet_s: float = 10.0
    """A token bucket gets a :attr:`step` back after every ``quiet_s`` seconds without a throttle (counted from the
    end of the throttle's pause); a window after every quiet window."""
    step: float = LEARN_BACK
    """Share of the configured limit given back per quiet period (a window: one call at least)."""

    def __post_init__(self) -> None:
        if not (0 < self.decrease <= 1 and 0 < self.window_decrease <= 1 and 0 < self.floor <= 1):
            raise ValueError("decrease, window_decrease and floor are shares: above 0, at most 1")
        if self.quiet_s <= 0 or self.step <= 0:
            raise ValueError("quiet_s and step must be above 0")

    def period_s(self, limit: RateLimit) -> float:
        """Seconds without a throttle that give one step back."""
        return limit.window_s if limit.windowed else self.quiet_s

    def step_share(self, limit: RateLimit) -> float:
        """The share one quiet period gives back."""
        return max(self.step, 1.0 / max(limit.burst, 1)) if limit.windowed else self.step

    def floor_share(self, limit: RateLimit) -> float:
        """The lowest share ``limit`` is learned down to."""
        return max(self.floor, 1.0 / max(limit.burst, 1)) if limit.windowed else self.floor

    def lowered_share(self, limit: RateLimit) -> float:
        """The factor a throttle multiplies the share by."""
        return self.window_decrease if limit.windowed else self.decrease


@dataclass(frozen=True)
class Learned:
    """What one key learned: its share of the configured limit since a time, and the throttles that taught it."""

    share: float = 1.0
    """The learned share at :attr:`since` (1: the configured limit)."""
    since: float = 0.0
    """When :attr:`share` was set (the end of the pause of the throttle that set it); quiet periods count from then."""
    throttles: int = 0
    """Throttle answers heard for the key."""

    def share_at(self, learning: Learning, limit: RateLimit, now: float) -> float:
        """The learned share at ``now``: :attr:`share` plus a step per quiet period since :attr:`since`."""
        if self.share >= 1.0:
            return 1.0
        steps = math.floor(max(now - self.since, 0.0) / learning.period_s(limit))
        return min(1.0, self.share + steps * learning.step_share(limit))

    def throttled(
        self, learning: Learning, limit: RateLimit, now: float, *, until: float, held: int, lower: bool
    ) -> Learned:
        """After a throttle heard at ``now`` that pauses the key until ``until``.

        ``held``: a window's calls in it when the platform refused the next one. ``lower``: False when the key was
        still paused by an earlier throttle (a call sent before it was heard): counted, but it lowers nothing.
        """
        if not lower:
            return replace(self, throttles=self.throttles + 1)
        share = self.share_at(learning, limit, now)
        lowered = share * learning.lowered_share(limit)
        if limit.windowed:
            lowered = max(lowered, held / max(limit.burst, 1))
        share = max(learning.floor_share(limit), min(share, lowered))
        return Learned(share=share, since=until, throttles=self.throttles + 1)


def learned_limit(limit: RateLimit, share: float) -> RateLimit:
    """``limit`` at ``share`` of itself: a window's calls, or a bucket's rate, burst and limit on arrivals (whole
    calls, one at least)."""
    if share >= 1.0:
        return limit
    if limit.windowed:
        return RateLimit.window(_calls(limit.burst, share), limit.window_s)
    arrivals = _calls(limit.arrivals_per_s, share) if limit.arrivals_per_s > 0 else 0
    return RateLimit(rate_per_s=limit.rate_per_s * share, burst=_calls(limit.burst, share), arrivals_per_s=arrivals,
                     arrival_window_s=limit.arrival_window_s)


def _calls(calls: int, share: float) -> int:
    return max(int(calls * share + _EPSILON), 1)


@dataclass(frozen=True)
class Estimate:
    """One key's limit as configured and as learned now, and the throttles heard for it (fleet-wide with Redis)."""

    key: str
    """The rate key (a platform's app or workspace × API, or a channel)."""
    configured: RateLimit
    """The limit the callers pass (from the configuration)."""
    share: float
    """The learned share of :attr:`configured` now (1: nothing learned, or all of it given back)."""
    throttles: int
    """Throttle answers heard for the key."""

    @property
    def learned(self) -> RateLimit:
        """The limit calls are granted by now."""
        return learned_limit(self.configured, self.share)
