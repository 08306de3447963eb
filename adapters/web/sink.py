"""The web's :class:`~botgateway.sink.CardSink`: no platform to call, only each turn's newest snapshot, for watchers.

The API's and the console's cards live in the browser: this sink keeps the
newest snapshot of each turn (a bounded map, least recently changed dropped
first) on a :class:`CardBoard`, whose watchers (``GET /v1/turns/{id}/card``)
wake on each change and read the newest snapshot only, so a slow watcher skips
versions instead of queueing them. It makes no platform calls, so its rate
budget is a large no-op one (as DingTalk's local replies); the card's
buffer policy still paces the updates.
"""

from __future__ import annotations

import asyncio
import itertools

from cachetools import LRUCache

from botgateway.budget import RateLimit
from botgateway.sink import CardHandle, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot

__all__ = ["NO_CALL", "PLATFORM", "CardBoard", "WebSink"]

PLATFORM = "web"
"""The platform name of the web's cards."""

NO_CALL = RateLimit(rate_per_s=1000.0, burst=1000)
"""The budget of calls that reach no platform: never the bottleneck."""

MAX_BOARDS = 2000
"""Turns whose latest snapshot is kept (running ones and recently finished ones)."""


class CardBoard:
    """One turn's newest snapshot, and a wake-up for whoever watches it change."""

    def __init__(self, snapshot: CardSnapshot) -> None:
        self.snapshot = snapshot
        """The newest snapshot."""
        self.version = 1
        """Bumped at each change."""
        self._changed = asyncio.Event()

    def put(self, snapshot: CardSnapshot) -> None:
        """Show ``snapshot`` (an older one than shown is ignored) and wake the watchers."""
        if snapshot.seq < self.snapshot.seq and not snapshot.final:
            return
        self.snapshot = snapshot
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed_since(self, version: int) -> None:
        """Return once the board is past ``version`` (at once when it already is)."""
        while self.version == version:
            await self._changed.wait()


class WebSink:
    """A :class:`~botgateway.sink.CardSink` that keeps each turn's newest snapshot on a :class:`CardBoard`."""

    platform = PLATFORM
    max_chars = 200_000
    """A browser scrolls: one card holds any answer."""

    def __init__(self, *, max_boards: int = MAX_BOARDS) -> None:
        self._boards: LRUCache[str, CardBoard] = LRUCache(maxsize=max_boards)
        self._ids = itertools.count(1)

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One no-op budget: nothing leaves the process."""
        return f"web:{op}", NO_CALL

    def board(self, turn_id: str) -> CardBoard | None:
        """The board of ``turn_id``'s card, while it is kept."""
        return self._boards.get(turn_id)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Start the turn's board."""
        card_id = target.turn_id or f"note-{next(self._ids)}"
        self._show(card_id, snapshot)
        return CardHandle(card_id=card_id, target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show ``snapshot`` on the turn's board."""
        self._show(handle.card_id, snapshot)
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` (also for a card a crashed process left open: its board is simply new)."""
        self._show(handle.card_id, snapshot)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """A note or an undeliverable final: shown on the turn's board when it has one."""
        self._show(target.turn_id or f"note-{next(self._ids)}", snapshot)

    def _show(self, card_id: str, snapshot: CardSnapshot) -> None:
        board = self._boards.get(card_id)
        if board is None:
            self._boards[card_id] = CardBoard(snapshot)
        else:
            board.put(snapshot)
