"""The ``access:`` section: who may ask, where, with which tools, over which resources.

Evaluated by :mod:`botgateway.access.policy`. Ids are platform-qualified
(``slack:U0123``, ``slack:S0ONCALL`` for a user group, ``dingtalk:<staffId>``,
``local:<login>``); a member may end in ``*`` (``slack:*``: every Slack user).
Tool patterns are globs (``search_*``); a pattern starting with ``!`` removes
what it matches (``["*", "!*__*"]``: every tool except MCP tools, whose names
are ``<server>__<tool>``). Without the section, :data:`DEFAULT_ACCESS` applies.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from botgateway.config.section import Section

__all__ = [
    "DEFAULT_ACCESS",
    "AccessConfig",
    "ApprovalsConfig",
    "ChannelsConfig",
    "GuardrailConfig",
    "RoleConfig",
    "RoleLimitsConfig",
    "ScopeConfig",
]

_QUALIFIED = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")
"""``platform:id``; the id part may be a glob (``slack:*``)."""
_TOOL_PATTERN = re.compile(r"^!?[A-Za-z0-9_*?\[\]-]{1,80}$")
"""A tool-name glob, optionally negated with a leading ``!``."""
_METRIC_MATCHER = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*(=|!=|=~|!~)"(?:[^"\\\n]|\\.)*"$')
"""A PromQL label matcher, ``name op "value"`` (``env!="prod"``); the metric tools parse it for real."""
NONE_ROLE = "none"
"""``default_role: none`` refuses anyone no role lists."""
DENY = "deny"
"""``external_users: deny`` refuses users of other organisations."""


def _qualified(values: list[str], what: str) -> list[str]:
    for value in values:
        if not _QUALIFIED.match(value):
            raise ValueError(f"{what} {value!r} is not a qualified id like 'slack:U0123' or 'dingtalk:cid…'")
    return values


def _metric_matchers(values: list[str]) -> list[str]:
    for value in values:
        if not _METRIC_MATCHER.match(value):
            raise ValueError(f'metric matcher {value!r} is not a PromQL label matcher like env!="prod" or '
                             f'team=~"web|db" (a label name, one of = != =~ !~, and a double-quoted value)')
    return values


def _patterns(values: list[str]) -> list[str]:
    for value in values:
        if not _TOOL_PATTERN.match(value):
            raise ValueError(f"tool pattern {value!r} may hold only letters, digits, _ - and the globs * ? [ ], after an optional !")
    return values


class ScopeConfig(Section):
    """A slice of resources; empty keys match anything."""

    provider: str = ""
    """``aliyun``, ``tencent``, ``aws``, ``kubernetes`` or ``inventory``; empty: any."""
    account: str = ""
    """An account's ``name`` under that provider; empty: any."""
    region: str = ""
    """A region; empty: any."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tag values required; ``"!prod"`` means anything but ``prod``."""
    metric_matchers: list[str] = Field(default_factory=list)
    """PromQL label matchers (``env!="prod"``, ``team=~"web|db"``) added to every selector of the scope's metric
    queries; a scoped role may query Prometheus only when each of its scopes carries the same set."""

    _metric_matchers = field_validator("metric_matchers")(lambda cls, v: _metric_matchers(v))


class RoleLimitsConfig(Section):
    """A role's own per-principal limits, overriding the top-level ``limits:`` section; unset inherits it, 0 is no limit."""

    turns_per_minute: int | None = Field(None, ge=0)
    """Questions one member may start per minute."""
    concurrent_turns: int | None = Field(None, ge=0)
    """Questions of one member in progress at once."""
    tokens_per_day: int | None = Field(None, ge=0)
    """Model tokens one member may use per day."""


class RoleConfig(Section):
    """A role: who holds it, what it may call, over which resources."""

    members: list[str] = Field(default_factory=list)
    """Principal ids or group ids (``slack:U01ADMIN``, ``slack:S0ONCALL``, ``dingtalk:dept:42``, ``slack:*``)."""
    tools: list[str] = Field(default_factory=list)
    """Tool-name globs offered to the role; ``!glob`` removes."""
    scopes: list[ScopeConfig] = Field(default_factory=list)
    """Resources the role's tools may touch; empty: unrestricted."""
    approve: bool = False
    """Members may approve calls that need an approval."""
    limits: RoleLimitsConfig = RoleLimitsConfig()
    """Per-member limits of this role; unset fields inherit the top-level ``limits:`` section."""

    _members = field_validator("members")(lambda cls, v: _qualified(v, "member"))
    _tools = field_validator("tools")(lambda cls, v: _patterns(v))


