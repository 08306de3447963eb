"""Configuration: ``config.yaml`` loaded into pydantic models.

Strings may hold ``${VAR}`` (required) or ``${VAR:-default}``. Unknown keys and
wrong types are rejected with the key's path and a hint; secrets are
``SecretStr`` so they never print. :func:`load_config` raises
:class:`ConfigError` carrying every problem at once.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)


class ConfigError(Exception):
    """The configuration is unusable; ``problems`` lists each issue with its key path."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(problems))


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, defaults are validated too, and a loaded config is immutable."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)


# --- LLM ----------------------------------------------------------------------

ProviderName = Literal[
    "auto", "demo", "openai", "deepseek", "qwen", "dashscope", "moonshot", "zhipu",
    "doubao", "ark", "ollama", "vllm", "custom",
]

PROVIDER_PRESETS: dict[str, tuple[str, str]] = {
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
"""Base URL and default model per provider preset; an explicit ``base_url`` wins."""

KEYLESS_PROVIDERS = {"demo", "ollama", "vllm", "custom"}

DEFAULT_SYSTEM_PROMPT = (
    "You are an ops assistant in a team chat. Use the tools to look up servers and "
    "infrastructure before answering; never invent hosts, IPs or states. Answer briefly, "
    "in the language of the question, with the facts the tools returned."
)


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


# --- logging, memory, gateway ------------------------------------------------------


class LogConfig(Section):
    """Structured logging."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written."""
    format: Literal["auto", "json", "console"] = "auto"
    """``json`` lines for production, ``console`` for people; ``auto`` picks console on a terminal."""
    file: str | None = None
    """Write logs to this file instead of stderr (the terminal chat sets this by default)."""


class MemoryConfig(Section):
    """Conversation history, dedupe keys, open cards and audit records."""

    store: Literal["sqlite", "redis"] = "sqlite"
    """``sqlite`` (embedded, one process) or ``redis`` (several replicas)."""
    sqlite_path: str = "data/botgateway.db"
    """SQLite file, created on first use."""
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    """Redis URL (may carry a password, so it is secret)."""
    redis_prefix: str = "botgateway:"
    """Key prefix, so several deployments can share one Redis."""
    max_history_tokens: int = Field(6000, ge=200)
    """Token budget of the history sent to the model; older turns are summarized past it."""
    keep_recent_turns: int = Field(2, ge=1)
    """Turns never summarized away."""
    dedupe_ttl_s: float = Field(3600.0, gt=0)
    """How long a platform message id is remembered to drop redeliveries."""
    history_ttl_days: float = Field(30.0, gt=0)
    """Conversations idle longer than this are forgotten."""


class PhasePolicy(Section):
    """When pending text of one phase is pushed to the card."""

    min_chars: int = Field(20, ge=1)
    """Flush once this many new characters are pending…"""
    min_interval_s: float = Field(0.3, ge=0)
    """…and at least this long has passed since the last update."""
    max_wait_s: float = Field(1.0, gt=0)
    """Flush anything pending after this long, even if the stream stalls."""


class BufferPolicyConfig(Section):
    """Per-phase update pacing; defaults are the product's reference policy."""

    thinking: PhasePolicy = PhasePolicy(min_chars=20, min_interval_s=0.3, max_wait_s=1.0)
    """While the model reasons."""
    tool: PhasePolicy = PhasePolicy(min_chars=5, min_interval_s=0.1, max_wait_s=0.5)
    """While tools run (status lines)."""
    answer: PhasePolicy = PhasePolicy(min_chars=20, min_interval_s=0.3, max_wait_s=1.0)
    """While the answer streams."""


class CardConfig(Section):
    """What the card shows."""

    show_thought: bool = True
    """Show the tail of the model's reasoning, muted, until the answer starts."""
    thought_chars: int = Field(200, ge=0)
    """How much of the reasoning tail to show."""
    footer: bool = True
    """Show round n/N · tokens · elapsed."""
    final_deadline_s: float = Field(30.0, gt=0)
    """How long the final update is retried before it is delivered as a new message."""
    late_close_s: float = Field(300.0, ge=0)
    """After such a fallback, how long the card itself keeps being closed in the background
    (ending with a note pointing at the message); 0 leaves it to start-up recovery."""


SessionScope = Literal["thread", "chat", "user"]


class GatewayConfig(Section):
    """Turn scheduling and access."""

    max_queued_per_conversation: int = Field(3, ge=0)
    """Questions waiting behind a running turn in one conversation; more are refused politely."""
    max_concurrent_turns: int = Field(64, ge=1)
    """Turns running at once across all conversations."""
    admins: list[str] = Field(default_factory=list)
    """Platform user ids allowed to stop anyone's turn."""
    stop_words: list[str] = Field(default_factory=lambda: ["stop", "停止", "/stop"])
    """A message that is exactly one of these stops the asker's running turn."""
    clear_words: list[str] = Field(default_factory=lambda: ["/clear", "/new", "新对话", "清空对话"])
    """A message that is exactly one of these starts a new conversation (forgets its history)."""
    heartbeat_s: float = Field(10.0, gt=0)
    """How often a running process tells the store it is alive (its open cards are then left alone)."""
    instance_ttl_s: float = Field(30.0, gt=0)
    """A process silent this long counts as crashed: other processes finalize its open cards."""
    recover_interval_s: float = Field(30.0, gt=0)
    """How often a running process looks for cards left open by a crashed process."""

    @model_validator(mode="after")
    def _ttl_outlives_heartbeats(self) -> GatewayConfig:
        if self.instance_ttl_s <= self.heartbeat_s:
            raise ValueError(
                f"instance_ttl_s ({self.instance_ttl_s:g}) must be longer than heartbeat_s ({self.heartbeat_s:g}), "
                "or live processes would look crashed between heartbeats; use about three heartbeats"
            )
        return self


# --- adapters -------------------------------------------------------------------


class AdapterBase(Section):
    """Settings shared by every adapter."""

    enabled: bool | Literal["auto"] = "auto"
    """Start this adapter with ``botgateway run``; ``auto`` starts it when its credentials are set."""
    locale: Literal["en", "zh-CN"] = "en"
    """Language of the card's fixed strings."""
    session_scope: SessionScope = "thread"
    """One conversation per thread, per chat, or per user within a group chat."""
    policy: BufferPolicyConfig = BufferPolicyConfig()
    """Update pacing for this adapter's cards."""

    def has_credentials(self) -> bool:
        """Whether the settings needed to connect are present (used by ``enabled: auto``)."""
        return True

    @property
    def active(self) -> bool:
        """True when ``botgateway run`` should start this adapter."""
        return self.has_credentials() if self.enabled == "auto" else bool(self.enabled)


class TerminalConfig(AdapterBase):
    """The interactive terminal chat (``botgateway chat``)."""

    enabled: bool | Literal["auto"] = True
    """Start the terminal chat with ``botgateway run`` (when stdin is a terminal)."""


class SlackConfig(AdapterBase):
    """Slack (slack-bolt AsyncApp)."""

    mode: Literal["socket", "http"] = "socket"
    """Socket Mode (app token) or the HTTP Events API (signing secret)."""
    bot_token: SecretStr = SecretStr("")
    """``xoxb-…`` bot token."""
    app_token: SecretStr = SecretStr("")
    """``xapp-…`` app-level token for Socket Mode."""
    signing_secret: SecretStr = SecretStr("")
    """Signing secret for HTTP mode."""
    http_host: str = "0.0.0.0"
    """HTTP mode listen address."""
    http_port: int = Field(3000, ge=1, le=65535)
    """HTTP mode listen port."""
    http_path: str = "/slack/events"
    """HTTP mode events path."""
    api_base_url: str = "https://slack.com/api/"
    """Web API base URL (tests point it at a fake)."""
    streaming: Literal["auto", "native", "edit"] = "auto"
    """native: chat.startStream; edit: placeholder + chat.update; auto: native, else edit."""
    ignore_bots: bool = True
    """Ignore messages from other bots."""
    suggested_prompts: list[dict[str, str]] = Field(
        default_factory=lambda: [
            {"title": "Find a server", "message": "Which server is 10.0.1.100?"},
            {"title": "Stopped servers", "message": "List the stopped servers"},
        ]
    )
    """Prompts offered when a user opens the assistant pane (``title`` and ``message``)."""
    update_rate_per_min: float = Field(50.0, gt=0)
    """chat.update budget per workspace, shared by all cards."""
    post_rate_per_s: float = Field(1.0, gt=0)
    """chat.postMessage budget per channel."""
    append_rate_per_min: float = Field(100.0, gt=0)
    """chat.appendStream budget per workspace (Tier 4)."""
    start_stream_rate_per_min: float = Field(20.0, gt=0)
    """chat.startStream budget per workspace (Tier 2): new native streams, their continuation parts and rollovers."""
    rate_window_s: float = Field(60.0, gt=0)
    """The window the ``*_per_min`` budgets are counted over (Slack counts per minute; tests shrink it)."""
    stop_button: bool = True
    """Show a Stop button while an answer is live (edit mode: on the message; native: in a control message below it)."""
    status_text: str = ""
    """Assistant-pane status while working (empty: "is thinking…" in the card's language)."""
    max_live_bytes: int = Field(3500, ge=500)
    """Live text past this continues in a new thread message."""
    stream_rollover_s: float = Field(240.0, gt=0)
    """A native stream older than this is stopped and continued in a new one."""

    def has_credentials(self) -> bool:
        """A bot token plus the app token (socket) or signing secret (http)."""
        second = self.app_token if self.mode == "socket" else self.signing_secret
        return bool(self.bot_token.get_secret_value() and second.get_secret_value())

    @model_validator(mode="after")
    def _enabled_needs_credentials(self) -> SlackConfig:
        if self.enabled is True and not self.has_credentials():
            second = "app_token" if self.mode == "socket" else "signing_secret"
            missing = [name for name in ("bot_token", second) if not getattr(self, name).get_secret_value()]
            raise ValueError(
                f"enabled: true but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} empty "
                f"(mode: {self.mode}); set {'it' if len(missing) == 1 else 'them'} with ${{ENV_VAR}}, or use enabled: auto"
            )
        return self


class DingTalkConfig(AdapterBase):
    """DingTalk (dingtalk-stream + card OpenAPI)."""

    locale: Literal["en", "zh-CN"] = "zh-CN"
    """Language of the card's fixed strings."""
    mode: Literal["stream", "http"] = "stream"
    """Stream mode (websocket) or the outgoing-robot HTTP callback."""
    client_id: str = ""
    """AppKey / client id of the robot's app."""
    client_secret: SecretStr = SecretStr("")
    """AppSecret / client secret."""
    robot_code: str = ""
    """Robot code (defaults to the client id)."""
    card_template_id: str = ""
    """AI card template id; empty means plain markdown replies."""
    card_content_key: str = "content"
    """The template's markdown variable that receives the text."""
    api_base_url: str = "https://api.dingtalk.com"
    """OpenAPI base URL (tests point it at a fake)."""
    oapi_base_url: str = "https://oapi.dingtalk.com"
    """Legacy OpenAPI base URL (token, gateway)."""
    http_host: str = "0.0.0.0"
    """HTTP callback listen address."""
    http_port: int = Field(8090, ge=1, le=65535)
    """HTTP callback listen port."""
    http_path: str = "/dingtalk/callback"
    """HTTP callback path."""
    qps: float = Field(20.0, gt=0)
    """Card API calls per second for the whole app."""
    throttle_window_s: float = Field(60.0, gt=0)
    """Window in which repeated throttling is counted."""
    throttle_degrade_after: int = Field(5, ge=1)
    """Throttle answers in the window that switch new turns to markdown replies."""
    degrade_for_s: float = Field(300.0, gt=0)
    """How long to stay on markdown replies after degrading."""
    max_card_chars: int = Field(3000, ge=200)
    """Safe answer size of one card; longer answers continue in a second card."""

    def has_credentials(self) -> bool:
        """The app's client id and secret."""
        return bool(self.client_id and self.client_secret.get_secret_value())

    @model_validator(mode="after")
    def _enabled_needs_credentials(self) -> DingTalkConfig:
        if self.enabled is True and not self.has_credentials():
            missing = [name for name, value in (("client_id", self.client_id), ("client_secret", self.client_secret.get_secret_value())) if not value]
            raise ValueError(
                f"enabled: true but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} empty; "
                f"set {'it' if len(missing) == 1 else 'them'} with ${{ENV_VAR}}, or use enabled: auto"
            )
        return self


class AdaptersConfig(Section):
    """Which platforms ``botgateway run`` starts."""

    terminal: TerminalConfig = TerminalConfig()
    """The terminal chat."""
    slack: SlackConfig = SlackConfig()
    """Slack."""
    dingtalk: DingTalkConfig = DingTalkConfig()
    """DingTalk."""


# --- tools ------------------------------------------------------------------------


class CloudAccount(Section):
    """One cloud account: credentials and the regions to search."""

    name: str = "default"
    """Label shown in results ("prod", "staging")."""
    access_key_id: SecretStr = SecretStr("")
    """Access key id; empty means the SDK's usual environment variables."""
    access_key_secret: SecretStr = SecretStr("")
    """Access key secret; empty means the SDK's usual environment variables."""
    regions: list[str] = Field(default_factory=list)
    """Regions to search."""
    endpoint: str | None = None
    """Override the API endpoint (private link, tests)."""


class CloudProviderConfig(Section):
    """A cloud provider's accounts."""

    enabled: bool = False
    """Offer this provider's tools to the model."""
    accounts: list[CloudAccount] = Field(default_factory=list)
    """Accounts to search, concurrently."""
    timeout_s: float = Field(10.0, gt=0)
    """Per-request timeout."""
    cache_ttl_s: float = Field(60.0, ge=0)
    """How long results are cached (0 disables)."""


class InventoryConfig(Section):
    """The static inventory of on-prem hosts."""

    enabled: bool = True
    """Offer the static inventory."""
    path: str = "tools/sample_inventory.yaml"
    """YAML or CSV file of hosts."""


class McpServerConfig(Section):
    """One MCP server whose tools are offered, namespaced by ``name``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    """Namespace prefix of the server's tools."""
    command: str | None = None
    """stdio transport: the command to start."""
    args: list[str] = Field(default_factory=list)
    """stdio transport: its arguments."""
    env: dict[str, SecretStr] = Field(default_factory=dict)
    """stdio transport: extra environment."""
    url: str | None = None
    """streamable-HTTP transport: the server URL."""
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    """streamable-HTTP transport: request headers (tokens)."""
    allow: list[str] = Field(default_factory=list)
    """Offer only these tool names (empty: all)."""
    deny: list[str] = Field(default_factory=list)
    """Never offer these tool names."""
    timeout_s: float = Field(30.0, gt=0)
    """Per-call timeout."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("set exactly one of command (stdio) or url (streamable HTTP)")
        return self


class ToolsConfig(Section):
    """What the model can call."""

    default_timeout_s: float = Field(20.0, gt=0)
    """Timeout of a tool call unless the tool sets its own."""
    max_result_chars: int = Field(8000, ge=200)
    """Tool output longer than this is truncated with a note to the model."""
    inventory: InventoryConfig = InventoryConfig()
    """Static inventory."""
    aliyun: CloudProviderConfig = CloudProviderConfig()
    """Alibaba Cloud ECS."""
    tencent: CloudProviderConfig = CloudProviderConfig()
    """Tencent Cloud CVM."""
    aws: CloudProviderConfig = CloudProviderConfig()
    """AWS EC2."""
    mcp: list[McpServerConfig] = Field(default_factory=list)
    """MCP servers."""


class MetricsConfig(Section):
    """Prometheus metrics."""

    enabled: bool = False
    """Serve Prometheus metrics on ``http://host:port/metrics``."""
    host: str = "0.0.0.0"
    """Listen address of the metrics endpoint."""
    port: int = Field(9464, ge=0, le=65535)
    """Port of the metrics endpoint (0 picks a free one)."""


class Config(Section):
    """The whole configuration file."""

    log: LogConfig = LogConfig()
    """Logging."""
    llm: LLMConfig = LLMConfig()
    """The model."""
    memory: MemoryConfig = MemoryConfig()
    """History and state."""
    card: CardConfig = CardConfig()
    """The card."""
    gateway: GatewayConfig = GatewayConfig()
    """Turn scheduling and access."""
    adapters: AdaptersConfig = AdaptersConfig()
    """Platforms."""
    tools: ToolsConfig = ToolsConfig()
    """Tools."""
    metrics: MetricsConfig = MetricsConfig()
    """Metrics."""


# --- loading ----------------------------------------------------------------------

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(value: Any, env: Mapping[str, str], path: str = "", problems: list[str] | None = None) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of ``value``.

    A missing variable without a default is recorded in ``problems`` with its path.
    A string that is exactly one reference to an unset variable with an empty default
    becomes ``None``-free empty string, so optional secrets stay optional.
    """
    problems = problems if problems is not None else []
    if isinstance(value, str):
        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env and env[name] != "":
                return env[name]
            if default is not None:
                return default
            problems.append(f"{path or '<root>'}: environment variable {name} is not set (use ${{{name}:-default}} to make it optional)")
            return ""

        return _VAR.sub(repl, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The section model that holds the key at ``loc`` (for 'did you mean' hints)."""
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model


_MAY_HOLD_SECRET = re.compile(r"secret|token|key|passw|auth|headers|env|url", re.IGNORECASE)
"""Paths whose wrong values are not echoed in error messages: they may be (part of) a credential."""


def format_errors(error: ValidationError) -> list[str]:
    """One line per problem: dotted key path, what is wrong, and a hint."""
    problems = []
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
        kind = item["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc)
            known = list(model.model_fields) if model else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(known)}" if known else "remove it")
            problems.append(f"{path}: unknown key ({hint})")
        elif kind == "missing":
            problems.append(f"{path}: required key is missing")
        else:
            got = item.get("input")
            shown = "" if isinstance(got, (dict, list)) or _MAY_HOLD_SECRET.search(path) else f" (got {got!r})"
            msg = item["msg"].removeprefix("Value error, ")
            problems.append(f"{path or '<root>'}: {msg}{shown}")
    return problems


def parse_config(data: Any, env: Mapping[str, str] | None = None, source: str = "config") -> Config:
    """Validate already-parsed YAML; raises :class:`ConfigError` with every problem."""
    env = os.environ if env is None else env
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(["<root>: the file must be a mapping of sections (llm:, adapters:, …)"], source)
    problems: list[str] = []
    data = substitute_env(data, env, problems=problems)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems + format_errors(exc), source) from None
    if problems:
        raise ConfigError(problems, source)
    return config


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate ``path`` (``config.yaml`` by default; defaults if it does not exist and was not named)."""
    if path is None:
        candidate = Path("config.yaml")
        if not candidate.exists():
            return parse_config({}, env, "defaults")
        path = candidate
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"file not found (looked in {path.resolve().parent})"], str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read the file: {exc.strerror}"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}invalid YAML: {problem}"], str(path)) from None
    return parse_config(data, env, str(path))
