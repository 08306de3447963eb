"""Test helpers for the model side: an LLM config pointed at a scripted server."""

from __future__ import annotations

from typing import Any

from botgateway.config import LLMConfig

TEST_API_KEY = "sk-test-SECRET-0123456789"
"""A recognizable key, so tests can assert it never leaks into messages."""


def llm_config(base_url: str, **overrides: Any) -> LLMConfig:
    """An :class:`LLMConfig` for the scripted server with quick timeouts and retries."""
    values: dict[str, Any] = {
        "provider": "custom",
        "base_url": base_url,
        "api_key": TEST_API_KEY,
        "model": "scripted-model",
        "connect_timeout_s": 5,
        "first_token_timeout_s": 10,
        "idle_timeout_s": 10,
        "max_retries": 3,
        "retry_max_wait_s": 2,
    }
    values.update(overrides)
    return LLMConfig.model_validate(values)
