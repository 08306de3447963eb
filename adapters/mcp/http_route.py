"""``/mcp`` on the gateway's HTTP server: MCP's streamable HTTP transport, each request authenticated by an API key.

A request must carry ``Authorization: Bearer <key>`` of a key under
``web.api_keys``; its principal is ``api:<key name>``, checked exactly as the
API checks it (:func:`adapters.web.auth.auth_middleware`: constant-time
comparison, wrong keys counted per client address with the console's failed
logins, 401 or 429). Console sessions do not open it: MCP clients send keys.

The SDK's session manager serves the request through an ASGI bridge
(:mod:`.asgi_bridge`), the principal carried in the ASGI scope to the handlers.
It runs *stateless* with JSON responses: every POST is authenticated and
decided on its own, so no session outlives a changed key or policy, none can
be taken over with another key, and a client's requests may land on any
worker process or replica (``--workers`` share the port). Only POST is served
(the door sends no notifications, so there is no event stream to open with
GET, nor a session to DELETE): other methods get 405.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from adapters.mcp.asgi_bridge import serve_asgi
from adapters.mcp.door import McpDoor
from adapters.mcp.owner_task import held_open
from adapters.mcp.server import build_server
from adapters.web.auth import ApiKeys, auth_middleware, caller_of
from adapters.web.client_addr import TrustedProxies
from adapters.web.failed_logins import FailedLogins
from botgateway.config.web import WebConfig
from botgateway.principal import Principal
from botgateway.stores.base import CounterStore

__all__ = ["MCP_PATH", "McpHttpRoute"]

MCP_PATH = "/mcp"
"""Where the door is served on the gateway's HTTP server."""

_SCOPE_PRINCIPAL = "botgateway.principal"
"""The ASGI scope key the authenticated caller travels under."""


def _scope_principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    request = ctx.request
    principal = request.scope.get(_SCOPE_PRINCIPAL) if request is not None else None
    if not isinstance(principal, Principal):
        raise RuntimeError("an MCP request reached the tools without an authenticated caller")
    return principal


async def _no_session(request: web.Request) -> Principal | None:
    """MCP clients authenticate with keys; the console's session cookie opens nothing here."""
    return None


class McpHttpRoute:
    """The ``/mcp`` route and the SDK session manager behind it.

    Args:
        door: The governed tools.
        web: The ``web:`` section (its keys, trusted proxies and largest body).
        store: Where wrong keys are counted (with the console's failed logins).
        version: The gateway's version, as the server introduces itself.
    """

    def __init__(self, door: McpDoor, web: WebConfig, store: CounterStore, *, version: str = "") -> None:
        server = build_server(door, _scope_principal, transport="http", version=version)
        self._manager = StreamableHTTPSessionManager(
            server, stateless=True, json_response=True, max_request_body_size=web.max_body_bytes,
        )
        self._auth = auth_middleware(ApiKeys(web.api_keys), _no_session, failures=FailedLogins(store),
                                     proxies=TrustedProxies(web.trusted_proxies))

    def mount(self, app: web.Application) -> None:
        """Serve ``/mcp`` on ``app`` (before it starts); the session manager runs while ``app`` does."""
        app.router.add_route("*", MCP_PATH, self._handle)
        app.cleanup_ctx.append(self._running)

    async def _running(self, app: web.Application) -> AsyncIterator[None]:
        async with held_open(self._manager.run, name="mcp-sessions"):
            yield

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        return await self._auth(request, self._serve)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.json_response({"error": f"{request.method} is not served here; MCP clients POST to {MCP_PATH}"},
                                     status=405, headers={"Allow": "POST"})
        principal = caller_of(request)
        body = await request.read()
        return await serve_asgi(self._manager.handle_request, request, body, {_SCOPE_PRINCIPAL: principal})
