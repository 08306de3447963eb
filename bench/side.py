"""The platform side of a scenario: a fake platform, the mentions it pushes, and what it shows.

:class:`PlatformSide` is what the orchestrator needs from either fake:
start it, hand the worker its URLs and credentials, push mention *i* (noting
the moment), follow every answer through :class:`~bench.observe.TurnWatch`,
count calls per method, and at the end count messages that still look live.
The Slack and DingTalk sides are in :mod:`bench.slack_side` and
:mod:`bench.dingtalk_side`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from bench.observe import TurnWatch


class PlatformSide:
    """Base of the two platform sides (see the module docstring)."""

    platform = ""
    methods: tuple[str, ...] = ()
    """The methods the report always lists, in order."""

    def __init__(self, answers: list[str]) -> None:
        self.watches = [TurnWatch(turn=i, answer=a) for i, a in enumerate(answers)]
        """One per mention, in order."""
        self.all_done = asyncio.Event()
        """Set once every answer is complete."""
        self._open = len(answers)

    def _after_update(self, watch: TurnWatch, was_done: bool) -> None:
        if watch.done and not was_done:
            self._open -= 1
            if self._open <= 0:
                self.all_done.set()

    async def start(self) -> dict[str, Any]:
        """Start the fake; the job fields the worker needs to reach it."""
        raise NotImplementedError

    async def wait_connected(self, timeout: float) -> None:
        """Until the worker's adapter holds the platform's socket."""
        raise NotImplementedError

    async def push(self, turn: int) -> None:
        """Deliver mention ``turn`` and note the moment in its watch."""
        raise NotImplementedError

    def live_left(self) -> dict[str, Any]:
        """Messages (or cards) that still look live: ``count`` and a few ``examples``."""
        raise NotImplementedError

    def counts(self) -> dict[str, dict[str, int]]:
        """Per method: accepted / throttled / failed calls."""
        raise NotImplementedError

    def timeline(self, since: float) -> dict[str, dict[str, list[int]]]:
        """Per method, accepted and throttled calls in each second after ``since``."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop the fake."""
        raise NotImplementedError


def per_second(calls: Iterable[tuple[str, float, bool]], since: float) -> dict[str, dict[str, list[int]]]:
    """``(method, at, throttled)`` triples → per method, calls per second (accepted and throttled lists)."""
    buckets: dict[str, dict[str, dict[int, int]]] = defaultdict(lambda: {"accepted": defaultdict(int), "throttled": defaultdict(int)})
    last = -1
    for method, at, throttled in calls:
        second = max(0, int(at - since))
        buckets[method]["throttled" if throttled else "accepted"][second] += 1
        last = max(last, second)
    return {
        method: {kind: [counts[kind].get(s, 0) for s in range(last + 1)] for kind in ("accepted", "throttled")}
        for method, counts in buckets.items()
    }
