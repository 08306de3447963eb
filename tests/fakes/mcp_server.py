"""A real MCP server for the tool tests, written with the ``mcp`` SDK's server API.

Run as a subprocess::

    python tests/fakes/mcp_server.py stdio
    python tests/fakes/mcp_server.py http      # prints "PORT <n>" once listening on 127.0.0.1

In ``http`` mode, when ``FAKE_MCP_TOKEN`` is set every request must carry
``Authorization: Bearer <token>`` (to prove configured headers are sent).
``FAKE_MCP_GREETING`` (an env var) is echoed by the ``greeting`` tool, to prove
configured environment reaches a stdio server. When ``FAKE_MCP_REFUSE_IF_EXISTS``
names an existing file, the server exits at once (a restart that fails).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("fake-ops")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=True))
def disk_usage(host: str) -> str:
    """Disk usage of a host (canned)."""
    return f"{host}: / 71% used (142G of 200G), /data 38% used"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def greeting() -> str:
    """The FAKE_MCP_GREETING environment variable."""
    return os.environ.get("FAKE_MCP_GREETING", "(unset)")


@server.tool()
def fail(message: str) -> str:
    """Always fails with ``message``."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after ``seconds``."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
def drop_database(name: str) -> str:
    """A dangerous tool that configs deny (annotated destructive: every call waits for an approver)."""
    return f"dropped {name}"


@server.tool(name="ops.status")
def ops_status() -> str:
    """A tool whose name needs sanitizing (the dot)."""
    return "all systems nominal"


@server.tool(name="a_really_long_tool_name_that_keeps_going_well_past_the_sixty_four_character_limit")
def long_name() -> str:
    """A tool whose namespaced name must be shortened."""
    return "long name ok"


def _serve_http() -> None:
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import JSONResponse

    app = server.streamable_http_app()
    token = os.environ.get("FAKE_MCP_TOKEN")
    if token:

        async def check(request, call_next):  # type: ignore[no-untyped-def]
            if request.headers.get("authorization") != f"Bearer {token}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=check)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so the port can be announced before uvicorn is up
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    refuse = os.environ.get("FAKE_MCP_REFUSE_IF_EXISTS")
    if refuse and os.path.exists(refuse):
        print("refusing to start: marker file exists", file=sys.stderr)
        sys.exit(1)
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        _serve_http()
    else:
        server.run("stdio")
