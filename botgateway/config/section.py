"""The base of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, defaults are validated too, and a loaded config is immutable."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)
