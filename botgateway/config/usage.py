"""The ``usage:`` section: what the models' tokens cost.

Every model call is recorded with its tokens (``botgateway usage`` prints them);
a call whose model has a price here is recorded with its cost too, computed
when it is recorded, so a later change of prices does not rewrite the past.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from botgateway.config.section import Section

__all__ = ["ModelPrice", "UsageConfig"]


class ModelPrice(Section):
    """What one model's tokens cost, per million tokens, in ``usage.currency``."""

    prompt: float = Field(ge=0)
    """Per million prompt (input) tokens."""
    completion: float = Field(ge=0)
    """Per million completion (output) tokens; reasoning tokens are completion tokens and cost the same."""
    cached_prompt: float | None = Field(None, ge=0)
    """Per million prompt tokens served from the provider's prompt cache; unset: they cost ``prompt``."""


class UsageConfig(Section):
    """Prices of the models, for the cost of each call."""

    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model name (``deepseek-chat``) or glob (``gpt-4o-mini*``, ``qwen-*``) → its price.

    The name is the one the provider reports in its answer (``botgateway usage --by model``
    lists them), else the configured ``llm.model``. An exact name wins, then the name
    without a dated snapshot's suffix (``gpt-4o`` prices ``gpt-4o-2024-08-06``), then the
    matching glob with the most literal characters; case is ignored.
    """
    currency: str = "USD"
    """The currency of every price: a three-letter code (USD, CNY, EUR)."""

    @field_validator("prices")
    @classmethod
    def _named(cls, prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        if any(not name.strip() for name in prices):
            raise ValueError("a price needs a model name or glob as its key (deepseek-chat, gpt-4o*)")
        return prices

    @field_validator("currency")
    @classmethod
    def _code(cls, currency: str) -> str:
        code = currency.strip().upper()
        if len(code) != 3 or not code.isascii() or not code.isalpha():
            raise ValueError("must be a three-letter currency code (USD, CNY, EUR)")
        return code
