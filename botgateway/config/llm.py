"""The ``llm`` section: which OpenAI-compatible endpoints answer, in which order, for whom, and how patiently.

The primary endpoint is the section's own ``provider``/``base_url``/``api_key``/``model``.
``fallbacks`` are further endpoints tried in order when one fails before its first token
(429, 5xx, a timeout, a connection error); ``breaker`` says how long a failing endpoint
is skipped; ``routes`` choose another endpoint or model by channel or role::

    llm:
      provider: deepseek
      api_key: ${DEEPSEEK_API_KEY}
      fallbacks:
        - {name: qwen, provider: qwen, api_key: ${DASHSCOPE_API_KEY}}
        - {name: local, base_url: http://vllm.internal:8000/v1, model: qwen2.5-72b}
      breaker: {failures: 1, cooldown_s: 60}
      routes:
        - {roles: [viewer], model: deepseek-chat}
        - {channels: ["slack:C0SECRET*"], endpoint: local}   # another endpoint: no fallbacks unless named

Every endpoint shares the section's timeouts, retries and sampling unless it sets
its own ``max_retries`` or ``extra_body``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from botgateway.config.section import Section

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "KEYLESS_PROVIDERS",
    "PRIMARY",
    "PROVIDER_PRESETS",
    "BreakerConfig",
    "EndpointConfig",
    "EndpointFields",
    "LLMConfig",
    "ProviderName",
    "RouteConfig",
    "route_role_problems",
]

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


PRIMARY = "primary"
"""The name of the section's own endpoint, for ``routes`` and the model that answered."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
"""An endpoint's or a route's name: it shows in logs, events and the card's footer."""
_QUALIFIED_GLOB = re.compile(r"[a-z][a-z0-9_-]*:\S+")
"""A qualified channel id, ``platform:id``; the id part may be a glob (``slack:C0*``)."""


class EndpointFields(Section):
    """Where one OpenAI-compatible endpoint is: a provider preset or a base URL, its key and its model."""

    provider: ProviderName = "auto"
    """Preset that fills ``base_url`` and ``model``. ``auto`` means ``demo`` without an API key, else ``openai``-compatible."""
    base_url: str | None = None
    """Endpoint base URL (``…/v1``); overrides the preset."""
    api_key: SecretStr = SecretStr("")
    """API key; use ``${ENV_VAR}`` rather than writing it in the file."""
    model: str = ""
    """Model name (or Doubao/Ark endpoint id); the preset's default when empty."""

    _without_key: ClassVar[str] = " or use provider: demo"
    """What else to do about a missing key (only the primary may be the offline demo model)."""
    _keys: ClassVar[str] = "llm."
    """How messages name this endpoint's keys (a fallback's problems come under its own key path)."""

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
    def _check_complete(self) -> EndpointFields:
        provider = self.resolved_provider
        if provider == "custom" and not self.base_url:
            raise ValueError("provider 'custom' needs base_url (the endpoint's …/v1 URL)")
        if provider not in KEYLESS_PROVIDERS and not self.api_key.get_secret_value() and self.provider != "auto":
            raise ValueError(f"provider {provider!r} needs api_key; set it with ${{ENV_VAR}}{self._without_key}")
        if provider != "demo" and not self.resolved_model:
            keys = self._keys
            if self.provider == "auto" and self.base_url:
                raise ValueError(f"{keys}base_url is set but {keys}model is not; set {keys}model to a model that "
                                 "endpoint serves")
            raise ValueError(f"provider {provider!r} has no default model; set {keys}model (for Doubao/Ark: the "
                             "endpoint id)")
        return self


