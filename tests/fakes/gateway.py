"""A recording CardSink for gateway tests: keeps every call and lets tests await a condition."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from botgateway.budget import RateLimit
from botgateway.sink import CardGone, CardHandle, CardOp, CardTarget, RateLimited, TransientError
from botgateway.snapshot import CardSnapshot


@dataclass(frozen=True)
class Call:
    """One sink call."""

    op: str
    card_id: str
    target: CardTarget
    snapshot: CardSnapshot


class RecordingSink:
    """A CardSink that records calls and lets tests await them; card ids in ``gone`` raise CardGone."""

    def __init__(self, platform: str = "test", *, max_chars: int = 10_000, latency_s: float = 0.0) -> None:
        self.platform = platform
        self.max_chars = max_chars
        self.latency_s = latency_s
        self.calls: list[Call] = []
        self.cards: dict[str, CardSnapshot] = {}
        self.targets: dict[str, CardTarget] = {}
        self.gone: set[str] = set()
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        return f"{self.platform}:{op}", RateLimit(rate_per_s=1000, burst=100)

    async def _record(self, op: str, card_id: str, target: CardTarget, snapshot: CardSnapshot) -> None:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)  # simulated platform latency
        self.calls.append(Call(op, card_id, target, snapshot))
        if op != "fallback":
            self.cards[card_id] = snapshot
            self.targets[card_id] = target
        async with self._changed:
            self._changed.notify_all()

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        card_id = f"card-{next(self._ids)}"
        await self._record("create", card_id, target, snapshot)
        return CardHandle(card_id, target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        if handle.card_id in self.gone:
            raise CardGone("deleted")
        await self._record("update", handle.card_id, handle.target, snapshot)
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        if handle.card_id in self.gone:
            raise CardGone("deleted")
        await self._record("finalize", handle.card_id, handle.target, snapshot)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        await self._record("fallback", "", target, snapshot)

    # helpers for tests

    def card_for(self, turn_id: str) -> CardSnapshot | None:
        """The latest snapshot of the (first) card of ``turn_id``."""
        for card_id, target in self.targets.items():
            if target.turn_id == turn_id:
                return self.cards[card_id]
        return None

    def ops(self, turn_id: str) -> list[str]:
        return [c.op for c in self.calls if c.target.turn_id == turn_id]

    def fallbacks(self) -> list[CardSnapshot]:
        return [c.snapshot for c in self.calls if c.op == "fallback"]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds after some call (raises TimeoutError)."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(predicate)


class FlakySink(RecordingSink):
    """Fails every finalize with a transient error (for recovery tests)."""

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        raise TransientError("boom")


class GatedFinalizeSink(RecordingSink):
    """Holds every finalize until ``release`` is set; ``finalizing`` is set once one is waiting."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.finalizing = asyncio.Event()
        self.release = asyncio.Event()

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        self.finalizing.set()
        await self.release.wait()
        return await super().finalize(handle, snapshot)


class ThrottledFinalizeSink(RecordingSink):
    """Answers the first ``throttles`` finalize calls with a throttle (Retry-After ``retry_after``)."""

    def __init__(self, throttles: int, retry_after: float = 0.05) -> None:
        super().__init__()
        self.throttles = throttles
        self.retry_after = retry_after
        self.throttled = 0

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        if self.throttled < self.throttles:
            self.throttled += 1
            raise RateLimited(self.retry_after)
        return await super().finalize(handle, snapshot)
