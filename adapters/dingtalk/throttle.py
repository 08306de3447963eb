"""Counts throttle answers and decides when new turns degrade to markdown replies.

Streaming cards cost many calls per turn; a markdown reply costs one. When
DingTalk throttles the card APIs repeatedly within a window, new turns answer
with one markdown message each for a while, so the app stays under its quota
and running cards get the remaining budget to finish.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import structlog

__all__ = ["ThrottleMonitor"]

log = structlog.get_logger(__name__)


class ThrottleMonitor:
    """``record()`` each throttle answer; ``degraded`` is True for ``degrade_for_s`` after ``threshold`` within ``window_s``."""

    def __init__(
        self,
        *,
        window_s: float,
        threshold: int,
        degrade_for_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._threshold = threshold
        self._degrade_for_s = degrade_for_s
        self._clock = clock
        self._hits: collections.deque[float] = collections.deque()
        self._degraded_until = 0.0

    def record(self) -> None:
        """Note one throttle answer (HTTP 403 QpsLimit or 429)."""
        now = self._clock()
        self._hits.append(now)
        while self._hits and now - self._hits[0] > self._window_s:
            self._hits.popleft()
        if len(self._hits) >= self._threshold and now >= self._degraded_until:
            self._degraded_until = now + self._degrade_for_s
            self._hits.clear()
            log.warning("dingtalk.degraded_to_markdown", for_s=self._degrade_for_s, threshold=self._threshold, window_s=self._window_s)

    @property
    def degraded(self) -> bool:
        """True while new turns should answer with markdown replies instead of cards."""
        return self._clock() < self._degraded_until
