"""A bound on each wait of a stream, kept by one timer per stream instead of one per chunk.

``async with asyncio.timeout(idle_s): chunk = await anext(chunks)`` around
every chunk schedules a timer and cancels it again, per chunk: on a loop that
streams thousands of chunks a second for hundreds of turns, that is a good
part of a chunk's CPU (the heap of timers is pushed and cleaned for every
one). :class:`IdleWatch` bounds the same waits with one timer that is armed
at the first wait and re-armed only when it fires early: a wait that lasts
``idle_s`` raises :class:`TimeoutError` in the waiting task, exactly as the
timeout did, and time spent outside the waits (the consumer's) never counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

__all__ = ["IdleWatch"]

T = TypeVar("T")


class IdleWatch:
    """Raises :class:`TimeoutError` in a wait of :meth:`next` that lasts ``idle_s`` (one per task at a time)."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        """The longest one wait may last."""
        self._handle: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Task[object] | None = None  # the task inside a wait, if any
        self._since = 0.0  # loop time the current wait began
        self._cancelling = 0  # the waiter's cancellation requests before ours
        self._fired = False

    async def next(self, items: AsyncIterator[T]) -> T:
        """``await anext(items)``, bounded by ``idle_s``."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None and self._waiter is None, "one wait at a time, inside a task"
        self._since = loop.time()
        self._waiter, self._cancelling, self._fired = task, task.cancelling(), False
        if self._handle is None:
            self._handle = loop.call_at(self._since + self.idle_s, self._check)
        try:
            return await anext(items)
        except asyncio.CancelledError:
            if self._fired and task.uncancel() <= self._cancelling:
                raise TimeoutError from None  # ours, not a stop of the task
            raise
        finally:
            self._waiter = None

    def close(self) -> None:
        """Disarm the timer (the stream ended)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        if self._waiter is None:
            return  # between waits: the next wait arms the timer again
        loop = asyncio.get_running_loop()
        due = self._since + self.idle_s
        if loop.time() < due:
            self._handle = loop.call_at(due, self._check)
            return
        # The task is suspended inside this wait: the cancellation lands there, as asyncio.timeout's would.
        self._fired = True
        self._waiter.cancel()
