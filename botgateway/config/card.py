"""Sections of the card: what it shows and how often it is updated."""

from __future__ import annotations

from pydantic import Field

from botgateway.config.section import Section

__all__ = ["BufferPolicyConfig", "CardConfig", "PhasePolicy"]


class PhasePolicy(Section):
    """When pending text of one phase is pushed to the card."""

    min_chars: int = Field(20, ge=1)
    """Flush once this many new characters are pending…"""
    min_interval_s: float = Field(0.3, ge=0)
    """…and at least this long has passed since the last update."""
    max_wait_s: float = Field(1.0, gt=0)
    """Flush anything pending after this long, even if the stream stalls."""


class BufferPolicyConfig(Section):
    """Per-phase update pacing; defaults are the product's reference policy."""

    thinking: PhasePolicy = PhasePolicy(min_chars=20, min_interval_s=0.3, max_wait_s=1.0)
    """While the model reasons."""
    tool: PhasePolicy = PhasePolicy(min_chars=5, min_interval_s=0.1, max_wait_s=0.5)
    """While tools run (status lines)."""
    answer: PhasePolicy = PhasePolicy(min_chars=20, min_interval_s=0.3, max_wait_s=1.0)
    """While the answer streams."""


class CardConfig(Section):
    """What the card shows."""

    show_thought: bool = True
    """Show the tail of the model's reasoning, muted, until the answer starts."""
    thought_chars: int = Field(200, ge=0)
    """How much of the reasoning tail to show."""
    footer: bool = True
    """Show round n/N · tokens · elapsed · the model that answered (the sources line is ``sources``)."""
    footer_tokens: bool = False
    """Show the turn's tokens in the footer. Each adapter may say otherwise
    (``adapters.<name>.footer_tokens``); the terminal does by default."""
    sources: bool = True
    """List the sources the answer used in the footer ("sources: Alibaba Cloud prod/cn-hangzhou (40 s old) ·
    static inventory"), whether or not ``footer`` is on: provenance is part of the answer, not a statistic."""
    stale_after_s: float = Field(30.0, ge=0)
    """A tool line whose result came from a cache older than this says so ("cached 2 min ago"); below the tools'
    ``cache_ttl_s`` (60 s by default), or no cached result is ever that old (``check-config`` warns)."""
    final_deadline_s: float = Field(30.0, gt=0)
    """How long the final update is retried before it is delivered as a new message."""
    late_close_s: float = Field(300.0, ge=0)
    """After such a fallback, how long the card itself keeps being closed in the background
    (ending with a note pointing at the message); 0 leaves it to start-up recovery."""
