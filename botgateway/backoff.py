"""Exponential backoff with jitter: the one retry pacing every loop uses."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """``base_s · 2^attempt``, capped at ``max_s``, times a random factor in ``jitter``.

    Jitter spreads the retries of many callers that failed together (a throttle
    hits every card of a workspace at once), so they do not retry in lockstep.
    """

    base_s: float
    """The first delay (attempt 0), before jitter."""
    max_s: float = math.inf
    """No delay exceeds this, before jitter."""
    jitter: tuple[float, float] = (0.5, 1.0)
    """The delay is multiplied by a uniform factor in this range; ``(1.0, 1.0)`` for none."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        raw = min(self.max_s, self.base_s * 2 ** min(max(attempt, 0), 64))
        low, high = self.jitter
        return raw * (low if low == high else random.uniform(low, high))
