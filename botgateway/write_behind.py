"""The writer of a write-behind queue: items kept in order, written from the head in groups by one background task.

What :class:`~botgateway.history.commit_queue.CommitQueue` (history changes) and
:class:`~botgateway.usage.writer.UsageWriter` (usage rows) share; each adds
what its items need (fencing and readers, dropping when full):

- **Order.** One FIFO; the writer always takes up to ``max_batch`` items from
  its head into one ``write`` call, so what is written is always a prefix of
  what was pushed.
- **Retries.** A failed write is tried again after the ``backoff``, the items
  kept at the head; ``failed`` is told of each failed attempt (to log it).
- **One task.** The writer task (owned by a
  :class:`~botgateway.background.BackgroundTasks`) runs only while there is
  something to write, so a queue never closed leaves no task behind once drained.
- **Shutdown.** :meth:`WriteBehind.aclose` cuts the writer's pause short once
  (it wants a last try), lets it write for up to ``drain_timeout_s``, then
  stops it; the owner reports what is left in :attr:`WriteBehind.queue`.
- **Waiters.** :meth:`WriteBehind.progress` returns at the next change (a
  write, a failure the owner reports, the end); waiters then check their own
  condition on :attr:`WriteBehind.written`, :attr:`WriteBehind.closed` and
  :attr:`WriteBehind.idle`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff

__all__ = ["WriteBehind"]

T = TypeVar("T")
R = TypeVar("R")


class WriteBehind(Generic[T, R]):
    """Items in push order, written in groups from the head by one background task.

    Args:
        write: Writes one group (raises to have it retried).
        written: Told of each group once written, with what ``write`` returned (after it left the queue).
        failed: Told of each failed attempt: the error, the group, and the failed attempts in a row so far (from 1).
        backoff: Delay before each retry.
        max_batch: Most items in one ``write``.
        drain_timeout_s: How long :meth:`aclose` lets the writer go on.
        name: The writer task's name.
    """

    def __init__(
        self,
        write: Callable[[list[T]], Awaitable[R]],
        *,
        written: Callable[[list[T], R], None],
        failed: Callable[[Exception, list[T], int], None],
        backoff: Backoff,
        max_batch: int,
        drain_timeout_s: float,
        name: str,
    ) -> None:
        self._write = write
        self._written = written
        self._failed = failed
        self._backoff = backoff
        self._max_batch = max(1, max_batch)
        self._drain_timeout_s = drain_timeout_s
        self._name = name
        self.queue: deque[T] = deque()
        """The items not yet written, oldest first (those being written included)."""
        self.submitted = 0
        """Items pushed so far."""
        self.written = 0
        """Items written so far (a prefix of those pushed)."""
        self.closed = False
        """:meth:`aclose` was called: the owner takes no more items."""
        self._progress = asyncio.Event()  # replaced after each set: waiters re-check their condition
        self._closing = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._background = BackgroundTasks()

    def __len__(self) -> int:
        """Items not yet written."""
        return len(self.queue)

    @property
    def idle(self) -> bool:
        """No writer task is running (nothing was left to write, or it was stopped)."""
        return self._writer is None or self._writer.done()

    def push(self, items: Iterable[T]) -> int:
        """Queue ``items`` and start the writer if it is not running; returns :attr:`submitted`."""
        before = len(self.queue)
        self.queue.extend(items)
        self.submitted += len(self.queue) - before
        if len(self.queue) > before and self.idle:
            self._writer = self._background.spawn(self._run(), name=self._name)
        return self.submitted

    def notify(self) -> None:
        """Wake whoever waits in :meth:`progress` (each waits on the event current when it checked)."""
        self._progress.set()
        self._progress = asyncio.Event()

    async def progress(self) -> None:
        """Wait for the next change: a group written, a failure reported through :meth:`notify`, the end."""
        await self._progress.wait()

    async def aclose(self) -> None:
        """Mark closed, let the writer write what is queued for up to ``drain_timeout_s``, then stop it."""
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        writer = self._writer
        if writer is not None and not writer.done():
            try:
                await asyncio.wait_for(asyncio.shield(writer), self._drain_timeout_s)
            except TimeoutError:
                pass
        await self._background.aclose()
        self.notify()

    async def _run(self) -> None:
        """Write from the head of the queue until it is empty."""
        attempt = 0
        try:
            while self.queue:
                batch = list(itertools.islice(self.queue, self._max_batch))
                try:
                    result = await self._write(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any failure: keep the items, retry later
                    attempt += 1
                    self._failed(exc, batch, attempt)
                    await self._pause(self._backoff.delay(attempt - 1))
                    continue
                attempt = 0
                for _ in batch:
                    self.queue.popleft()
                self._written(batch, result)
                self.written += len(batch)
                self.notify()
        finally:
            self.notify()

    async def _pause(self, delay_s: float) -> None:
        """Wait ``delay_s`` before the next attempt; a shutdown cuts the first wait short (it wants a last try)."""
        if self._closing.is_set():
            await asyncio.sleep(delay_s)
            return
        try:
            await asyncio.wait_for(self._closing.wait(), delay_s)
        except TimeoutError:
            pass