class EndpointConfig(EndpointFields):
    """A further endpoint (``llm.fallbacks``, or a route's own): its own provider or base URL, key and model.

    Timeouts and sampling are the ``llm`` section's; ``max_retries`` and ``extra_body`` may differ.
    """

    name: str = ""
    """How logs, events and the footer name it; ``fallback1``, ``fallback2``… by position when empty."""
    max_retries: int | None = Field(None, ge=0, le=10)
    """Retries on this endpoint before the next one is tried; ``llm.max_retries`` when unset."""
    extra_body: dict[str, Any] | None = None
    """Provider-specific request fields for this endpoint; ``llm.extra_body`` when unset."""

    _without_key: ClassVar[str] = ""
    _keys: ClassVar[str] = ""
    _name = field_validator("name")(lambda cls, v: _valid_name(v) if v else v)

    @model_validator(mode="after")
    def _not_demo(self) -> EndpointConfig:
        if self.resolved_provider == "demo":
            raise ValueError(
                "needs a provider, a base_url or an api_key: the offline demo model can only be the primary endpoint"
            )
        return self


class BreakerConfig(Section):
    """How long a failing endpoint is skipped (a circuit breaker per endpoint)."""

    failures: int = Field(1, ge=1, le=100)
    """Consecutive failures before the first token (each after the endpoint's own retries) that open the breaker."""
    cooldown_s: float = Field(60.0, gt=0, le=86_400)
    """How long an open breaker skips its endpoint; then one turn tries it again."""


