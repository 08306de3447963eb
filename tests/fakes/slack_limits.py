"""The fake Slack's throttling model: scripted failures, per-method windows and a channel's new messages.

:class:`SlackLimits` decides, before a Web API method runs, whether Slack would
refuse the call instead: a failure a test scripted (:meth:`FakeSlack.fail
<tests.fakes.slack.FakeSlack.fail>`), a method past its :class:`Window`
(scoped per workspace or per channel like Slack's tiers), or a channel past
its limit on new messages (``channel_limit``), whatever method makes them. A
throttle is answered as a ``ratelimited`` body or as HTTP 429 with a whole-second
``Retry-After``, as the fake's ``limit_style`` says.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["MESSAGE_METHODS", "SLACK_CHANNEL_MESSAGES", "Failure", "SlackLimits", "Window"]

MESSAGE_METHODS = ("chat.postMessage", "chat.startStream")
"""Methods that make a new message in a channel (``chat.startStream`` only while stream starts are counted)."""


@dataclass(frozen=True)
class Window:
    """A rate limit: at most ``calls`` accepted calls in any ``seconds`` window."""

    calls: int
    """Calls allowed in the window."""
    seconds: float
    """Window length."""
    scope: Literal["workspace", "channel"] = "workspace"
    """What the window is counted per (Slack's ``chat.postMessage`` special limit is per channel)."""


SLACK_CHANNEL_MESSAGES = Window(3, 3.0, "channel")
"""Slack's limit on a channel's new messages as the fake models it: about one a second, bursts of three."""


@dataclass
class Failure:
    """An injected failure for the next calls of one method."""

    error: str = "internal_error"
    """``error`` code answered in the body."""
    status: int = 200
    """HTTP status (5xx for server errors, 429 for throttling)."""
    retry_after: float | None = None
    """``Retry-After`` header, if any."""
    remaining: int = 1
    """How many calls still fail."""
    body: str | None = None
    """Raw body instead of JSON (for broken proxies)."""


class _Settings(Protocol):
    """The fake's limit settings, read on every call because tests change them between calls."""

    team_id: str
    limits: dict[str, Window]
    limit_style: Literal["body", "http429"]
    channel_limit: Window | None
    stream_starts_per_channel: bool


class SlackLimits:
    """Which calls Slack would refuse before running them, and the windows of the calls it accepted."""

    def __init__(self, settings: _Settings) -> None:
        """``settings`` is the fake itself: its ``limits``, ``limit_style``, ``channel_limit``… as they are now."""
        self._settings = settings
        self._accepted: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._failures: dict[str, deque[Failure]] = defaultdict(deque)

    def script(self, method: str, failure: Failure) -> None:
        """Queue ``failure`` for the next calls of ``method`` (after the ones already queued)."""
        self._failures[method].append(failure)

    def refusal(self, method: str, args: Mapping[str, Any], at: float) -> Failure | None:
        """What to answer instead of running ``method`` arriving ``at``: a scripted failure or a throttle; else None.

        An accepted call counts in its windows; a refused one does not.
        """
        failures = self._failures.get(method)
        if failures:
            failure = failures[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.popleft()
            return failure
        settings = self._settings
        window = settings.limits.get(method)
        if window is not None:
            scope = str(args.get("channel", "")) if window.scope == "channel" else settings.team_id
            throttle = self._over(window, (method, scope), at)
            if throttle is not None:
                return throttle
        if settings.channel_limit is not None and self._makes_message(method):
            return self._over(settings.channel_limit, ("messages", str(args.get("channel", ""))), at)
        return None

    def _makes_message(self, method: str) -> bool:
        return method in MESSAGE_METHODS and (method != "chat.startStream" or self._settings.stream_starts_per_channel)

    def _over(self, window: Window, key: tuple[str, str], at: float) -> Failure | None:
        """The throttle when a call at ``at`` is past ``window`` counted under ``key``; else None (the call counts)."""
        accepted = self._accepted[key]
        while accepted and at - accepted[0] >= window.seconds:
            accepted.popleft()
        if len(accepted) < window.calls:
            accepted.append(at)
            return None
        retry = max(0.05, window.seconds - (at - accepted[0]))
        if self._settings.limit_style == "http429":
            # Whole seconds, rounded up like Slack's: rounding down would invite a retry that is throttled again.
            return Failure("ratelimited", 429, math.ceil(retry))
        return Failure("ratelimited")
