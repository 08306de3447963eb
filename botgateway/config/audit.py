"""The ``audit:`` section: how long what askers did is kept."""

from __future__ import annotations

from pydantic import Field

from botgateway.config.section import Section

__all__ = ["AuditConfig"]


class AuditConfig(Section):
    """Audit records: every turn, tool call, refusal and limit hit."""

    retention_days: float = Field(90.0, gt=0)
    """Records older than this are deleted by the store's periodic sweep."""
