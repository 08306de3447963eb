"""Sections of the chat platforms ``botgateway run`` connects to: terminal, Slack, DingTalk."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from botgateway.config.card import BufferPolicyConfig
from botgateway.config.section import Section

__all__ = [
    "AdapterBase",
    "AdaptersConfig",
    "DingTalkConfig",
    "SessionScope",
    "SlackConfig",
    "TerminalConfig",
]

SessionScope = Literal["thread", "chat", "user"]
"""What one conversation spans: a thread, a whole chat, or one user within a group chat."""


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
    footer_tokens: bool | None = None
    """Show the turn's tokens in this adapter's card footers; ``null`` follows ``card.footer_tokens``."""

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
    footer_tokens: bool | None = True
    """Show the turn's tokens in the footer (the terminal's user is the one who runs the bot); ``null`` follows
    ``card.footer_tokens``."""


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
    """New messages per second in one channel (``chat.postMessage``, and ``chat.startStream`` unless
    ``stream_starts_per_channel`` is off): Slack takes about one a second per channel, threads included."""
    post_burst: int = Field(3, ge=1, le=20)
    """New messages one channel takes at once: at most this many in any ``post_burst / post_rate_per_s`` seconds
    (Slack allows short bursts). The planner spends these slots in the order the questions came."""
    stream_starts_per_channel: bool = True
    """Count each ``chat.startStream`` against its channel's message budget too (Slack does not say whether it does;
    counting it is the safe side). Off: native streams start on the workspace's Tier 2 budget alone."""
    ack_reaction: str = Field("eyes", max_length=100, pattern=r"^[a-z0-9_+'-]*$")
    """Emoji name (no colons) added as a reaction to each question at once, as the sign it was taken: it costs no
    message in the channel, whose queue may be long in an incident (``reactions.add``, its own Tier 3 budget). Empty:
    none. The assistant pane shows its status instead."""
    append_rate_per_min: float = Field(100.0, gt=0)
    """chat.appendStream budget per workspace (Tier 4)."""
    start_stream_rate_per_min: float = Field(20.0, gt=0)
    """chat.startStream budget per workspace (Tier 2): new native streams, their continuation parts and rollovers."""
    stop_stream_rate_per_min: float = Field(20.0, gt=0)
    """chat.stopStream budget per workspace (Tier 2): one per native stream, when its answer ends."""
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
    approval_template_id: str = ""
    """Template of the approval card: variables ``prompt`` (markdown), ``code`` and ``status``, and Approve/Deny
    buttons (action ids ``approve``/``deny``, param ``code``) shown while ``status`` is empty; they call back
    through Stream mode. Empty: approvers reply ``approve 4821`` / ``deny 4821`` instead."""
    answer_buttons: bool = False
    """The AI card template (``card_template_id``) has a final answer's buttons: Refresh, 👍 and 👎 (action ids
    ``refresh``, ``feedback_up``, ``feedback_down``, each sending the param ``turn_id``), shown while the variable
    ``turn_id`` is set, which the gateway sets on a final answer; they call back through Stream mode. Without them,
    ``refresh`` / ``刷新`` typed in the chat refreshes the newest answer."""
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
    callback_max_skew_s: float = Field(300.0, gt=0, le=1800)
    """HTTP callback: largest accepted difference between a request's ``timestamp`` and our clock, in seconds.

    DingTalk signs only the timestamp, so this is how long a captured signature
    could be tried; each one is accepted once (remembered for
    ``memory.dedupe_ttl_s``, which must be at least twice this)."""
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
            fields = (("client_id", self.client_id), ("client_secret", self.client_secret.get_secret_value()))
            missing = [name for name, value in fields if not value]
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
