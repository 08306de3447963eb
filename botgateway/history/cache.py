"""Conversation histories held in memory: a bounded LRU over the Store, loaded in batches, one load per conversation.

The Store is the durable copy; this is the copy a turn reads. A turn's own
changes (its commit, a summary, a clear) change the cached copy at once
(:meth:`HistoryCache.apply`) and reach the store behind the turn
(:mod:`botgateway.history.commit_queue`). A miss reads the store once per
conversation however many turns ask (single flight), and the misses of one
moment share one read (one query, one pipeline), so a burst of new
conversations costs one round trip, not one each. A snapshot gets the changes
still in flight applied on top, so a copy loaded while the writer is behind is
never older than what this process already told its users.

**Staleness.** Only SQLite copies are trusted without asking: SQLite is the
store of one process (the embedded default), so nothing else changes the
history behind the cache. With Redis several replicas share the history and
any of them may commit to a conversation, so every read of a cached copy is
revalidated: the store keeps a per-conversation version that every write of
any replica changes, and the read sends the cached version along (batched with
the other turns' reads into one pipeline). Redis answers "unchanged" without
sending or decoding anything, or the whole current history. The writer learns
how each of its own writes moved the version (:class:`~botgateway.stores.base.VersionStep`):
a step from exactly the cached version keeps the copy current; any other step
means another replica wrote in between, and the copy is read again next time.
So a Redis hit costs one small round trip, never a stale answer. (Caching only
for SQLite and reading Redis through every time was the alternative; the
version check costs the same round trip and skips the transfer and decoding.)

**New conversations.** Most questions open a conversation (a new thread), and
reading a history only to find none costs a turn the same round trip. A store
that only this process writes (SQLite) lists the conversations that have
history (:meth:`~botgateway.stores.base.ConversationStore.history_index`), read once in the
background; from then on, a conversation neither listed nor written by this
process since is known to be empty without asking. Every conversation this
process writes joins the list, so it never vouches for a conversation that has
history; one whose history the store dropped later (idle, cleared) is simply
read, as before. Redis stores give no list: there, every miss reads.

Expiry: a SQLite copy also carries when the store forgets an idle
conversation (``memory.history_ttl_days``), and is dropped at that moment, so
an old history never comes back from memory either.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from cachetools import LRUCache

from botgateway.background import BackgroundTasks
from botgateway.history.commit_queue import CommitQueue
from botgateway.stores.base import (
    ConversationStore,
    HistorySnapshot,
    HistoryWrite,
    StoredTurn,
    StoreError,
    VersionStep,
    apply_write,
)

__all__ = ["DEFAULT_CACHED_CONVERSATIONS", "INDEX_LIMIT", "HistoryCache"]

DEFAULT_CACHED_CONVERSATIONS = 2000
"""Conversations kept in memory by default (``memory.history_cache_size``)."""

log = structlog.get_logger(__name__)

INDEX_LIMIT = 500_000
"""Most conversations the list of those with history holds (about 50 MB); past it, every first question reads."""

_STALE = -1
"""A version no store hands out: the copy must be read again."""


@dataclass
class _Entry:
    """One conversation's cached copy (changed in place by this process's own writes)."""

    turns: list[StoredTurn]
    version: int | None
    """The store's version this copy matches; ``None``: a store only this process writes (no check needed)."""
    expires_at: float | None
    """When the store forgets the conversation unless written again (``None``: never)."""


