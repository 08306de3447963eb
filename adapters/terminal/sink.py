"""The terminal's :class:`~botgateway.sink.CardSink`: cards drawn live, final ones printed into the scrollback."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from rich.console import Console, Group, RenderableType
from rich.live import Live

from adapters.terminal.card import Tail, card_renderable
from botgateway.budget import RateLimit
from botgateway.sink import CardGone, CardHandle, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot

__all__ = ["PLATFORM", "TerminalSink"]

PLATFORM = "terminal"
"""The platform name of terminal cards and messages."""


@dataclass(frozen=True)
class _LiveCard:
    """One card on screen."""

    snapshot: CardSnapshot
    """What it shows now."""
    title: str
    """Panel title."""



class TerminalSink:
    """A :class:`~botgateway.sink.CardSink` that draws cards live in this terminal.

    Several cards may be live at once (queued questions); they share one
    ``rich.live.Live`` area, and each final card is printed above it, so the
    scrollback keeps every answer in full.
    """

    platform = PLATFORM
    max_chars = 60_000
    """A terminal scrolls: continuation parts only for very long answers."""

    def __init__(self, console: Console | None = None, *, rate_per_s: float = 20.0) -> None:
        self.console = console or Console()
        self._limit = RateLimit(rate_per_s=rate_per_s, burst=5)
        self._cards: dict[str, _LiveCard] = {}
        self._live: Live | None = None
        self._ids = itertools.count(1)
        self.updates = 0
        """Updates drawn so far (for tests and the curious)."""

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One generous budget for the whole terminal; the BufferPolicy does the pacing."""
        return f"terminal:{op}", self._limit

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Start drawing a new card."""
        card_id = f"t{next(self._ids)}"
        self._cards[card_id] = _LiveCard(snapshot, title=self._title(target))
        self._redraw()
        return CardHandle(card_id=card_id, target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Redraw the card with ``snapshot``."""
        card = self._cards.get(handle.card_id)
        if card is None:
            raise CardGone(f"terminal card {handle.card_id} is no longer on screen")
        if snapshot.seq >= card.snapshot.seq:
            self._cards[handle.card_id] = replace(card, snapshot=snapshot)
        self._redraw()
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Print the final card into the scrollback and stop drawing it."""
        card = self._cards.pop(handle.card_id, None)
        if card is None:
            # A card of an earlier process (recovery) or one already final: nothing on screen to fix.
            raise CardGone(f"terminal card {handle.card_id} is not on screen")
        self._print(card_renderable(snapshot, title=card.title))
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Print ``snapshot`` as a new card (notes, refusals, undeliverable finals)."""
        self._print(card_renderable(snapshot, title=self._title(target)))

    def close(self) -> None:
        """Stop the live area (cards still open are left as last drawn)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # drawing

    def _title(self, target: CardTarget) -> str:
        if target.is_group and target.user_name:
            return f"botgateway · {target.user_name}"
        return "botgateway"

    def _area(self) -> RenderableType:
        return Tail(Group(*(card_renderable(c.snapshot, title=c.title) for c in self._cards.values())))

    def _redraw(self) -> None:
        self.updates += 1
        if not self._cards:
            self.close()
            return
        if self._live is None:
            self._live = Live(self._area(), console=self.console, refresh_per_second=8, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._live.update(self._area(), refresh=True)

    def _print(self, renderable: RenderableType) -> None:
        if self._live is not None:
            # printed above the live area, which is redrawn below it
            self._live.console.print(renderable)
            if self._cards:
                self._live.update(self._area(), refresh=True)
            else:
                self.close()
        else:
            self.console.print(renderable)
        self.updates += 1
