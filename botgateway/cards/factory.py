"""Building a turn's card: its state and its streamer, from the card settings of the config."""

from __future__ import annotations

from dataclasses import dataclass

from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.config import AdaptersConfig, CardConfig
from botgateway.sink import CardSink, CardTarget
from botgateway.stores.base import OpenCardStore
from botgateway.strings import t

__all__ = ["CardFactory"]


@dataclass(frozen=True, kw_only=True)
class CardFactory:
    """What every card of a gateway shares: settings, the rate budget, the open-card records, the background tasks."""

    config: CardConfig
    """The ``card:`` section (thought, footer, deadlines)."""
    budget: RateBudget
    """The process's rate budgets, shared by every card."""
    store: OpenCardStore
    """Where open cards are recorded."""
    background: BackgroundTasks
    """Owner of the cards' background closing."""
    instance_id: str
    """This process: the owner of the open-card records."""
    model_label: str = ""
    """Shown in the footer."""
    demo: bool = False
    """The offline demo model answers: the footer always says so, in the card's language."""
    adapters: AdaptersConfig | None = None
    """The ``adapters:`` section: per platform, whether the footer shows tokens (``None``: ``card:`` decides)."""

    def footer_tokens(self, platform: str) -> bool:
        """Whether cards on ``platform`` show the turn's tokens: the adapter's own say, else ``card.footer_tokens``."""
        adapter = getattr(self.adapters, platform, None) if self.adapters is not None else None
        own = getattr(adapter, "footer_tokens", None)
        return own if isinstance(own, bool) else self.config.footer_tokens

    def build(self, sink: CardSink, target: CardTarget, policy: BufferPolicy) -> tuple[CardState, CardStreamer]:
        """A new card for ``target``: the state the turn's events fold into, and its streamer."""
        card = self.config
        state = CardState(
            locale=target.locale,
            show_thought=card.show_thought,
            thought_chars=card.thought_chars,
            footer=card.footer,
            model_label=t(target.locale, "demo_model") if self.demo else self.model_label,
            asker=target.user_name if target.is_group else "",
            footer_tokens=self.footer_tokens(target.platform),
            sources=card.sources,
            stale_after_s=card.stale_after_s,
            follow_model=not self.demo,
        )
        streamer = CardStreamer(
            sink,
            target,
            policy=policy,
            budget=self.budget,
            state=state,
            timing=StreamerTiming(final_deadline_s=card.final_deadline_s, late_close_s=card.late_close_s),
            store=self.store,
            background=self.background,
            instance_id=self.instance_id,
        )
        return state, streamer
