"""Write-behind for conversation history: changes are queued in order and written by one background writer.

A turn's final card must not wait for the store. :class:`~botgateway.history.memory.Memory`
changes its in-memory copy of the history at once and hands the change to
:meth:`CommitQueue.submit`, which returns at once; the writer persists it behind the turn.

- **Order.** One FIFO for every conversation, and the writer always takes from
  its head: a conversation's changes reach the store in the order they were
  made, and what is written is always a prefix of what was submitted.
- **Groups.** Each :meth:`~botgateway.stores.base.ConversationStore.write_history` call
  takes up to ``max_batch`` changes from the head (one SQLite transaction, one
  Redis pipeline), so under load many turns share one write.
- **Retries.** A failed write is tried again after the project's
  :class:`~botgateway.backoff.Backoff`. Every ``attempts_per_incident`` failed
  attempts are logged as an incident (with an error id) and the changes stay
  at the head for the next attempt: nothing is dropped, nothing behind them
  overtakes them.
- **Shutdown.** :meth:`aclose` refuses new changes and drains: the writer keeps
  trying until ``drain_timeout_s``; whatever is still not written then is
  reported as an incident naming its conversations.
- **Fencing.** A change made under a conversation's lease carries its
  fencing token; a store shared by processes refuses it once another process
  has taken the lease since (this one was paused past the lease's expiry). A
  refused change is logged once, with its conversation and no content, and
  dropped: retrying could never succeed. The reader side is told, so a copy
  held in memory that already shows it is read again.
- **Hand-over.** :meth:`settle` waits until a conversation's changes so far
  are written (or refused), so its lease is given up only once the next
  holder, in whatever process, reads them from the store.
- **Readers.** Whoever loads a conversation from the store while its changes
  are in flight must apply the ones the snapshot may miss: :meth:`watch` /
  :meth:`unwatch` return those written while it read, :meth:`pending` the rest.
  Applying a change the snapshot already holds is harmless (see
  :class:`~botgateway.stores.base.HistoryWrite`).

The queue, the writer task and its retries are a
:class:`~botgateway.write_behind.WriteBehind` (shared with the usage rows'
writer); this module adds the history's bookkeeping: per-conversation lines,
fencing, readers, incidents.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import structlog

from botgateway.backoff import Backoff
from botgateway.incidents import report_incident
from botgateway.stores.base import ConversationStore, HistoryWrite, StoreError, VersionStep
from botgateway.write_behind import WriteBehind

__all__ = ["WRITE_BACKOFF", "CommitQueue", "WrittenCallback"]

log = structlog.get_logger(__name__)

WRITE_BACKOFF = Backoff(base_s=0.05, max_s=5.0)
"""Pacing of the writer's retries: quick at first (a busy file), then at most every 5 s (a store that is down)."""

WrittenCallback = Callable[[HistoryWrite, VersionStep | None], None]
"""Told of each change once it is in the store, with how it moved the conversation's version."""


