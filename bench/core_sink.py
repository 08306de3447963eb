"""The ``core`` scenario's platform: an in-process card sink with a fixed round trip and no rate limit.

:class:`BenchSink` is a :class:`~botgateway.sink.CardSink` that behaves like a
platform whose every call takes ``latency_s`` (an ``asyncio.sleep`` inside the
call: simulated network time) and never throttles: its rate keys carry a limit
no benchmark reaches, so the core's budget never holds a call back (with
several workers each call still asks the fleet's budget in Redis, as in
production). It renders
nothing; per turn it notes, in :class:`TurnStamps`, the moments the benchmark
measures on the platform side (``time.monotonic()``, comparable with the
orchestrator's stamps: CLOCK_MONOTONIC is system-wide on Linux):

- when the card's creation started and when the card was there;
- when the first call carrying answer text completed (the text was visible);
- when the latest create or live update started and completed (a final waits
  for the call in flight: one call per card at a time);
- when the final call started and completed, and the final answer it carried.

The card's target names its turn in ``extra["bench_turn"]``; a card without
one (the worker's warm-up question) is served but not recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from botgateway.budget import RateLimit
from botgateway.sink import CardHandle, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot

__all__ = ["UNLIMITED", "BenchSink", "TurnStamps"]

UNLIMITED = RateLimit(rate_per_s=1e9, burst=1_000_000_000)
"""A bucket no benchmark drains: in one process every call takes the budget's synchronous fast path; with the
fleet's shared budget (several workers) every call asks Redis, as ``botgateway run --workers`` does, and is granted."""


# Mutable on purpose: filled in by the sink and the memory probe while the turn runs.
@dataclass
class TurnStamps:
    """What one turn did, as the worker saw it (``time.monotonic()`` seconds; 0: never)."""

    turn: int
    """The benchmark's turn number."""
    submitted_at: float = 0.0
    """Just before the worker handed the message to ``Gateway.submit``."""
    status: str = ""
    """What ``submit`` answered (``started``…), then the turn's outcome (``done``…)."""
    history_started_at: float = 0.0
    """The tool loop asked the memory for the conversation's history."""
    history_loaded_at: float = 0.0
    """The history was there."""
    create_started_at: float = 0.0
    """The card's creation call started."""
    created_at: float = 0.0
    """The card existed (the creation call completed)."""
    first_text_at: float = 0.0
    """The first call carrying answer text completed: the text was visible."""
    live_started_at: float = 0.0
    """The latest creation or live update started."""
    live_done_at: float = 0.0
    """The latest creation or live update completed."""
    final_started_at: float = 0.0
    """The final call (finalize, or the fallback message) started."""
    final_at: float = 0.0
    """The final call completed."""
    final_status: str = ""
    """The final snapshot's status (``done``, ``failed``, ``stopped``)."""
    final_text: str = ""
    """The answer the final call carried."""
    calls: int = 0
    """Sink calls of this turn's card."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


class BenchSink:
    """A :class:`~botgateway.sink.CardSink` with a fixed round trip and no rate limit; see the module docstring."""

    platform = "bench"
    max_chars = 60_000
    """Large enough that no benchmark answer continues in a second part."""

    def __init__(self, stamps: Mapping[int, TurnStamps], *, latency_s: float) -> None:
        """``stamps``: the turns this process answers, by turn number; ``latency_s``: every call's round trip."""
        self._stamps = stamps
        self._latency_s = latency_s
        self._ids = itertools.count(1)
        self._unmeasured = TurnStamps(-1)

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One unlimited bucket per kind of call."""
        return f"bench:{op}", UNLIMITED

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """A new card after one round trip."""
        stamps = self._of(target)
        stamps.create_started_at = stamps.create_started_at or time.monotonic()
        stamps.live_started_at = time.monotonic()
        await self._round_trip(stamps, snapshot)
        stamps.created_at = stamps.created_at or time.monotonic()
        stamps.live_done_at = time.monotonic()
        return CardHandle(card_id=f"bench-card-{next(self._ids)}", target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """A live update after one round trip."""
        stamps = self._of(handle.target)
        stamps.live_started_at = time.monotonic()
        await self._round_trip(stamps, snapshot)
        stamps.live_done_at = time.monotonic()
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """The final update after one round trip."""
        await self._final(handle.target, snapshot)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """A message instead of the card (counted as the final call: it carries the answer)."""
        await self._final(target, snapshot)

    async def _final(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        stamps = self._of(target)
        stamps.final_started_at = time.monotonic()
        await self._round_trip(stamps, snapshot)
        stamps.final_at = time.monotonic()
        stamps.final_status = snapshot.status
        stamps.final_text = snapshot.answer

    async def _round_trip(self, stamps: TurnStamps, snapshot: CardSnapshot) -> None:
        stamps.calls += 1
        if self._latency_s > 0:
            await asyncio.sleep(self._latency_s)  # the platform's round trip (simulation, not synchronization)
        if snapshot.answer.strip() and not stamps.first_text_at:
            stamps.first_text_at = time.monotonic()

    def _of(self, target: CardTarget) -> TurnStamps:
        turn = target.extra.get("bench_turn")
        return self._unmeasured if turn is None else self._stamps[int(turn)]
