"""Write-behind for usage rows: recorded at once, written to the Store in the background, in groups.

A model call's usage must never hold up an answer, and must not be lost when
the process stops cleanly. :meth:`UsageWriter.submit` queues rows and returns at
once; one writer task (owned by a :class:`~botgateway.background.BackgroundTasks`,
alive only while there is something to write) takes up to ``max_batch`` rows at
a time into one :meth:`~botgateway.stores.base.UsageStore.record_usage` call. A
failed write is retried after the project's :class:`~botgateway.backoff.Backoff`,
the rows kept at the head of the queue. :meth:`UsageWriter.aclose` refuses new
rows and drains the queue for up to ``drain_timeout_s``; rows still unwritten
then, or refused because the queue was full while the store was down, are
logged with their count (usage is bookkeeping: never worth unbounded memory).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from botgateway.backoff import Backoff
from botgateway.stores.base import UsageRow, UsageStore
from botgateway.write_behind import WriteBehind

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
        max_batch: Rows per :meth:`~botgateway.stores.base.UsageStore.record_usage` call, at most.
        max_queued: Rows waiting at most; more are dropped (and counted) while the store is down.
        drain_timeout_s: How long :meth:`aclose` keeps writing what is queued.
    """

    def __init__(
        self, store: UsageStore, *, max_batch: int = 500, max_queued: int = 100_000, drain_timeout_s: float = 5.0
    ) -> None:
        self._max_queued = max(1, max_queued)
        self._rows: WriteBehind[UsageRow, None] = WriteBehind(
            store.record_usage, written=lambda batch, _: None, failed=self._failed, backoff=_BACKOFF,
            max_batch=max_batch, drain_timeout_s=drain_timeout_s, name="usage-writer",
        )
        self.dropped = 0
        """Rows refused because the queue was full (the store was down that long)."""

    def __len__(self) -> int:
        """Rows not yet written."""
        return len(self._rows)

    def submit(self, rows: Sequence[UsageRow]) -> None:
        """Queue ``rows`` to be written; never blocks, never raises (after :meth:`aclose` they are dropped, logged)."""
        if not rows:
            return
        if self._rows.closed:
            log.warning("usage.unsaved", rows=len(rows), note="recorded after shutdown began")
            return
        room = self._max_queued - len(self._rows)
        if room < len(rows):
            self.dropped += len(rows) - max(room, 0)
            log.warning("usage.dropped", rows=len(rows) - max(room, 0), queued=len(self._rows),
                        note="the store has not taken usage rows for a while; these were not kept")
            rows = rows[: max(room, 0)]
        self._rows.push(rows)

    async def flush(self) -> None:
        """Wait until every row submitted so far is written (or the writer shut down without writing them)."""
        ticket = self._rows.submitted
        while self._rows.written < ticket:
            if self._rows.closed and self._rows.idle:
                return
            await self._rows.progress()

    async def aclose(self) -> None:
        """Refuse new rows, write what is queued (for up to ``drain_timeout_s``), then stop the writer."""
        if self._rows.closed:
            return
        await self._rows.aclose()
        if self._rows.queue:
            log.error("usage.unsaved", rows=len(self._rows.queue), note="the store did not take them before shutdown")

    def _failed(self, exc: Exception, batch: list[UsageRow], attempt: int) -> None:
        if (attempt - 1) % _WARN_EVERY == 0:
            log.warning("usage.write_failed", attempts=attempt, rows=len(self._rows), error=type(exc).__name__)
