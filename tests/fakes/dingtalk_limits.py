"""The fake DingTalk's throttling model: failures a test scripts per path, and the app's QPS limit.

:class:`DingTalkLimits` keeps the failures queued with
:meth:`FakeDingTalk.fail_next <tests.fakes.dingtalk.FakeDingTalk.fail_next>`
and the arrivals of the last second, for the card APIs (both together) and for
the media upload. Past ``qps_limit`` DingTalk answers HTTP 403 with
:data:`QPS_LIMIT_CODE`; the handlers build those answers, this only counts.
"""

from __future__ import annotations

import collections
from typing import Literal, Protocol

__all__ = ["QPS_LIMIT_CODE", "DingTalkLimits", "FailureKind"]

QPS_LIMIT_CODE = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
"""The ``code`` of DingTalk's HTTP 403 throttle body."""

FailureKind = Literal["qps", "429", "401", "500"]
"""A failure a test can script: a QpsLimit 403, a 429 with ``Retry-After``, a 401, or a 5xx."""


class _Settings(Protocol):
    """The fake's QPS limit, read on every call because tests may change it."""

    qps_limit: int | None


class DingTalkLimits:
    """Scripted failures by path, and the sliding second of card calls and of media uploads."""

    def __init__(self, settings: _Settings) -> None:
        """``settings`` is the fake itself (its ``qps_limit`` as it is now)."""
        self._settings = settings
        self._failures: dict[str, collections.deque[FailureKind]] = collections.defaultdict(collections.deque)
        self._card_arrivals: list[float] = []
        self._media_arrivals: list[float] = []

    def script(self, path: str, kind: FailureKind, times: int) -> None:
        """Answer the next ``times`` calls to ``path`` with ``kind`` (after the ones already scripted)."""
        self._failures[path].extend([kind] * times)

    def next_failure(self, path: str) -> FailureKind | None:
        """The scripted failure the next call to ``path`` gets (taken off the queue), or None."""
        return self._failures[path].popleft() if self._failures[path] else None

    def card_over_qps(self, at: float) -> bool:
        """Whether a card call arriving ``at`` is past the limit; it counts in the window either way."""
        limit = self._settings.qps_limit
        if limit is None:
            return False
        self._card_arrivals = [t for t in self._card_arrivals if at - t < 1.0]
        over = len(self._card_arrivals) >= limit
        self._card_arrivals.append(at)
        return over

    def media_over_qps(self, at: float) -> bool:
        """Whether a media upload arriving ``at`` is past the limit; it counts in the window either way."""
        limit = self._settings.qps_limit
        if limit is None:
            return False
        self._media_arrivals = [t for t in self._media_arrivals if at - t < 1.0]
        self._media_arrivals.append(at)
        return len(self._media_arrivals) > limit