class HistoryCache:
    """The turns of recently used conversations, read from ``store`` in batches on a miss.

    Args:
        store: The durable copy.
        queue: The write-behind queue whose changes in flight are applied to what is read.
        max_conversations: LRU bound; 0 keeps nothing (every read goes to the store, still batched).
        clock: Unix time, for the store's idle expiry.
        max_batch: Most conversations in one read.
    """

    def __init__(
        self,
        store: ConversationStore,
        queue: CommitQueue,
        *,
        max_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
        clock: Callable[[], float] = time.time,
        max_batch: int = 500,
    ) -> None:
        if max_conversations < 0 or max_batch < 1:
            raise ValueError("max_conversations must not be negative, max_batch must be positive")
        self._store = store
        self._queue = queue
        self._clock = clock
        self._max_batch = max_batch
        self._entries: LRUCache[str, _Entry] | None = LRUCache(max_conversations) if max_conversations else None
        self._loading: dict[str, asyncio.Future[list[StoredTurn]]] = {}
        self._wanted: deque[str] = deque()
        self._loader: asyncio.Task[None] | None = None
        self._background = BackgroundTasks()
        self._index: set[str] | None = None  # conversations with history, once the store listed them
        self._index_asked = False
        self._written: set[str] | None = set()  # conversations this process wrote while the list was being read

    async def turns(self, conversation_id: str) -> list[StoredTurn]:
        """The conversation's turns as this process knows them (a new list; the turns themselves are frozen)."""
        entry = self._entry(conversation_id)
        if entry is not None and entry.version is None:
            return list(entry.turns)  # the hit: SQLite copies need no check
        if self._known_empty(conversation_id):
            if self._entries is not None:
                self._entries[conversation_id] = _Entry([], None, None)
            return []
        future = self._loading.get(conversation_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieve)
            self._loading[conversation_id] = future
            self._wanted.append(conversation_id)
            self._start_loader()
        # Shielded: one caller giving up must not cancel the read the others wait for.
        return list(await asyncio.shield(future))

    def apply(self, write: HistoryWrite) -> None:
        """This process changed the history: change the cached copy at once (a load in flight replays it itself)."""
        if write.kind != "clear":
            self._listed(write.conversation_id)
        entry = self._entry(write.conversation_id)
        if entry is None:
            return
        entry.turns = apply_write(entry.turns, write)
        entry.expires_at = None if write.kind == "clear" else self._renewed()

    def written(self, write: HistoryWrite, step: VersionStep | None) -> None:
        """The writer stored ``write``: keep the copy's version in step, or mark it stale if another replica wrote.

        A refused write (its fencing token was stale) is in the copy but not in the store: the copy is stale too.
        """
        entry = self._entry(write.conversation_id)
        if entry is None or entry.version is None or step is None:
            return
        entry.version = step.after if step.before == entry.version and not step.refused else _STALE

    async def aclose(self) -> None:
        """Stop the loader; reads still waiting fail with :class:`StoreError`."""
        await self._background.aclose()
        self._fail(list(self._loading), StoreError("the history cache is shut down; nothing was read"))

    def _known_empty(self, conversation_id: str) -> bool:
        """True when the conversation certainly has no history; the first call asks the store for its list."""
        if self._index is None:
            if not self._index_asked:
                self._index_asked = True
                self._background.spawn(self._read_index(), name="history-index")
            return False
        return (
            conversation_id not in self._index
            and conversation_id not in self._loading
            and not self._queue.pending(conversation_id)
        )

    async def _read_index(self) -> None:
        """Take the store's list of conversations with history (none: every miss keeps reading)."""
        try:
            listed = await self._store.history_index(INDEX_LIMIT)
        except Exception as exc:  # the list only saves reads; without it, every miss reads as before
            log.warning("history.index_unavailable", error=f"{type(exc).__name__}: {exc}")
            listed = None
        if listed is not None and self._written is not None:
            self._index = set(listed) | self._written
        self._written = None

    def _listed(self, conversation_id: str) -> None:
        """The conversation has history now: on the list (or noted for it while the list is being read)."""
        if self._index is not None:
            self._index.add(conversation_id)
            if len(self._index) > INDEX_LIMIT:
                self._index = None  # too long to hold: every miss reads again
                log.info("history.index_dropped", limit=INDEX_LIMIT)
        elif self._written is not None:
            self._written.add(conversation_id)

    def _entry(self, conversation_id: str) -> _Entry | None:
        """The cached copy, unless there is none or the store has forgotten the conversation by now."""
        if self._entries is None:
            return None
        entry = self._entries.get(conversation_id)
        if entry is not None and entry.expires_at is not None and self._clock() >= entry.expires_at:
            del self._entries[conversation_id]
            return None
        return entry

    def _renewed(self) -> float | None:
        """When the store will forget a conversation written now."""
        ttl_s = self._store.history_ttl_s
        return None if ttl_s is None else self._clock() + ttl_s

    def _start_loader(self) -> None:
        if self._loader is not None and not self._loader.done():
            return
        self._loader = self._background.spawn(self._load(), name="history-loader")
        if self._loader is None:
            self._fail(list(self._wanted), StoreError("the history cache is shut down; nothing was read"))
            self._wanted.clear()

    async def _load(self) -> None:
        """Read the wanted conversations, a batch at a time, until none is wanted."""
        while self._wanted:
            await asyncio.sleep(0)  # let the other turns that miss in this same moment join the batch
            ids = list(dict.fromkeys(self._wanted.popleft() for _ in range(min(len(self._wanted), self._max_batch))))
            held = {cid: entry for cid in ids if (entry := self._entry(cid)) is not None}
            known = {cid: entry.version for cid, entry in held.items() if entry.version is not None}
            for cid in ids:
                self._queue.watch(cid)
            try:
                snapshots = await self._store.load_histories(ids, unless_version=known)
            except BaseException as exc:
                for cid in ids:
                    self._queue.unwatch(cid)
                self._fail(ids, exc if isinstance(exc, Exception) else StoreError("the history read was cancelled"))
                if not isinstance(exc, Exception):
                    raise
                continue
            for cid in ids:
                self._settle(cid, snapshots.get(cid, HistorySnapshot(())), held.get(cid))

    def _settle(self, conversation_id: str, snapshot: HistorySnapshot, held: _Entry | None) -> None:
        """Answer the waiters of one conversation from its snapshot (plus the changes still in flight)."""
        written = self._queue.unwatch(conversation_id)
        future = self._loading.pop(conversation_id)
        if snapshot.turns is None:
            if held is not None and self._entries is not None and self._entries.get(conversation_id) is held:
                future.set_result(list(held.turns))  # the copy is current
                return
            # The copy the store vouched for was evicted meanwhile: read the whole history with the next batch.
            self._loading[conversation_id] = future
            self._wanted.append(conversation_id)
            return
        turns = list(snapshot.turns)
        changes = [*written, *self._queue.pending(conversation_id)]
        for write in changes:
            turns = apply_write(turns, write)
        expires_at = self._renewed() if changes else snapshot.expires_at
        if self._entries is not None:
            self._entries[conversation_id] = _Entry(list(turns), snapshot.version, expires_at)
        future.set_result(turns)

    def _fail(self, conversation_ids: list[str], exc: BaseException) -> None:
        for cid in conversation_ids:
            future = self._loading.pop(cid, None)
            if future is not None and not future.done():
                future.set_exception(exc)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a read's error as seen even when every waiter gave up (no "never retrieved" noise)."""
    if not future.cancelled():
        future.exception()