class CommitQueue:
    """History changes in submission order, persisted in groups by one background writer.

    Args:
        store: The durable copy.
        on_written: Called for each change once it is written (in order).
        backoff: Delay between failed attempts.
        max_batch: Most changes in one store call.
        attempts_per_incident: Failed attempts between two incidents in the log.
        drain_timeout_s: How long :meth:`aclose` keeps trying to write what is left.
    """

    def __init__(
        self,
        store: ConversationStore,
        *,
        on_written: WrittenCallback | None = None,
        backoff: Backoff = WRITE_BACKOFF,
        max_batch: int = 256,
        attempts_per_incident: int = 5,
        drain_timeout_s: float = 10.0,
    ) -> None:
        if max_batch < 1 or attempts_per_incident < 1:
            raise ValueError("max_batch and attempts_per_incident must be positive")
        self._on_written = on_written
        self._attempts_per_incident = attempts_per_incident
        self._changes: WriteBehind[HistoryWrite, list[VersionStep | None]] = WriteBehind(
            store.write_history, written=self._written_batch, failed=self._failed, backoff=backoff,
            max_batch=max_batch, drain_timeout_s=drain_timeout_s, name="history-writer",
        )
        self._lines: dict[str, deque[HistoryWrite]] = {}  # per conversation, for pending()
        self._newest: dict[str, int] = {}  # per conversation with changes in the queue: its newest change's ticket
        self._watched: dict[str, list[HistoryWrite]] = {}
        self._failed_rounds = 0
        self._last_error_id = ""

    def __len__(self) -> int:
        """Changes not yet written."""
        return len(self._changes)

    def submit(self, write: HistoryWrite) -> int:
        """Queue ``write`` and return its ticket for :meth:`wait_written`; raises :class:`StoreError` once closed."""
        if self._changes.closed:
            raise StoreError("the history writer is shut down; this change to the history was not saved")
        self._lines.setdefault(write.conversation_id, deque()).append(write)
        ticket = self._changes.push([write])
        self._newest[write.conversation_id] = ticket
        return ticket

    def pending(self, conversation_id: str) -> list[HistoryWrite]:
        """The conversation's changes not yet written (those being written included), oldest first."""
        return list(self._lines.get(conversation_id, ()))

    def watch(self, conversation_id: str) -> None:
        """Start noting the conversation's changes as they are written (a reader is about to read it)."""
        self._watched.setdefault(conversation_id, [])

    def unwatch(self, conversation_id: str) -> list[HistoryWrite]:
        """Stop noting; the conversation's changes written since :meth:`watch`, oldest first."""
        return self._watched.pop(conversation_id, [])

    async def flush(self) -> None:
        """Wait until every change submitted so far is written.

        Raises :class:`StoreError` (with the incident's error id) when a round of
        attempts fails meanwhile, or when the queue was closed with changes
        unwritten; the changes stay queued and are retried.
        """
        await self.wait_written(self._changes.submitted)

    async def wait_written(self, ticket: int) -> None:
        """Wait until the change with ``ticket`` (and all before it) is written; raises as :meth:`flush` does."""
        rounds = self._failed_rounds
        while self._changes.written < ticket:
            if self._failed_rounds != rounds:
                raise StoreError(
                    f"the store refused the history (error id {self._last_error_id}); it is kept and retried"
                )
            if self._changes.closed and self._changes.idle:
                raise StoreError("the history writer shut down before this change was written")
            await self._changes.progress()

    async def settle(self, conversation_id: str, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until the conversation's changes submitted so far are written or refused.

        True when they are; False on the timeout (the store is down, say) or
        when the queue shut down first. Never raises: the caller hands the
        conversation over either way, and a change written later under a lost
        lease is refused by its fencing token.
        """
        ticket = self._newest.get(conversation_id, 0)
        try:
            async with asyncio.timeout(timeout_s):
                while self._changes.written < ticket:
                    if self._changes.closed and self._changes.idle:
                        return False
                    await self._changes.progress()
        except TimeoutError:
            return False
        return True

    async def aclose(self) -> None:
        """Refuse new changes, write what is queued (for up to ``drain_timeout_s``), then stop the writer."""
        if self._changes.closed:
            return
        await self._changes.aclose()
        left = self._changes.queue
        if left:
            conversations = sorted({write.conversation_id for write in left})
            report_incident(
                log,
                "history.unsaved",
                StoreError(f"{len(left)} history changes were not confirmed written before shutdown"),
                reason="Conversation history may not have been saved before shutdown",
                changes=len(left),
                conversations=conversations[:20],
            )

    def _written_batch(self, batch: list[HistoryWrite], steps: list[VersionStep | None]) -> None:
        """``batch`` left the head of the queue: tell the reader side."""
        for write, step in zip(batch, steps, strict=True):
            line = self._lines[write.conversation_id]
            line.popleft()
            if not line:
                del self._lines[write.conversation_id]
                del self._newest[write.conversation_id]
            if step is not None and step.refused:
                # No content: the conversation is enough to find the lease hand-over in the log.
                log.warning("history.write_fenced", conversation=write.conversation_id, change=write.kind,
                            fence=write.fence, note="another process took this conversation's lease; change dropped")
            watched = self._watched.get(write.conversation_id)
            if watched is not None and not (step is not None and step.refused):  # a refused change is in no snapshot
                watched.append(write)
            if self._on_written is not None:
                try:
                    self._on_written(write, step)
                except Exception:  # a reader's bookkeeping must never stop the writer
                    log.exception("history.on_written_failed", conversation=write.conversation_id)

    def _failed(self, exc: Exception, batch: list[HistoryWrite], attempt: int) -> None:
        """A failed attempt: every ``attempts_per_incident`` of them in a row are an incident."""
        if attempt % self._attempts_per_incident:
            return
        self._failed_rounds += 1
        incident = report_incident(
            log,
            "history.write_failed",
            exc,
            reason="Conversation history could not be saved; it is kept and retried",
            attempts=attempt,
            changes=len(self._changes),
            conversations=sorted({write.conversation_id for write in batch})[:20],
        )
        self._last_error_id = incident.id
        self._changes.notify()
