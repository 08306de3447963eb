"""When pending card changes are pushed: the buffer policy per phase (thinking, tool, answer)."""

from __future__ import annotations

from dataclasses import dataclass

from botgateway.config import BufferPolicyConfig, PhasePolicy
from botgateway.snapshot import Phase

__all__ = ["BufferPolicy", "PhaseRule"]


@dataclass(frozen=True)
class PhaseRule:
    """When pending changes of one phase are pushed to the card."""

    min_chars: int
    """Flush once this many new characters are pending…"""
    min_interval_s: float
    """…and at least this long has passed since the last update started."""
    max_wait_s: float
    """Flush whatever is pending after this long, even when no more text comes."""


@dataclass(frozen=True)
class BufferPolicy:
    """Update pacing per phase. A phase change and the end of the turn flush at once."""

    thinking: PhaseRule
    """While the model reasons (the muted thought tail)."""
    tool: PhaseRule
    """While tools run; each tool start/finish counts as ``min_chars`` so status lines show promptly."""
    answer: PhaseRule
    """While the answer streams."""
    live: bool = True
    """False: no live updates at all — the card is sent once, final (the "no streaming" strategy)."""

    @classmethod
    def from_config(cls, config: BufferPolicyConfig | None = None) -> BufferPolicy:
        """The policy of an adapter's ``policy:`` section (defaults: the product's reference policy)."""
        config = config or BufferPolicyConfig()

        def rule(section: PhasePolicy) -> PhaseRule:
            return PhaseRule(
                min_chars=section.min_chars, min_interval_s=section.min_interval_s, max_wait_s=section.max_wait_s
            )

        return cls(thinking=rule(config.thinking), tool=rule(config.tool), answer=rule(config.answer))

    @classmethod
    def every_chunk(cls) -> BufferPolicy:
        """Update on every chunk (for comparison in benchmarks; it floods rate limits)."""
        rule = PhaseRule(min_chars=1, min_interval_s=0.0, max_wait_s=0.001)
        return cls(thinking=rule, tool=rule, answer=rule)

    @classmethod
    def final_only(cls) -> BufferPolicy:
        """No streaming: one card with the final answer at the end."""
        rule = PhaseRule(min_chars=1, min_interval_s=0.0, max_wait_s=1.0)
        return cls(thinking=rule, tool=rule, answer=rule, live=False)

    def rule(self, phase: Phase) -> PhaseRule:
        """The rule of ``phase``."""
        rule: PhaseRule = getattr(self, phase)  # the phases are the fields' names
        return rule
