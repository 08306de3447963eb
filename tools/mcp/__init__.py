"""MCP servers as tools: connect at start-up, offer their tools namespaced, survive their deaths.

Each configured server gets one :class:`McpConnection` (:mod:`tools.mcp.connection`),
which holds the SDK session in a task of its own, watches its transport
(:mod:`tools.mcp.transport`) and puts failures into words
(:mod:`tools.mcp.errors`). :class:`McpManager` (:mod:`tools.mcp.manager`)
starts them all, offers their tools namespaced (:mod:`tools.mcp.tool`) and
retries the servers that did not start, adding their tools to the live
registry once they answer. Nothing here ever raises out of the gateway: a
server that cannot start is logged and reported in :attr:`McpManager.problems`
while the other servers still work.
"""

from __future__ import annotations

from tools.mcp.connection import RECONNECT_BACKOFF, McpConnection
from tools.mcp.errors import McpUnavailable
from tools.mcp.manager import McpManager, ToolSink
from tools.mcp.tool import McpTool, allowed, namespaced_name, to_tool_output

__all__ = [
    "RECONNECT_BACKOFF",
    "McpConnection",
    "McpManager",
    "McpTool",
    "McpUnavailable",
    "ToolSink",
    "allowed",
    "namespaced_name",
    "to_tool_output",
]
