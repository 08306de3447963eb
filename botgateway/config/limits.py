"""The ``limits:`` section: what one asker may use.

It holds the global defaults of the per-principal limits; the field names are
those of a role's ``limits`` in the access policy, which overrides them per role.
"""

from __future__ import annotations

from pydantic import Field

from botgateway.config.section import Section

__all__ = ["LimitsConfig"]


class LimitsConfig(Section):
    """Per-principal limits (0: no limit), shared by every replica through the store, and the fair share of turn slots."""

    turns_per_minute: int = Field(0, ge=0)
    """Questions one asker may start per minute (a fixed window, UTC minutes); 0: no limit."""
    concurrent_turns: int = Field(0, ge=0)
    """Questions of one asker in progress at once (running or waiting), over all replicas; 0: no limit."""
    tokens_per_day: int = Field(0, ge=0)
    """Model tokens (prompt + completion) one asker may use per UTC day; 0: no limit."""
    max_slot_share: float = Field(0.5, gt=0, le=1)
    """Largest share of ``gateway.max_concurrent_turns`` one asker's turns may hold (at least one slot).

    When slots are scarce, waiting turns are served round-robin by asker, so a
    flood of questions from one person never holds back another's.
    """
    lease_ttl_s: float = Field(900.0, gt=0)
    """A turn counts against ``concurrent_turns`` at most this long: the turns of a killed process stop counting after it."""

