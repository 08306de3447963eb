"""Every configured MCP server: started together, their tools offered, the failed ones retried.

A server that fails at start-up is retried in the background with its
connection's back-off until it comes up or :meth:`McpManager.aclose` is
called; its tools are then offered to every sink given to
:meth:`McpManager.attach` (the live registry).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.config import McpServerConfig
from botgateway.tooling import Tool
from tools.mcp.connection import RECONNECT_BACKOFF, McpConnection
from tools.mcp.errors import McpUnavailable
from tools.mcp.tool import McpTool, allowed, namespaced_name

__all__ = ["McpManager", "ToolSink"]

log = structlog.get_logger(__name__)


class ToolSink(Protocol):
    """Where tools of a server that came up late are offered (a :class:`~botgateway.tooling.ToolRegistry`)."""

    def add(self, tool: Tool) -> None:
        """Offer ``tool``; one of the same name is replaced."""
        ...


class McpManager:
    """Every configured MCP server; :meth:`start` never raises for a bad server."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        *,
        connect_timeout_s: float = 15.0,
        backoff: Backoff = RECONNECT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connections = [
            McpConnection(c, connect_timeout_s=connect_timeout_s, backoff=backoff, clock=clock) for c in configs
        ]
        self.tools: list[McpTool] = []
        """Every tool offered so far: those of start-up, then those of servers that came up late."""
        self.problems: list[str] = []
        """One line per server that failed to start (kept after a late start, as the start-up record)."""
        self._taken: set[str] = set()
        self._sinks: list[ToolSink] = []
        self._background = BackgroundTasks()
        self._retries: dict[str, asyncio.Task[None]] = {}

    @property
    def retrying(self) -> list[str]:
        """Names of the servers that failed at start-up and are still being retried."""
        return [name for name, task in self._retries.items() if not task.done()]

    async def start(self) -> list[McpTool]:
        """Connect to every server concurrently and build their tools; retry the failed ones in the background."""
        results = await asyncio.gather(*(self._start_one(c) for c in self.connections))
        for connection, ok in zip(self.connections, results, strict=True):
            if ok:
                self._build_tools(connection)
                continue
            task = self._background.spawn(self._retry_start(connection), name=f"mcp-retry-{connection.name}")
            if task is not None:
                self._retries[connection.name] = task
        return list(self.tools)

    async def _start_one(self, connection: McpConnection) -> bool:
        try:
            await connection.connect()
            return True
        except McpUnavailable:
            self.problems.append(f"MCP server {connection.name!r} is unavailable: {connection.last_error}")
            log.error(
                "mcp_start_failed",
                server=connection.name,
                reason=connection.last_error,
                retry_in_s=connection.retry_delay_s,
            )
            return False

    def _build_tools(self, connection: McpConnection) -> list[McpTool]:
        built = []
        for definition in connection.tools:
            if not allowed(definition.name, connection.config):
                continue
            name = namespaced_name(connection.name, definition.name, self._taken)
            self._taken.add(name)
            built.append(McpTool(connection, definition, name))
        self.tools.extend(built)
        return built

    async def _retry_start(self, connection: McpConnection) -> None:
        """Reconnect a server that failed at start-up, backing off, until it answers."""
        # No attempt limit: a remote server may be down for hours, and the back-off caps the cost
        # at one attempt per ``backoff.max_s``; aclose() cancels this task.
        while True:
            await asyncio.sleep(connection.retry_delay_s)
            try:
                async with connection.lock:
                    await connection.connect()
            except McpUnavailable:
                continue  # connect() logged it and counted the failure, which lengthens the next wait
            except Exception:  # a bug of ours must not end the retries silently, nor the gateway
                log.exception("mcp_retry_crashed", server=connection.name)
                continue
            break
        tools = self._build_tools(connection)
        log.info("mcp.connected_late", server=connection.name, tools=[t.name for t in tools])
        for sink in self._sinks:
            self._offer(sink, tools)

    def _offer(self, sink: ToolSink, tools: Sequence[McpTool]) -> None:
        for tool in tools:
            try:
                sink.add(tool)
            except Exception:  # one broken sink must not keep the tools from the others
                log.exception("mcp_offer_failed", tool=tool.name)

    def attach(self, sink: ToolSink) -> None:
        """Offer every tool to ``sink`` now, and tools of servers that come up later as they do."""
        self._sinks.append(sink)
        self._offer(sink, self.tools)

    def connection(self, name: str) -> McpConnection | None:
        """The connection of server ``name``."""
        return next((c for c in self.connections if c.name == name), None)

    async def aclose(self) -> None:
        """Stop the start-up retries, then close every session."""
        await self._background.aclose()
        await asyncio.gather(*(c.aclose() for c in self.connections), return_exceptions=True)
