"""The ``llm`` section: which OpenAI-compatible endpoint answers, and how patiently."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from botgateway.config.section import Section

__all__ = ["DEFAULT_SYSTEM_PROMPT", "KEYLESS_PROVIDERS", "PROVIDER_PRESETS", "LLMConfig", "ProviderName"]

ProviderName = Literal[
    "auto", "demo", "openai", "deepseek", "qwen", "dashscope", "moonshot", "zhipu",
    "doubao", "ark", "ollama", "vllm", "custom",
]
"""The provider presets ``llm.provider`` accepts."""

PROVIDER_PRESETS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        # provider: (base_url, default model)
        "openai": ("https://api.openai.com/v1", "gpt-4o-mini"),
        "deepseek": ("https://api.deepseek.com/v1", "deepseek-chat"),
        "qwen": ("https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen-plus"),
        "dashscope": ("https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen-plus"),
        "moonshot": ("https://api.moonshot.cn/v1", "moonshot-v1-8k"),
        "zhipu": ("https://open.bigmodel.cn/api/paas/v4", "glm-4-flash"),
        "doubao": ("https://ark.cn-beijing.volces.com/api/v3", ""),
        "ark": ("https://ark.cn-beijing.volces.com/api/v3", ""),
        "ollama": ("http://127.0.0.1:11434/v1", "qwen2.5"),
        "vllm": ("http://127.0.0.1:8000/v1", ""),
    }
)
"""Base URL and default model per provider preset; an explicit ``base_url`` wins."""

KEYLESS_PROVIDERS = frozenset({"demo", "ollama", "vllm", "custom"})
"""Providers that work without an API key (local or self-hosted endpoints)."""

DEFAULT_SYSTEM_PROMPT = (
    "You are an ops assistant in a team chat. Use the tools to look up servers and "
    "infrastructure before answering; never invent hosts, IPs or states. Answer briefly, "
    "in the language of the question, with the facts the tools returned."
)
"""The system message when ``llm.system_prompt`` is not set."""


class LLMConfig(Section):
    """The model: an OpenAI-compatible chat-completions endpoint."""

    provider: ProviderName = "auto"
    """Preset that fills ``base_url`` and ``model``. ``auto`` means ``demo`` without an API key, else ``openai``-compatible."""
    base_url: str | None = None
    """Endpoint base URL (``…/v1``); overrides the preset."""
    api_key: SecretStr = SecretStr("")
    """API key; use ``${ENV_VAR}`` rather than writing it in the file."""
    model: str = ""
    """Model name (or Doubao/Ark endpoint id); the preset's default when empty."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature; provider default when unset."""
    top_p: float | None = Field(None, gt=0, le=1)
    """Nucleus sampling; provider default when unset."""
    max_tokens: int | None = Field(None, gt=0)
    """Cap on completion tokens per round."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields (``enable_thinking``, ``thinking``…)."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """Time to connect to the endpoint."""
    first_token_timeout_s: float = Field(60.0, gt=0)
    """Time from request to the first streamed chunk."""
    idle_timeout_s: float = Field(60.0, gt=0)
    """Longest silence allowed between chunks once streaming."""
    max_retries: int = Field(3, ge=0, le=10)
    """Retries of connection errors, 429 and 5xx that happen before the first token."""
    retry_max_wait_s: float = Field(20.0, gt=0)
    """Ceiling on one backoff wait (Retry-After included)."""
    max_rounds: int = Field(6, ge=1, le=50)
    """Most model rounds (tool round trips) per turn."""
    turn_timeout_s: float = Field(180.0, gt=0)
    """Longest a whole turn may take, all rounds and tool calls together; past it the turn ends with what it wrote so far."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The system message."""

    @property
    def resolved_provider(self) -> str:
        """The provider after ``auto`` is decided."""
        if self.provider == "auto":
            return "demo" if not self.api_key.get_secret_value() and not self.base_url else "openai"
        return self.provider

    @property
    def resolved_base_url(self) -> str | None:
        """``base_url``, or the preset's."""
        if self.base_url:
            return self.base_url
        return PROVIDER_PRESETS.get(self.resolved_provider, (None, ""))[0]

    @property
    def resolved_model(self) -> str:
        """``model``, or the preset's default."""
        if self.model:
            return self.model
        if self.resolved_provider == "demo":
            return "botgateway-demo"
        preset_url, preset_model = PROVIDER_PRESETS.get(self.resolved_provider, ("", ""))
        if self.provider == "auto" and self.base_url and self.base_url.rstrip("/") != preset_url:
            return ""  # someone else's endpoint: OpenAI's default model would only earn a 404 there
        return preset_model

    @model_validator(mode="after")
    def _check_complete(self) -> LLMConfig:
        provider = self.resolved_provider
        if provider == "custom" and not self.base_url:
            raise ValueError("provider 'custom' needs base_url (the endpoint's …/v1 URL)")
        if provider not in KEYLESS_PROVIDERS and not self.api_key.get_secret_value() and self.provider != "auto":
            raise ValueError(f"provider {provider!r} needs api_key; set it with ${{ENV_VAR}} or use provider: demo")
        if provider != "demo" and not self.resolved_model:
            if self.provider == "auto" and self.base_url:
                raise ValueError("llm.base_url is set but llm.model is not; set llm.model to a model that endpoint serves")
            raise ValueError(f"provider {provider!r} has no default model; set llm.model (for Doubao/Ark: the endpoint id)")
        return self
