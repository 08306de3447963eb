"""Prices per model (``usage.prices``): which price a model gets and what its tokens cost; the section's mistakes."""

from __future__ import annotations

import pytest

from botgateway.config import ConfigError, parse_config
from botgateway.config.usage import ModelPrice, UsageConfig
from botgateway.events import Usage
from botgateway.usage import Pricing


def pricing(prices: dict[str, dict[str, float]], currency: str = "USD") -> Pricing:
    return Pricing.from_config(UsageConfig.model_validate({"prices": prices, "currency": currency}))


def test_cost_per_million_tokens_with_cached_prompt_tokens_at_their_own_price() -> None:
    prices = pricing({"gpt-4o": {"prompt": 2.5, "completion": 10.0, "cached_prompt": 1.25}})
    usage = Usage(prompt_tokens=1_200_000, completion_tokens=300_000, cached_tokens=1_000_000, reasoning_tokens=100_000)
    # 200k uncached at 2.5, 1M cached at 1.25, 300k completion (reasoning included) at 10.
    assert prices.cost("gpt-4o", usage) == pytest.approx(0.5 + 1.25 + 3.0)


def test_cached_tokens_cost_the_prompt_price_when_no_cached_price_is_set() -> None:
    prices = pricing({"deepseek-chat": {"prompt": 0.27, "completion": 1.1}})
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_tokens=600_000)
    assert prices.cost("deepseek-chat", usage) == pytest.approx(0.27)


def test_a_model_without_a_price_has_no_cost_not_a_zero_one() -> None:
    prices = pricing({"deepseek-chat": {"prompt": 0.27, "completion": 1.1}})
    assert prices.cost("qwen-max", Usage(prompt_tokens=10, completion_tokens=10)) is None
    assert prices.cost("", Usage(prompt_tokens=10, completion_tokens=10)) is None
    assert pricing({"free-model": {"prompt": 0, "completion": 0}}).cost("free-model", Usage(prompt_tokens=5)) == 0.0


def test_exact_name_then_the_most_specific_glob_case_ignored() -> None:
    prices = pricing({
        "gpt-4o*": {"prompt": 2.5, "completion": 10.0},
        "gpt-4o-mini*": {"prompt": 0.15, "completion": 0.6},
        "GPT-4O-MINI-2024-07-18": {"prompt": 0.1, "completion": 0.5},
        "qwen-?ax": {"prompt": 1.6, "completion": 6.4},
    })
    assert prices.price_for("gpt-4o-2024-08-06") == ModelPrice(prompt=2.5, completion=10.0)
    assert prices.price_for("gpt-4o-mini-2024-09-01") == ModelPrice(prompt=0.15, completion=0.6)
    assert prices.price_for("gpt-4o-mini-2024-07-18") == ModelPrice(prompt=0.1, completion=0.5)
    assert prices.price_for("Qwen-Max") == ModelPrice(prompt=1.6, completion=6.4)
    assert prices.price_for("gpt-4") is None


def test_a_models_price_applies_to_its_dated_snapshots() -> None:
    prices = pricing({"gpt-4o": {"prompt": 2.5, "completion": 10.0}, "gpt-4o*": {"prompt": 9, "completion": 9},
                      "deepseek-reasoner": {"prompt": 0.55, "completion": 2.19}})
    assert prices.price_for("gpt-4o-2024-08-06") == ModelPrice(prompt=2.5, completion=10.0)
    assert prices.price_for("deepseek-reasoner-0528") == ModelPrice(prompt=0.55, completion=2.19)
    assert prices.price_for("gpt-4o-mini") == ModelPrice(prompt=9, completion=9)  # another model: only the glob
    assert pricing({"gpt-4o": {"prompt": 1, "completion": 1}}).price_for("gpt-4o-mini-2024-07-18") is None


def test_the_section_in_the_config_file() -> None:
    config = parse_config({"usage": {"currency": "cny", "prices": {"deepseek-*": {"prompt": 2, "completion": 8}}}}, env={})
    assert config.usage.currency == "CNY"
    assert Pricing.from_config(config.usage).price_for("deepseek-chat") == ModelPrice(prompt=2, completion=8)
    assert parse_config({}, env={}).usage == UsageConfig()


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"prices": {"m": {"prompt": -1, "completion": 1}}}, "usage.prices.m.prompt: Input should be greater than or equal to 0"),
        ({"prices": {"m": {"prompt": 1}}}, "usage.prices.m.completion: required key is missing"),
        ({"prices": {"m": {"prompt": 1, "completion": 1, "cached": 0.5}}}, "usage.prices.m.cached"),
        ({"prices": {" ": {"prompt": 1, "completion": 1}}}, "a price needs a model name or glob"),
        ({"currency": "dollars"}, "usage.currency: must be a three-letter currency code"),
    ],
)
def test_mistakes_name_their_key(section: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"usage": section}, env={})
    assert expected in str(caught.value)