class ChannelsConfig(Section):
    """Where the bot answers at all."""

    allow: list[str] = Field(default_factory=list)
    """Qualified channel ids (``slack:C0OPS``, ``dingtalk:cid…``); empty: wherever the bot is invited."""
    direct_messages: bool = True
    """Whether 1:1 chats with the bot are answered."""

    _allow = field_validator("allow")(lambda cls, v: _qualified(v, "channel"))


class GuardrailConfig(Section):
    """A channel's ceiling, intersected with the asker's role."""

    tools: list[str] = Field(default_factory=list)
    """Tool-name globs that may be offered in the channel at all."""

    _tools = field_validator("tools")(lambda cls, v: _patterns(v))


class ApprovalsConfig(Section):
    """Calls that wait for a person's approval (an approver presses Approve or Deny on the card)."""

    tools: list[str] = Field(default_factory=list)
    """Tool-name globs whose calls need an approval (MCP tools annotated destructive need one anyway)."""
    timeout_s: float = Field(300.0, gt=0, le=86400)
    """How long a call waits for a decision; then it is denied. Not counted against ``llm.turn_timeout_s``."""
    four_eyes: bool = False
    """An approver may not approve a call they asked for themselves; another approver must."""

    _tools = field_validator("tools")(lambda cls, v: _patterns(v))


class AccessConfig(Section):
    """The access policy."""

    default_role: str = NONE_ROLE
    """Role of anyone no role lists; ``none`` refuses them with a note."""
    external_users: str = DENY
    """Users of other organisations (Slack Connect): ``deny``, or the role they get."""
    local_admin: bool = True
    """The terminal's own user (``local:<login>``, who holds the config anyway) has every tool."""
    channels: ChannelsConfig = ChannelsConfig()
    """Where the bot answers."""
    roles: dict[str, RoleConfig] = Field(default_factory=dict)
    """Roles by name."""
    guardrails: dict[str, GuardrailConfig] = Field(default_factory=dict)
    """Per-channel tool ceilings, by qualified channel id (globs allowed: ``dingtalk:*``)."""
    approvals: ApprovalsConfig = ApprovalsConfig()
    """Calls that need an approval."""
    group_cache_s: float = Field(300.0, gt=0, le=86400)
    """How long the members of a Slack user group, or an asker's DingTalk departments, are trusted before they
    are looked up again (only groups some role lists are ever looked up)."""

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        for name in roles:
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name) or name in (NONE_ROLE, DENY):
                raise ValueError(f"role name {name!r} must be 1-40 letters, digits, _ or -, and not 'none' or 'deny'")
        return roles

    @field_validator("guardrails")
    @classmethod
    def _guardrail_keys(cls, guardrails: dict[str, GuardrailConfig]) -> dict[str, GuardrailConfig]:
        _qualified(list(guardrails), "guardrail channel")
        return guardrails

    @model_validator(mode="after")
    def _known_roles(self) -> AccessConfig:
        known = ", ".join(sorted(self.roles)) or "no roles are defined"
        if self.default_role != NONE_ROLE and self.default_role not in self.roles:
            raise ValueError(f"default_role {self.default_role!r} is not a role under access.roles ({known}); or use 'none'")
        if self.external_users != DENY and self.external_users not in self.roles:
            raise ValueError(f"external_users {self.external_users!r} is not a role under access.roles ({known}); or use 'deny'")
        return self


DEFAULT_ACCESS = AccessConfig(
    default_role="viewer",
    external_users=DENY,
    roles={
        # The built-in tools only look things up; MCP tools may write, so no one gets them until a role lists them.
        "viewer": RoleConfig(tools=["*", "!*__*"]),
    },
)
"""The policy without an ``access`` section: everyone of the organisation reads through the built-in tools
(``viewer``), users of other organisations are refused, the terminal's user has every tool (``local_admin``)."""
