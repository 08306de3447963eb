"""One client's tap on one turn's events: a bounded queue that never blocks the turn.

The gateway hands each event to :meth:`EventTap.__call__` from the turn's own
task, which must never wait for a client. Events queue up to ``max_pending``;
a client that falls that far behind cannot keep up: the tap overflows, and the
stream's owner disconnects it and stops its turn, exactly as when the client
closes the connection (a turn nobody reads is not worth its tokens, and its
history stays consistent either way).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from botgateway.events import TurnEvent
from botgateway.messages import TurnOutcome

__all__ = ["EventTap"]


class EventTap:
    """A bounded, ordered queue of one turn's events for one reader (an :data:`~botgateway.events.EventListener`)."""

    def __init__(self, max_pending: int) -> None:
        self._queue: asyncio.Queue[TurnEvent] = asyncio.Queue(max_pending)
        self.overflowed = asyncio.Event()
        """Set when an event found the queue full: the reader is too slow and is to be disconnected."""

    def __call__(self, event: TurnEvent) -> None:
        """Queue ``event`` (called by the turn; never blocks). Once overflowed, later events are dropped."""
        if self.overflowed.is_set():
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed.set()

    async def events(self, done: asyncio.Future[TurnOutcome]) -> AsyncIterator[TurnEvent]:
        """The events in order, until the turn's card is final (``done``) and all were read, or the tap overflows."""
        overflow = asyncio.ensure_future(self.overflowed.wait())
        try:
            while True:
                if self.overflowed.is_set():
                    return
                if not self._queue.empty():
                    yield self._queue.get_nowait()
                    continue
                if done.done():
                    return
                getter = asyncio.ensure_future(self._queue.get())
                waiting: list[asyncio.Future[Any]] = [getter, done, overflow]  # futures of three result types
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not getter.done():
                        getter.cancel()
                if getter.done() and not getter.cancelled():
                    yield getter.result()
        finally:
            overflow.cancel()
