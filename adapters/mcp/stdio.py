"""The door over stdio: one MCP client (an IDE, a desktop agent) that started this process, as one principal.

The process runs as the principal its command line names (``local:<login>``
by default, the terminal's user), under the same policy, limits and audit as
any other caller. While it serves, the SDK points the process's own stdout at
stderr, so nothing but the protocol reaches the client; :func:`stdio_streams`
is entered before anything else is built for that reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from adapters.mcp.door import McpDoor
from adapters.mcp.server import build_server
from botgateway.principal import Principal

__all__ = ["StdioStreams", "serve_stdio", "stdio_streams"]

StdioStreams = tuple[Any, Any]
"""The SDK's read and write streams over this process's stdin and stdout."""


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[StdioStreams]:
    """This process's stdin and stdout as MCP streams; stray output goes to stderr meanwhile."""
    async with stdio_server() as streams:
        yield streams


async def serve_stdio(door: McpDoor, principal: Principal, streams: StdioStreams, *, version: str = "") -> None:
    """Serve ``door`` to the client on ``streams`` as ``principal``, until the client closes stdin."""

    def caller(ctx: ServerRequestContext[Any, Any]) -> Principal:
        return principal

    server = build_server(door, caller, transport="stdio", version=version)
    read, write = streams
    await server.run(read, write, server.create_initialization_options())
