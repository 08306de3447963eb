"""The card's footer and freshness notes: the model that answered, tokens, and the sources the answer used.

:class:`~botgateway.cards.state.CardState` folds the turn's events; this
part of it folds what the footer needs (the model answering each round, the
sources of each successful call) and words it when a snapshot is taken, so
the ages it shows are those of the moment the card is drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from botgateway.cards import provenance, render
from botgateway.events import ModelAnswering, ToolCallFinished
from botgateway.snapshot import Block, ToolLine
from botgateway.strings import t

__all__ = ["CardFooter", "FooterOptions"]


@dataclass(frozen=True, kw_only=True)
class FooterOptions:
    """What a card's footer shows (from ``card:`` and the adapter's section)."""

    stats: bool = True
    """Round n/N, tokens, elapsed and the model (``card.footer``)."""
    tokens: bool = True
    """The turn's tokens among the stats (``adapters.<name>.footer_tokens``, else ``card.footer_tokens``)."""
    sources: bool = True
    """The sources line, whether or not the stats show (``card.sources``)."""
    stale_after_s: float = 300.0
    """A tool line says its result came from a cache older than this (``card.stale_after_s``)."""
    model_label: str = ""
    """The model named until one is known to answer (the configured one, or "demo model")."""
    follow_model: bool = True
    """The model that answered (:class:`ModelAnswering`) replaces :attr:`model_label`."""


class CardFooter:
    """The footer of one card and the freshness of its tool lines (mutable; owned by its card state)."""

    def __init__(self, options: FooterOptions, *, locale: str, wall_clock: Callable[[], float]) -> None:
        """``wall_clock`` (Unix time) ages the sources, whose fetch times are Unix times."""
        self.options = options
        """What the footer shows."""
        self.locale = locale
        """The card's language."""
        self._wall_clock = wall_clock
        self._sources = provenance.TurnSources()
        self._answering: ModelAnswering | None = None

    @property
    def shown(self) -> bool:
        """Whether the footer can say anything at all."""
        return self.options.stats or self.options.sources

    def model_answering(self, event: ModelAnswering) -> None:
        """A round's model is known (the latest is the one named)."""
        self._answering = event

    def tool_finished(self, event: ToolCallFinished) -> None:
        """A call ended: a successful one's sources count for the answer."""
        if event.ok:
            self._sources.add(event.call_id, event.sources)

    def aged(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        """``blocks`` with each done tool line whose result came from a stale cache saying how old, as of now."""
        if not self._sources:
            return blocks
        now = self._wall_clock()
        aged = []
        for block in blocks:
            if isinstance(block, ToolLine) and block.status == "done":
                note = provenance.cached_note(
                    self._sources.of(block.call_id), now=now, locale=self.locale,
                    stale_after_s=self.options.stale_after_s,
                )
                block = replace(block, freshness=note) if note else block
            aged.append(block)
        return tuple(aged)

    def text(self, *, round: int, max_rounds: int, tokens: int, elapsed_s: float) -> str:
        """The footer as of now; empty when it shows nothing."""
        options = self.options
        sources = ""
        if options.sources:
            sources = provenance.sources_text(self._sources.all, now=self._wall_clock(), locale=self.locale)
        if not options.stats:
            return sources
        return render.footer_text(
            locale=self.locale,
            round=round,
            max_rounds=max_rounds,
            tokens=tokens if options.tokens else 0,
            elapsed_s=elapsed_s,
            model_label=self.model_shown(),
            sources=sources,
        )

    def model_shown(self) -> str:
        """The model that answered, once known (saying when it stood in for another); else the configured label."""
        answering = self._answering
        if answering is None or not self.options.follow_model or not answering.model:
            return self.options.model_label
        if answering.fallback_from:
            return t(self.locale, "footer_fallback", model=answering.model)
        return answering.model
