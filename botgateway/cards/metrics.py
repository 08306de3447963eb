"""Per-turn card metrics: how fast the card showed text, what it cost, whether it landed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CardMetrics"]


@dataclass
class CardMetrics:
    """What one turn's card pipeline did. Filled in by the streamer as the turn runs."""

    first_token_to_visible_s: float | None = None
    """Seconds from the first model token (thought or text) to the first card update showing text."""
    api_calls: dict[str, int] = field(default_factory=dict)
    """Sink calls attempted, by op (``create``, ``update``, ``finalize``, ``fallback``)."""
    throttles: int = 0
    """Calls the platform answered with a throttle (429, QPS limit, ``ratelimited``)."""
    retries: int = 0
    """Calls repeated after a transient error or a throttle."""
    coalesced: int = 0
    """Flushes merged into a later update because one was already in flight or waiting for budget."""
    budget_wait_s: float = 0.0
    """Total seconds spent waiting for the shared rate budget."""
    final_delivery_s: float | None = None
    """Seconds from ``finish()`` to the final answer being delivered (card or fallback)."""
    parts: int = 0
    """Cards created for the turn (more than one when a long answer continued)."""
    fallback_used: bool = False
    """The final answer (or part of it) went out through the sink's fallback message."""
    delivered: bool = False
    """The final answer reached the user (card or fallback)."""
    events: int = 0
    """Turn events fed to the streamer."""

    def count_call(self, op: str) -> None:
        """Record one attempted sink call of ``op``."""
        self.api_calls[op] = self.api_calls.get(op, 0) + 1

    @property
    def total_calls(self) -> int:
        """All sink calls attempted."""
        return sum(self.api_calls.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (for audit records and ``ask --json``)."""
        data = asdict(self)
        data["total_calls"] = self.total_calls
        return data