class RouteConfig(Section):
    """Another endpoint or model for some askers: those in matching channels, or holding matching roles."""

    name: str = ""
    """How logs name the route; ``route1``, ``route2``… by position when empty."""
    channels: list[str] = Field(default_factory=list)
    """Qualified channel ids, globs allowed (``slack:C0SECRET*``, ``dingtalk:*``); empty: any channel."""
    roles: list[str] = Field(default_factory=list)
    """Access role names (``access.roles``); the asker must hold one of them. Empty: any role."""
    endpoint: str | EndpointConfig | None = None
    """``primary``, the name of an endpoint under ``llm.fallbacks``, or a whole endpoint of the route's own;
    the primary when unset."""
    model: str = ""
    """Another model on that endpoint (``deepseek-chat`` for viewers); the endpoint's own when empty."""
    fallbacks: list[str] | None = None
    """Names (``primary`` or ``llm.fallbacks``) tried in order when the route's endpoint fails before its first
    token; ``[]``: none. Unset: none for a route that chooses another endpoint (named or its own: its questions stay
    there); for a route that only chooses another model, ``llm.fallbacks`` as usual."""

    _name = field_validator("name")(lambda cls, v: _valid_name(v) if v else v)

    @field_validator("channels")
    @classmethod
    def _qualified(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _QUALIFIED_GLOB.fullmatch(value):
                raise ValueError(f"channel {value!r} is not a qualified id like 'slack:C0OPS' or 'dingtalk:cid…'")
        return values

    @model_validator(mode="after")
    def _complete(self) -> RouteConfig:
        if not self.channels and not self.roles:
            raise ValueError("a route needs channels or roles to match; without either it would take every question")
        if self.endpoint is None and not self.model:
            raise ValueError("a route needs endpoint or model: what it chooses instead of the primary")
        return self


class LLMConfig(EndpointFields):
    """The model: an OpenAI-compatible chat-completions endpoint, with optional fallbacks and routes."""

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
    """Retries of connection errors, 429 and 5xx that happen before the first token (on each endpoint)."""
    retry_max_wait_s: float = Field(20.0, gt=0)
    """Ceiling on one backoff wait (Retry-After included)."""
    max_rounds: int = Field(6, ge=1, le=50)
    """Most model rounds (tool round trips) per turn."""
    turn_timeout_s: float = Field(180.0, gt=0)
    """Longest a whole turn may take, all rounds and tool calls together; past it the turn ends with what it wrote so far."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The system message."""
    fallbacks: list[EndpointConfig] = Field(default_factory=list, max_length=10)
    """Further endpoints, tried in order when the one before fails before its first token (429, 5xx, a timeout,
    a connection error). A failure once the answer has started is never retried on another model."""
    breaker: BreakerConfig = BreakerConfig()
    """How long a failing endpoint is skipped before it is tried again."""
    routes: list[RouteConfig] = Field(default_factory=list, max_length=50)
    """Another endpoint or model by channel or role; the first route that matches the asker wins."""

    def fallback_names(self) -> list[str]:
        """The names of ``fallbacks``, in order (``fallback1``… where none is given)."""
        return [f.name or f"fallback{i}" for i, f in enumerate(self.fallbacks, start=1)]

    def route_names(self) -> list[str]:
        """The names of ``routes``, in order (``route1``… where none is given)."""
        return [r.name or f"route{i}" for i, r in enumerate(self.routes, start=1)]

    def endpoint_settings(self, endpoint: EndpointFields | None = None, *, model: str = "") -> LLMConfig:
        """The settings one model client of ``endpoint`` (the primary when ``None``) runs with, ``model`` overriding
        its model: its provider, URL, key and model, with this section's timeouts, retries and sampling."""
        update: dict[str, Any] = {"fallbacks": [], "routes": []}
        if endpoint is not None:
            update.update(provider=endpoint.provider, base_url=endpoint.base_url, api_key=endpoint.api_key,
                          model=endpoint.model)
        if isinstance(endpoint, EndpointConfig):
            if endpoint.max_retries is not None:
                update["max_retries"] = endpoint.max_retries
            if endpoint.extra_body is not None:
                update["extra_body"] = dict(endpoint.extra_body)
        if model:
            update["model"] = model
        return self.model_copy(update=update)

    @model_validator(mode="after")
    def _names_resolve(self) -> LLMConfig:
        problems = _name_problems(self)
        if problems:
            # A ValidationError keeps each problem's own key path (llm.routes[0].endpoint) under the section's.
            raise ValidationError.from_exception_data("LLMConfig", problems)
        return self


def _valid_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError("a name is 1-40 letters, digits, _ . or -")
    return value


def _problem(loc: tuple[str | int, ...], message: str, value: Any) -> InitErrorDetails:
    # The message goes in as context: a template would read braces in a value as its own.
    error = PydanticCustomError("llm_names", "{message}", {"message": message})
    return InitErrorDetails(type=error, loc=loc, input=value)


def _name_problems(config: LLMConfig) -> list[InitErrorDetails]:
    """Endpoint and route names: unique, and every name a route gives known."""
    problems: list[InitErrorDetails] = []
    names = [PRIMARY]
    for i, name in enumerate(config.fallback_names()):
        if name in names:
            problems.append(_problem(("fallbacks", i, "name"), "the name is taken; endpoint names must be unique "
                                     f"({PRIMARY!r} is the section's own endpoint)", name))
        names.append(name)
    known = ", ".join(names)
    route_names: set[str] = set()
    own_names: set[str] = set()
    for i, (route, name) in enumerate(zip(config.routes, config.route_names(), strict=True)):
        if name in route_names:
            problems.append(_problem(("routes", i, "name"), "the name is taken; route names must be unique", name))
        route_names.add(name)
        own = route.endpoint
        if isinstance(own, str) and own not in names:
            problems.append(_problem(("routes", i, "endpoint"), f"not an endpoint (known: {known}); name one, or give "
                                     "the route a whole endpoint of its own", own))
        if isinstance(own, EndpointConfig):
            # The route's own endpoint goes by its name, else by the route's: either must be free.
            own_name = own.name or name
            if own_name in names or own_name in own_names:
                loc: tuple[str | int, ...] = ("routes", i, "endpoint", "name") if own.name else ("routes", i, "name")
                problems.append(_problem(loc, "the name is taken by another endpoint; the route's own endpoint goes "
                                         "by it, so give it another name", own_name))
            own_names.add(own_name)
        for j, fallback in enumerate(route.fallbacks or ()):
            if fallback not in names:
                problems.append(_problem(("routes", i, "fallbacks", j), f"not an endpoint (known: {known})", fallback))
    return problems


def route_role_problems(config: LLMConfig, roles: Iterable[str]) -> list[tuple[tuple[str | int, ...], str, str]]:
    """``(key path, message, value)`` for each role a route names that ``roles`` (the access policy's) lacks."""
    defined = sorted(roles)
    known = ", ".join(defined) or "none is defined"
    return [
        (("llm", "routes", i, "roles", j), f"not a role under access.roles (known: {known}); define it there", role)
        for i, route in enumerate(config.routes)
        for j, role in enumerate(route.roles)
        if role not in defined
    ]
