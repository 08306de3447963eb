"""Probes of the ``core`` worker: how long the tool loop waits for history, and how late the event loop runs.

- :class:`TimedHistory` stands in for the runtime's memory in front of the
  tool loop (the loop's ``memory`` is the only thing swapped). It delegates to
  the real :class:`~botgateway.history.memory.Memory` and notes when each turn asked
  for its history and when it had it. The product is not changed for the
  measurement.
- :class:`LoopLag` is a task that sleeps ``interval_s`` again and again and
  notes how much later than asked it woke: the time other work held the event
  loop. Its samples are the loop lag the report shows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from botgateway.loop import HistoryStore

__all__ = ["LoopLag", "TimedHistory"]


class TimedHistory:
    """A :class:`~botgateway.loop.tool_loop.HistoryStore` that times ``history()`` of the memory it wraps.

    ``on_loaded(conversation_id, started_at, loaded_at)`` is called after every
    successful read (``time.monotonic()`` stamps).
    """

    def __init__(self, memory: HistoryStore, on_loaded: Callable[[str, float, float], None]) -> None:
        self._memory = memory
        self._on_loaded = on_loaded

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        """The wrapped memory's history, timed."""
        started = time.monotonic()
        messages = await self._memory.history(conversation_id)
        self._on_loaded(conversation_id, started, time.monotonic())
        return messages

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        """The wrapped memory's commit, untouched."""
        await self._memory.commit(conversation_id, turn_id, messages)


class LoopLag:
    """Samples how late the event loop wakes a sleeper (see the module docstring); ``start`` and ``stop`` it."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        """How long each sleep asks for."""
        self.samples: list[float] = []
        """Seconds each wake-up came later than asked, in order."""
        self.sampled = asyncio.Event()
        """Set after every sample (clear it to wait for the next one)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling (in the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._sample(), name="bench-loop-lag")

    async def stop(self) -> list[float]:
        """Stop sampling; the samples."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return self.samples

    async def _sample(self) -> None:
        while True:
            due = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.samples.append(max(0.0, time.monotonic() - due))
            self.sampled.set()
