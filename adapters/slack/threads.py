"""The threads the bot answers in, so a follow-up there needs no new mention.

Remembered in memory while the process runs, and marked in the Store so the
other processes of a fleet know it too (a "stop" typed in the thread while its
first answer runs may reach any of them, before any history is written);
after a restart a thread with history in the Store still counts.
"""

from __future__ import annotations

from typing import Protocol

import structlog
from cachetools import LRUCache

from botgateway.background import BackgroundTasks
from botgateway.messages import conversation_key
from botgateway.stores.base import ConversationStore, CounterStore

__all__ = ["BotThreads", "ThreadStore"]

log = structlog.get_logger(__name__)

_MAX_THREADS = 50_000
"""Threads remembered in memory at most (older ones are found through the Store)."""

_MARK_TTL_S = 86_400.0
"""How long the Store's mark of a thread lasts; past its first answer the thread's history shows it anyway."""

_ADOPTED_TTL_S = 7 * 86_400.0
"""How long the mark of a card's thread lasts (an alert's card lives as long as its alert, and may have no answer
in its thread for days)."""


class ThreadStore(CounterStore, ConversationStore, Protocol):
    """The part of the Store the threads are found in: the marks (counters) and the conversations' history."""


class BotThreads:
    """``remember`` a thread the bot answered in; ``await contains(...)`` asks whether it did."""

    def __init__(self, store: ThreadStore) -> None:
        self._store = store
        self._threads: LRUCache[tuple[str, str, str], None] = LRUCache(_MAX_THREADS)

    def remember(self, team: str, channel: str, thread_ts: str, tasks: BackgroundTasks) -> None:
        """The bot answers in this thread; the Store's mark for the other processes is written in ``tasks``."""
        if (team, channel, thread_ts) in self._threads:
            return
        self._threads[(team, channel, thread_ts)] = None
        tasks.spawn(self._write_mark(team, channel, thread_ts), name="slack-thread-mark")

    async def adopt(self, team: str, channel: str, thread_ts: str) -> None:
        """The bot answers in the thread of a message it posted itself (an alert's card): remembered here, and
        the Store's mark written before this returns, so a reply reaching another process is answered too."""
        self._threads[(team, channel, thread_ts)] = None
        await self._write_mark(team, channel, thread_ts, _ADOPTED_TTL_S)

    async def _write_mark(self, team: str, channel: str, thread_ts: str, ttl_s: float = _MARK_TTL_S) -> None:
        try:
            await self._store.add_to_counter(_mark_key(team, channel, thread_ts), 1, ttl_s)
        except Exception as exc:  # this process still knows; a follow-up through another one may be missed
            log.warning("slack.thread_mark_failed", error=type(exc).__name__)

    async def contains(self, team: str, channel: str, thread_ts: str) -> bool:
        """A thread the bot answers in: remembered here, marked by another process, or with history in the Store."""
        if (team, channel, thread_ts) in self._threads:
            return True
        key = conversation_key("slack", "thread", workspace=team, chat=channel, thread=thread_ts)
        try:
            if await self._store.add_to_counter(_mark_key(team, channel, thread_ts), 0, _MARK_TTL_S) > 0:  # 0: a read
                return True
            return bool(await self._store.load_turns(key))
        except Exception as exc:
            log.warning("slack.thread_lookup_failed", error=type(exc).__name__)
            return False


def _mark_key(team: str, channel: str, thread_ts: str) -> str:
    """The Store counter that marks a thread the bot answers in."""
    return f"slack-thread:{team}:{channel}:{thread_ts}"
