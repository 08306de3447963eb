"""The MCP front door: the gateway's governed toolbox served to MCP clients (IDE and desktop agents).

Streamable HTTP at ``/mcp`` on the gateway's HTTP server, each API key the
principal ``api:<name>`` (:mod:`.http_route`, through :mod:`.asgi_bridge` and
:mod:`.owner_task`), or stdio as one principal (:mod:`.stdio`). Both serve one
MCP server (:mod:`.server`) over :class:`McpDoor` (:mod:`.door`): what the
caller's grant offers (:mod:`.grants`, :mod:`.listing`), each call under the
same policy, scopes and limits as a chat's, refused when it needs an approver
(:mod:`.approval`), audited (:mod:`.audit`), and answered as text with its
provenance, data and charts (:mod:`.results`).
"""

from __future__ import annotations

from adapters.mcp.audit import CallAudit
from adapters.mcp.door import McpDoor
from adapters.mcp.grants import DoorGrants
from adapters.mcp.http_route import MCP_PATH, McpHttpRoute
from adapters.mcp.stdio import serve_stdio, stdio_streams

__all__ = ["MCP_PATH", "CallAudit", "DoorGrants", "McpDoor", "McpHttpRoute", "serve_stdio", "stdio_streams"]
