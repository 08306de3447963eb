"""Write-behind for usage rows: recorded at once, written to the Store in the background, in groups.

A model call's usage must never hold up an answer, and must not be lost when
the process stops cleanly. :meth:`UsageWriter.submit` queues rows and returns at
once; one writer task (owned by a :class:`~botgateway.background.BackgroundTasks`,
alive only while there is something to write) takes up to ``max_batch`` rows at
a time into one :meth:`~botgateway.stores.base.Store.record_usage` call. A
failed write is retried after the project's :class:`~botgateway.backoff.Backoff`,
the rows kept at the head of the queue. :meth:`UsageWriter.aclose` refuses new
rows and drains the queue for up to ``drain_timeout_s``; rows still unwritten
then, or refused because the queue was full while the store was down, are
logged with their count (usage is bookkeeping: never worth unbounded memory).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence

import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.stores.base import Store, UsageRow

__all__ = ["UsageWriter"]

log = structlog.get_logger(__name__)

_BACKOFF = Backoff(base_s=0.05, max_s=5.0)
"""Pacing of retries: quick at first (a busy file), then at most every 5 s (a store that is down)."""
_WARN_EVERY = 10
"""A store that keeps failing is logged on the first failed attempt and every this many after."""


class UsageWriter:
    """Queues usage rows and writes them behind, in order, in groups.

    Args:
        store: Where the rows go.
        max_batch: Rows per :meth:`~botgateway.stores.base.Store.record_usage` call, at most.
        max_queued: Rows waiting at most; more are dropped (and counted) while the store is down.
        drain_timeout_s: How long :meth:`aclose` keeps writing what is queued.
    """

    def __init__(
        self, store: Store, *, max_batch: int = 500, max_queued: int = 100_000, drain_timeout_s: float = 5.0
    ) -> None:
        self._store = store
        self._max_batch = max(1, max_batch)
        self._max_queued = max(1, max_queued)
        self._drain_timeout_s = drain_timeout_s
        self._queue: deque[UsageRow] = deque()
        self._submitted = 0
        self._written = 0
        self.dropped = 0
        """Rows refused because the queue was full (the store was down that long)."""
        self._progress = asyncio.Event()  # replaced after each set: waiters re-check their condition
        self._closing = asyncio.Event()
        self._closed = False
        self._writer: asyncio.Task[None] | None = None
        self._background = BackgroundTasks()

    def __len__(self) -> int:
        """Rows not yet written."""
        return len(self._queue)

    def submit(self, rows: Sequence[UsageRow]) -> None:
        """Queue ``rows`` to be written; never blocks, never raises (after :meth:`aclose` they are dropped, logged)."""
        if not rows:
            return
        if self._closed:
            log.warning("usage.unsaved", rows=len(rows), note="recorded after shutdown began")
            return
        room = self._max_queued - len(self._queue)
        if room < len(rows):
            self.dropped += len(rows) - max(room, 0)
            log.warning("usage.dropped", rows=len(rows) - max(room, 0), queued=len(self._queue),
                        note="the store has not taken usage rows for a while; these were not kept")
            rows = rows[: max(room, 0)]
        self._queue.extend(rows)
        self._submitted += len(rows)
        if rows and (self._writer is None or self._writer.done()):
            self._writer = self._background.spawn(self._run(), name="usage-writer")

    async def flush(self) -> None:
        """Wait until every row submitted so far is written (or the writer shut down without writing them)."""
        ticket = self._submitted
        while self._written < ticket:
            if self._closed and (self._writer is None or self._writer.done()):
                return
            await self._progress.wait()

    async def aclose(self) -> None:
        """Refuse new rows, write what is queued (for up to ``drain_timeout_s``), then stop the writer."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        writer = self._writer
        if writer is not None and not writer.done():
            try:
                await asyncio.wait_for(asyncio.shield(writer), self._drain_timeout_s)
            except TimeoutError:
                pass
        await self._background.aclose()
        if self._queue:
            log.error("usage.unsaved", rows=len(self._queue), note="the store did not take them before shutdown")
        self._notify()

    async def _run(self) -> None:
        """Write from the head of the queue until it is empty."""
        attempt = 0
        try:
            while self._queue:
                batch = list(itertools.islice(self._queue, self._max_batch))
                try:
                    await self._store.record_usage(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any failure: keep the rows, retry later
                    if attempt % _WARN_EVERY == 0:
                        log.warning("usage.write_failed", attempts=attempt + 1, rows=len(self._queue),
                                    error=type(exc).__name__)
                    attempt += 1
                    await self._pause(_BACKOFF.delay(attempt - 1))
                    continue
                attempt = 0
                for _ in batch:
                    self._queue.popleft()
                self._written += len(batch)
                self._notify()
        finally:
            self._notify()

    async def _pause(self, delay_s: float) -> None:
        """Wait ``delay_s`` before the next attempt; a shutdown cuts the first wait short (it wants a last try)."""
        if self._closing.is_set():
            await asyncio.sleep(delay_s)
            return
        try:
            await asyncio.wait_for(self._closing.wait(), delay_s)
        except TimeoutError:
            pass

    def _notify(self) -> None:
        """Wake whoever waits for progress (each waits on the event current when it checked)."""
        self._progress.set()
        self._progress = asyncio.Event()
