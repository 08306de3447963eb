"""Build what the model can call from ``config.tools``.

:func:`build_toolset` is the entry point the composition root resolves by
name (``tools.catalog:build_toolset``). Configuration mistakes that make a
provider unusable (SDK missing, no account or region, a broken inventory
file) raise :class:`~botgateway.config.ConfigError` listing every problem; an
MCP server that cannot start is only reported in :attr:`Toolset.problems`.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget
from botgateway.config import ConfigError, ToolsConfig
from botgateway.config.problems import plain_word
from botgateway.tooling import Tool
from tools.cloud_tools import IP_TOOLS, IpAddress, build_cloud_tools
from tools.estate.fanout import Estate
from tools.mcp import RECONNECT_BACKOFF, McpManager, ToolSink
from tools.metrics.alert_graphs import PrometheusAlertGrapher
from tools.providers.base import Provider
from tools.providers.cloud import CloudProvider
from tools.providers.sdk import require_sdk
from tools.toolsets.assembly import build_estate, estate_sources, estate_tools
from tools.toolsets.numbers import NumberTools, build_number_tools
from tools.toolsets.readiness import ToolsetStatus, probe_prometheus, probe_sources, toolset_status

log = structlog.get_logger(__name__)


@dataclass
class Toolset:
    """The tools of one gateway process, and what must be closed with it."""

    tools: list[Tool]
    """Every tool to offer the model."""
    providers: list[str]
    """Enabled server providers, in order (``["inventory", "aliyun"]``)."""
    lookup_tools: list[str]
    """The per-provider IP lookup tool names, in provider order."""
    problems: list[str] = field(default_factory=list)
    """Non-fatal start-up problems (an MCP server that did not start; it is retried in the background)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Known tool names that are not offered, with the reason (provider not configured)."""
    provider_objects: list[Provider] = field(default_factory=list, repr=False)
    """The provider instances (for closing, and for tests)."""
    mcp: McpManager | None = field(default=None, repr=False)
    """The MCP manager, when servers are configured."""
    estate: Estate | None = field(default=None, repr=False)
    """The estate fan-out behind the resource tools (its sources are closed with the toolset)."""
    config: ToolsConfig | None = field(default=None, repr=False)
    """The configuration it was built from (for the readiness report)."""
    numbers: NumberTools | None = field(default=None, repr=False)
    """The metric and cost tools' clients (closed with the toolset)."""

    async def readiness(self, *, probe: bool = False) -> list[ToolsetStatus]:
        """Every toolset with its prerequisites; ``probe``: also call each source's API once."""
        if self.config is None:
            return []
        probes = await probe_sources(self.estate) if probe and self.estate is not None else []
        if probe and self.numbers is not None and self.numbers.prometheus is not None:
            probes.append(await probe_prometheus(self.numbers.prometheus))
        return toolset_status(self.config, self.estate, probes)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if offered."""
        return next((t for t in self.tools if t.name == name), None)

    def add(self, tool: Tool) -> None:
        """Offer ``tool`` (an MCP server's, once it is up); one of the same name is replaced."""
        for i, known in enumerate(self.tools):
            if known.name == tool.name:
                self.tools[i] = tool
                return
        self.tools.append(tool)

    def attach(self, registry: ToolSink) -> None:
        """Have tools of MCP servers that come up after start-up added to ``registry`` as they do.

        The composition root calls this right after building the registry from
        :attr:`tools`; tools already known are (re)added at once, so nothing
        that came up in between is lost.
        """
        if self.mcp is not None:
            self.mcp.attach(registry)

    def check_unavailable_arguments(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Validate arguments of a known but unconfigured lookup tool, so a typo is named before the config."""
        if name not in self.unavailable or name not in {tool_name for tool_name, _ in IP_TOOLS.values()}:
            return None
        unknown = sorted(set(arguments) - {"ip"})
        if unknown:
            return f"invalid arguments: {', '.join(unknown)}: unknown argument"
        if "ip" not in arguments:
            return "invalid arguments: ip: required"
        try:
            TypeAdapter(IpAddress).validate_python(arguments["ip"])
        except ValidationError as exc:
            return f"invalid arguments: ip: {'; '.join(e['msg'] for e in exc.errors())}"
        return None

    def alert_grapher(self) -> PrometheusAlertGrapher | None:
        """What draws alert cards' graphs (the configured Prometheus, charts on); None otherwise."""
        return self.numbers.alert_grapher() if self.numbers is not None else None

    async def aclose(self) -> None:
        """Close MCP sessions and provider thread pools."""
        if self.mcp is not None:
            await self.mcp.aclose()
        if self.numbers is not None:
            await self.numbers.aclose()
        for source in self.estate.sources if self.estate is not None else ():
            try:
                await source.aclose()
            except Exception:  # closing must finish for every source
                log.exception("estate_source_close_failed", provider=source.name)
        for provider in self.provider_objects:
            try:
                await provider.aclose()
            except Exception:  # closing must finish for every provider
                log.exception("provider_close_failed", provider=provider.name)


def _cloud_classes() -> dict[str, tuple[type[CloudProvider], Sequence[str]]]:
    # Imported here so that a provider module's own import never needs its SDK.
    from tools.providers import aliyun, aws, tencent

    return {
        "aliyun": (aliyun.AliyunProvider, aliyun.SDK_MODULES),
        "tencent": (tencent.TencentProvider, tencent.SDK_MODULES),
        "aws": (aws.AwsProvider, aws.SDK_MODULES),
    }


def build_providers(config: ToolsConfig) -> list[Provider]:
    """The enabled providers; raises :class:`ConfigError` with every problem in ``config`` found."""
    from tools.providers.inventory import InventoryProvider

    problems: list[str] = []
    providers: list[Provider] = []
    if config.inventory.enabled:
        try:
            providers.append(InventoryProvider(config.inventory))
        except ConfigError as exc:
            problems.extend(exc.problems)
    for key, (cls, modules) in _cloud_classes().items():
        section = getattr(config, key)
        if not section.enabled:
            continue
        where = f"tools.{key}"
        try:
            require_sdk(modules, cls, where)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        found = cls.check_config(section, where)
        if found:
            problems.extend(found)
            continue
        providers.append(cls(section))
    names = [server.name for server in config.mcp]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(f"tools.mcp[{i}].name: {name!r} is already used by another MCP server (names namespace their tools)")
    if problems:
        raise ConfigError(problems, source="tools")
    return providers


async def check_toolset(config: ToolsConfig) -> list[str]:
    """Problems that would stop the tools from being built, found without calling any cloud or MCP server.

    ``botgateway check-config`` reports them next to the schema problems.
    """
    problems: list[str] = []
    try:
        providers = build_providers(config)
    except ConfigError as exc:
        problems.extend(exc.problems)
        providers = []
    for provider in providers:
        await provider.aclose()
    for i, server in enumerate(config.mcp):
        if server.command and shutil.which(server.command) is None:
            problems.append(_not_on_path(f"tools.mcp[{i}]", server.command))
    return problems


async def toolset_warnings(config: ToolsConfig) -> list[str]:
    """Each enabled toolset's failed prerequisites (SDKs, credentials, a provider to serve it), with the fix.

    Nothing remote is called; ``botgateway tools list`` also probes each API.
    """
    try:
        providers = build_providers(config)
    except ConfigError:
        return []  # reported as problems by check_toolset
    sources = estate_sources(config, providers, budget=RateBudget())
    try:
        statuses = toolset_status(config, build_estate(config, sources))
    finally:
        for source in sources:
            await source.aclose()
        for provider in providers:
            await provider.aclose()
    needed: dict[tuple[str, str], list[str]] = {}
    for status in statuses:
        for check in status.failed if status.enabled else ():
            needed.setdefault((check.what, check.fix), []).append(status.name)
    return [f"tools.toolsets ({', '.join(names)}): {what}: {fix}" for (what, fix), names in needed.items()]


def _not_on_path(where: str, command: str) -> str:
    """Why ``command`` cannot start, naming the program only when its name cannot carry a secret."""
    program = plain_word(command)
    if program is not None and program == command:
        return f"{where}.command: {program!r} is not an executable on PATH"
    if len(command.split()) > 1:
        # The command is started as one program name, so flags written into it (often a token) never work.
        named = f" ({program!r})" if program else ""
        return (
            f"{where}.command: the command is not an executable on PATH: it holds more than the program's name{named};"
            f" put the arguments in {where}.args"
        )
    return f"{where}.command: the command is not an executable on PATH (not shown: it may hold a secret)"


def unavailable_reasons(config: ToolsConfig, enabled: Sequence[str]) -> dict[str, str]:
    """Why each lookup tool of a disabled provider is not offered (for ``tools call``)."""
    reasons = {}
    for key, (tool_name, _) in IP_TOOLS.items():
        if key in enabled:
            continue
        section = f"tools.{key}"
        hint = f"set {section}.enabled: true" + (" and add an account with its regions" if key != "inventory" else "")
        reasons[tool_name] = f"{tool_name} is not available: the {key} provider is not configured ({hint})"
    return reasons


async def build_toolset(
    config: ToolsConfig,
    *,
    mcp_connect_timeout_s: float = 15.0,
    mcp_backoff: Backoff = RECONNECT_BACKOFF,
) -> Toolset:
    """Every tool ``config`` asks for; MCP servers are connected concurrently."""
    providers = await _started_providers(config)
    toolset = _server_toolset(config, providers)
    await _add_estate_tools(toolset, config, providers)
    if config.mcp:
        await _add_mcp_tools(toolset, config, connect_timeout_s=mcp_connect_timeout_s, backoff=mcp_backoff)
    log.info(
        "toolset_ready",
        providers=toolset.providers,
        tools=len(toolset.tools),
        mcp_servers=len(config.mcp),
        problems=len(toolset.problems),
    )
    return toolset


async def _started_providers(config: ToolsConfig) -> list[Provider]:
    """The enabled providers, their clients built when the server tools will ask them (all closed on a failure)."""
    providers = build_providers(config)
    try:
        # Clients are built (their SDKs imported) now, not inside the first question's tool timeout.
        if "servers" in config.toolsets:  # otherwise nothing asks them: no SDK import, no client
            await asyncio.gather(*(p.start() for p in providers if isinstance(p, CloudProvider)))
    except BaseException:
        for provider in providers:
            await provider.aclose()
        raise
    return providers


def _server_toolset(config: ToolsConfig, providers: Sequence[Provider]) -> Toolset:
    """A toolset of the server lookup tools over ``providers`` (none unless the ``servers`` toolset is on)."""
    slowest = max((p.timeout_s for p in providers if isinstance(p, CloudProvider)), default=0.0)
    # Pages are fetched one after another; leave room for a couple before the registry gives up.
    timeout = max(config.default_timeout_s, 2 * slowest + 5) if slowest else None
    tools, lookups = build_cloud_tools(providers, timeout_s=timeout) if "servers" in config.toolsets else ([], [])
    names = [p.name for p in providers]
    return Toolset(
        tools=list(tools),
        providers=names,
        lookup_tools=lookups,
        unavailable=unavailable_reasons(config, names),
        provider_objects=list(providers),
        config=config,
    )


async def _add_estate_tools(toolset: Toolset, config: ToolsConfig, providers: Sequence[Provider]) -> None:
    """Add the estate's resource tools and the metric and cost tools (the toolset is closed on a failure)."""
    budget = RateBudget()  # one budget per cloud API, whichever tool calls it
    try:
        sources = estate_sources(config, providers, budget=budget)
        toolset.estate = estate = build_estate(config, sources)
        await asyncio.gather(*(source.start() for source in sources))
        slowest_estate = max((estate.settings(s.name).timeout_s for s in sources), default=0.0)
        toolset.numbers = await build_number_tools(
            config, estate, budget=budget, default_timeout_s=config.default_timeout_s, estate_timeout_s=slowest_estate
        )
    except BaseException:
        await toolset.aclose()
        raise
    for estate_tool in estate_tools(config, estate, timeout_s=max(config.default_timeout_s, slowest_estate + 5)):
        toolset.add(estate_tool)
    for number_tool in toolset.numbers.tools:
        toolset.add(number_tool)


async def _add_mcp_tools(toolset: Toolset, config: ToolsConfig, *, connect_timeout_s: float, backoff: Backoff) -> None:
    """Connect the MCP servers and add their tools; a server that does not start is one of the toolset's problems."""
    manager = McpManager(config.mcp, connect_timeout_s=connect_timeout_s, backoff=backoff)
    try:
        await manager.start()
        manager.attach(toolset)
    except BaseException:
        await manager.aclose()
        await toolset.aclose()
        raise
    toolset.mcp = manager
    toolset.problems.extend(manager.problems)
