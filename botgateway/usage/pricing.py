"""What a model call cost: its tokens at the model's price (``usage.prices``).

Prices are per million tokens. Cached prompt tokens cost ``cached_prompt`` when
it is set, else the full prompt price; reasoning tokens are completion tokens
(providers bill them as output) and need no price of their own. A model
without a price has no cost (``None``), which is not the same as free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from botgateway.config.usage import ModelPrice, UsageConfig
from botgateway.events import Usage

__all__ = ["PER_TOKENS", "Pricing"]

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""

_WILDCARDS = frozenset("*?[]")
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{4}|\d{6}|\d{8}|latest)$")
"""A dated snapshot's suffix as providers report it: ``gpt-4o-2024-08-06``, ``deepseek-r1-0528``, ``…-20250219``."""


@dataclass(frozen=True)
class Pricing:
    """The configured prices, looked up by model name."""

    prices: Mapping[str, ModelPrice] = field(default_factory=dict)
    """Model name or glob → price, as in ``usage.prices``."""
    currency: str = "USD"
    """The currency of every price (``usage.currency``)."""

    @classmethod
    def from_config(cls, config: UsageConfig) -> Pricing:
        """The prices of the ``usage:`` section."""
        return cls(dict(config.prices), config.currency)

    def price_for(self, model: str) -> ModelPrice | None:
        """The price of ``model``: its exact name, its name without a dated snapshot's suffix (a price for
        ``gpt-4o`` applies to ``gpt-4o-2024-08-06``, which providers report), else the matching glob with the
        most literal characters.

        Case is ignored (providers vary it). Among globs equally specific, the first configured wins.
        """
        name = model.strip().lower()
        if not name:
            return None
        base = _SNAPSHOT.sub("", name)
        best: tuple[int, ModelPrice] | None = None
        snapshot: ModelPrice | None = None
        for key, price in self.prices.items():
            pattern = key.strip().lower()
            if pattern == name:
                return price
            if pattern == base:
                snapshot = price
                continue
            if _WILDCARDS.isdisjoint(pattern) or not fnmatchcase(name, pattern):
                continue
            literal = sum(1 for char in pattern if char not in _WILDCARDS)
            if best is None or literal > best[0]:
                best = (literal, price)
        if snapshot is not None:
            return snapshot
        return best[1] if best is not None else None

    def cost(self, model: str, usage: Usage) -> float | None:
        """What ``usage`` of ``model`` cost in :attr:`currency`; ``None`` when ``model`` has no price."""
        price = self.price_for(model)
        if price is None:
            return None
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = price.prompt if price.cached_prompt is None else price.cached_prompt
        total = (
            (usage.prompt_tokens - cached) * price.prompt
            + cached * cached_price
            + usage.completion_tokens * price.completion
        )
        return total / PER_TOKENS
