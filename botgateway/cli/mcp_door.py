"""``botgateway mcp serve --stdio`` and ``/mcp`` of ``botgateway run``: the governed toolbox as an MCP server.

Both build the door (:class:`adapters.mcp.McpDoor`) over the same parts as a
chat turn: the tool registry, the access policy, the per-asker limits and the
audit trail in the configured store. ``run`` mounts ``/mcp`` on its HTTP server
(when it serves the web API, whose keys open it) before the server starts.

``mcp serve --stdio`` serves one client on stdin/stdout, as ``local:<login>``
(the terminal's user) or the ``--as`` principal. It builds only what tools
need (the store, the toolset and its registry), not the model, the cards or
the gateway a chat needs: an MCP client brings its own model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from botgateway.config import Config

if TYPE_CHECKING:
    from adapters.mcp import McpDoor
    from botgateway.cli.runtime import Runtime
    from botgateway.principal import Principal
    from botgateway.stores.base import Store
    from botgateway.tooling import ToolRegistry

__all__ = ["add_mcp_parser", "build_door", "mcp_command", "mount_mcp", "serve_mcp_stdio", "stdio_principal"]

EXIT_OK = 0
EXIT_USAGE = 2


def add_mcp_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``mcp serve`` on the sub-command parsers ``sub``; returns the ``serve`` parser (for ``-c``)."""
    mcp = sub.add_parser("mcp", help="serve the tools to MCP clients (IDEs, desktop agents)")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", metavar="ACTION")
    mcp_sub.required = True
    serve = mcp_sub.add_parser(
        "serve", help="serve the tools over MCP on stdin/stdout (--stdio)",
        description="Serve the gateway's tools to one MCP client on stdin/stdout, under the access policy, limits "
                    "and audit of its principal. Over HTTP, 'botgateway run' serves them at /mcp.",
    )
    serve.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout (its command line)")
    serve.add_argument("--as", dest="as_principal", default="", metavar="PRINCIPAL",
                       help="serve as this principal (api:ci, slack:U0123; default: local:<your login>)")
    return serve


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("botgateway")
    except PackageNotFoundError:
        return ""


def build_door(config: Config, store: Store, tools: ToolRegistry) -> McpDoor:
    """The door over ``tools``, the configured policy and limits, its calls counted and audited in ``store``."""
    from adapters.mcp import CallAudit, DoorGrants, McpDoor
    from botgateway.access import PrincipalLimits, effective_policy, limits_from_config
    from botgateway.grant import Limits

    limits = config.limits
    defaults = Limits(turns_per_minute=limits.turns_per_minute, concurrent_turns=limits.concurrent_turns,
                      tokens_per_day=limits.tokens_per_day)
    grants = DoorGrants(effective_policy(config.access), tool_names=lambda: tools.names,
                        always_approve=tools.approval_required, defaults=defaults)
    counts = PrincipalLimits(store, limits_from_config(limits), lease_ttl_s=limits.lease_ttl_s)
    return McpDoor(tools, grants, counts, CallAudit(store))


def mount_mcp(runtime: Runtime) -> None:
    """Serve ``/mcp`` on the runtime's HTTP server (before it starts) when it serves the web API."""
    if runtime.http is None or runtime.web is None:
        return
    from adapters.mcp import McpHttpRoute

    door = build_door(runtime.config, runtime.store, runtime.tools)
    McpHttpRoute(door, runtime.config.web, runtime.store, version=_version()).mount(runtime.http.app)


def stdio_principal(as_principal: str) -> Principal:
    """Who ``mcp serve --stdio`` serves as: ``as_principal`` parsed (ValueError when it is no qualified id), or
    the terminal's user (``local:<login>``)."""
    from botgateway.cli.access import parse_principal
    from botgateway.principal import Principal
    from botgateway.tooling import local_user

    if as_principal:
        return parse_principal(as_principal)
    return Principal.of("terminal", local_user())


@asynccontextmanager
async def _tool_plane(config: Config) -> AsyncIterator[tuple[Store, ToolRegistry]]:
    """The store and the live tool registry, closed in reverse order."""
    from botgateway.cli.runtime import open_tool_plane

    async with AsyncExitStack() as stack:
        store, _toolset, registry = await open_tool_plane(stack, config)
        yield store, registry


async def serve_mcp_stdio(config: Config, *, as_principal: str = "") -> int:
    """Serve the tools to the MCP client on stdin/stdout until it closes them; the exit status."""
    from adapters.mcp import serve_stdio, stdio_streams

    try:
        principal = stdio_principal(as_principal)
    except ValueError as exc:
        print(f"botgateway mcp serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # The streams first: from then on stray output of the tools' start-up goes to stderr, not to the client.
    async with stdio_streams() as streams, _tool_plane(config) as (store, registry):
        await serve_stdio(build_door(config, store, registry), principal, streams, version=_version())
    return EXIT_OK


async def mcp_command(config: Config, args: argparse.Namespace) -> int:
    """Run ``botgateway mcp serve``; the exit status."""
    if not args.stdio:
        http = config.http
        print(f"botgateway mcp serve: over HTTP the tools are served by 'botgateway run' at "
              f"http://{http.host}:{http.port}/mcp (with a key of web.api_keys); add --stdio to serve one client on "
              "stdin/stdout", file=sys.stderr)
        return EXIT_USAGE
    return await serve_mcp_stdio(config, as_principal=args.as_principal)
