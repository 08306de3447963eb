"""What a tool is and what one call of it gives back: the contract between the loop, the registry and the tools."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from botgateway.artifacts import Artifact
from botgateway.grant import Grant
from botgateway.principal import Principal

__all__ = [
    "PermissionHook",
    "RecentOutcomes",
    "Source",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolOutput",
    "local_user",
    "one_line",
]


@dataclass(frozen=True)
class ToolContext:
    """Who asked, and from where; tools and the permission hook use it."""

    user_id: str = ""
    """Platform user id of the asker (Slack user id, DingTalk staff id, local login)."""
    user_name: str = ""
    """Display name of the asker, when the platform gave one."""
    platform: str = "cli"
    """Adapter the question came from: ``slack``, ``dingtalk``, ``terminal``, ``cli``."""
    conversation_id: str = ""
    """Our conversation key (the memory scope)."""
    chat_id: str = ""
    """Platform chat/channel id."""
    is_group: bool = False
    """True in a group chat or channel, False in a direct chat."""
    roles: frozenset[str] = frozenset()
    """Roles granted by the gateway's access policy (for example ``admin``)."""
    principal: Principal | None = None
    """The asker's platform-qualified identity (for resource scopes and audit)."""
    grant: Grant | None = None
    """What the access policy grants the asker here; ``None`` (a command run outside the gateway) restricts nothing."""
    fresh: bool = False
    """Bypass every cache: the asker pressed Refresh, and wants data fetched now."""

    def may_use(self, tool_name: str) -> bool:
        """Whether ``tool_name`` may be offered to the model and run for this asker here."""
        return self.grant is None or self.grant.offers(tool_name)


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where one piece of a tool result came from, and how old it is: the answer's provenance."""

    provider: str
    """Provider key: ``aliyun``, ``tencent``, ``aws``, ``inventory``, ``mcp:<server>``."""
    label: str
    """Its human name: "Alibaba Cloud", "static inventory", "MCP grafana"."""
    account: str = ""
    """The configured account's name (``prod``), when the provider has accounts."""
    region: str = ""
    """The region or data centre asked (``cn-hangzhou``), when one."""
    api: str = ""
    """The API called (``DescribeInstances``, an MCP tool's name), when known."""
    fetched_at: float = 0.0
    """Unix time the data was fetched from the provider (for a cached copy: when the copy was made)."""
    cached: bool = False
    """The data came from a cache, not from the provider just now."""


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    """What a tool produced: its rendering for the model, one line for the card, and the data behind them."""

    content: str
    """What the model reads: the rendering of :attr:`data` when there is data. Capped by the registry."""
    summary: str
    """One short line for the card's status line ("2 instances found")."""
    data: Any = None
    """The result as JSON-ready data (servers found, what was searched, which sources failed); ``None`` for text-only tools."""
    sources: tuple[Source, ...] = ()
    """Where the data came from and how old it is (empty: the tool does not say)."""
    artifacts: tuple[Artifact, ...] = ()
    """Pictures drawn for the card (a chart of the series); the model reads only :attr:`content`, which names them."""


class ToolError(Exception):
    """A failure the tool wants the model (and the card) to see in plain words."""


class ToolArgumentError(ToolError):
    """The model's arguments do not fit the tool's schema."""


@runtime_checkable
class Tool(Protocol):
    """Anything the model can call.

    A tool may also say it is read-only: an attribute ``read_only = True``
    means it only looks things up and changes nothing, so a turn nobody is
    watching (an alert's investigation, a scheduled report) may offer it. It
    is optional and read as ``getattr(tool, "read_only", False)``: a tool that
    does not say is not read-only.
    """

    name: str
    """Unique name offered to the model (``[a-zA-Z0-9_-]{1,64}``)."""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any]
    """JSON schema of the arguments object."""
    timeout_s: float | None
    """Per-tool timeout; ``None`` uses the registry default."""

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the tool. Raise :class:`ToolError` for a failure the model should see."""
        ...


def local_user() -> str:
    """The login name of whoever runs a command here (``cli`` where the system has none, as in some containers)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "cli"


PermissionHook = Callable[[Tool, ToolContext], Awaitable[str | None]]
"""Returns ``None`` to allow the call, or the reason it is refused."""


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """The result of one call as the loop sees it."""

    ok: bool
    """False on any failure (unknown tool, bad JSON, bad arguments, refusal, timeout, exception)."""
    content: str
    """Text sent back to the model as the tool result (an error note on failure)."""
    summary: str
    """One line for the card."""
    duration_s: float
    """Wall time in seconds."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The parsed arguments (empty when they were not valid JSON)."""
    data: Any = None
    """The tool's JSON-ready data behind :attr:`content` (see :attr:`ToolOutput.data`); ``None`` on failure."""
    error: str = ""
    """Why the call failed, in plain words (:attr:`content` is ``"Error: "`` and this, capped); empty when ok."""
    source: str = "tool"
    """Who wrote :attr:`content`: ``tool`` (the tool's own output, external data) or ``gateway`` (our note on a failure)."""
    sources: tuple[Source, ...] = ()
    """Where the data came from and how old it is (:attr:`ToolOutput.sources`); empty on failure or when unknown."""
    artifacts: tuple[Artifact, ...] = ()
    """Pictures the tool drew for the card (:attr:`ToolOutput.artifacts`); empty on failure."""


class RecentOutcomes(Protocol):
    """The outcomes of recent calls, found by the text the model was sent."""

    def recall(self, content: str) -> ToolOutcome | None:
        """The outcome of a recent call whose model-facing text is exactly ``content``; ``None`` when not remembered."""
        ...


def one_line(text: str, limit: int = 80) -> str:
    """The first line of ``text``, cut to ``limit`` characters: how a result becomes a card's status line."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
