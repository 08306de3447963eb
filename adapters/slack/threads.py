"""The threads the bot answers in, so a follow-up there needs no new mention.

Remembered in memory while the process runs; after a restart a thread with
history in the Store still counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from cachetools import LRUCache

from botgateway.messages import conversation_key

if TYPE_CHECKING:
    from botgateway.stores.base import Store

__all__ = ["BotThreads"]

log = structlog.get_logger(__name__)

_MAX_THREADS = 50_000
"""Threads remembered in memory at most (older ones are found through the Store)."""


class BotThreads:
    """``remember`` a thread the bot answered in; ``await contains(...)`` asks whether it did."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._threads: LRUCache[tuple[str, str, str], None] = LRUCache(_MAX_THREADS)

    def remember(self, team: str, channel: str, thread_ts: str) -> None:
        """The bot answers in this thread."""
        self._threads[(team, channel, thread_ts)] = None

    async def contains(self, team: str, channel: str, thread_ts: str) -> bool:
        """A thread the bot answered in: remembered in memory, or with history in the Store (after a restart)."""
        if (team, channel, thread_ts) in self._threads:
            return True
        key = conversation_key("slack", "thread", workspace=team, chat=channel, thread=thread_ts)
        try:
            return bool(await self._store.load_turns(key))
        except Exception as exc:
            log.warning("slack.thread_lookup_failed", error=type(exc).__name__)
            return False
