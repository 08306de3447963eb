"""What the fake DingTalk saw, for tests and the benchmark to read: its calls, the changes people saw, waits.

:class:`Call` is one HTTP call as the fake recorded it. :class:`DingTalkObservation`
is the part of :class:`~tests.fakes.dingtalk.FakeDingTalk` that counts the
calls of each API (accepted, throttled, failed), calls watchers back on every
change people would see, and lets a test wait for a condition instead of sleeping.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakes.dingtalk_cards import FakeCard
    from tests.fakes.dingtalk_robot import SentMessage

__all__ = ["Call", "DingTalkObservation"]


@dataclass
class Call:
    """One HTTP call the fake received."""

    method: str
    """HTTP method."""
    path: str
    """Request path (no query)."""
    body: Any
    """Decoded JSON body (``None`` when it was not JSON)."""
    at: float
    """``time.monotonic()`` at arrival."""
    status: int = 0
    """The status the fake answered."""
    token: str | None = None
    """The ``x-acs-dingtalk-access-token`` it carried."""


class DingTalkObservation:
    """Calls, watchers and waits (a mixin of :class:`~tests.fakes.dingtalk.FakeDingTalk`)."""

    calls: list[Call]
    _changed: asyncio.Condition
    _watchers: list[Callable[[FakeCard | SentMessage, str, float], None]]

    def watch(self, callback: Callable[[FakeCard | SentMessage, str, float], None]) -> None:
        """Call ``callback(card_or_message, change, at)`` after every accepted change people would see.

        ``change`` is ``create`` (``createAndDeliver``), ``stream`` (``PUT /v1.0/card/streaming``),
        ``update`` (``PUT /v1.0/card/instances``) or ``message`` (a robot or session-webhook
        message); ``at`` is the ``time.monotonic()`` moment it became visible.
        """
        self._watchers.append(callback)

    def _tell_watchers(self, obj: FakeCard | SentMessage, change: str) -> None:
        at = time.monotonic()
        for callback in self._watchers:
            callback(obj, change, at)

    def call_counts(self) -> dict[str, dict[str, int]]:
        """Per ``METHOD path``: calls ``accepted`` (2xx), ``throttled`` (403 QpsLimit / 429) and ``failed`` (other)."""
        counts: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"accepted": 0, "throttled": 0, "failed": 0})
        for call in self.calls:
            key = f"{call.method} {call.path}"
            if call.status in (403, 429):
                counts[key]["throttled"] += 1
            elif 200 <= call.status < 300:
                counts[key]["accepted"] += 1
            else:
                counts[key]["failed"] += 1
        return dict(counts)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds (re-checked after every recorded change)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
