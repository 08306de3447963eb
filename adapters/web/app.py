"""The ``/v1`` sub-application: CORS, authentication and plain JSON errors around the API's routes (and its pictures)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from adapters.web.artifact_links import PictureLinks
from adapters.web.artifact_routes import PICTURE_ROUTE, api_picture_route
from adapters.web.auth import ApiKeys, SessionCheck, auth_middleware
from adapters.web.body import BadRequest
from adapters.web.client_addr import TrustedProxies
from adapters.web.cors import cors_middleware
from adapters.web.failed_logins import FailedLogins
from adapters.web.front import WebFront
from adapters.web.openai_compat import chat_completions_route
from adapters.web.routes import api_routes

__all__ = ["API_PREFIX", "api_app"]

API_PREFIX = "/v1"
"""Where the API is mounted on the gateway's HTTP server."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _bad_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A :class:`BadRequest` raised by a handler, answered as JSON with its status and reason; ``x-should-retry:
    false`` (the OpenAI SDKs' own retries) unless it is a 503, which another try may pass (a draining process)."""
    try:
        return await handler(request)
    except BadRequest as exc:
        headers = {} if exc.status == 503 else {"x-should-retry": "false"}
        return web.json_response({"error": exc.message}, status=exc.status, headers=headers)


async def _preflight(request: web.Request) -> web.Response:
    """An ``OPTIONS`` that is no CORS preflight of an allowed origin (those are answered by the CORS middleware)."""
    return web.Response(status=204, headers={"Allow": "GET, POST, DELETE, OPTIONS"})


def api_app(front: WebFront, session: SessionCheck) -> web.Application:
    """The API as an aiohttp sub-application, to mount at :data:`API_PREFIX`."""
    web_config = front.config.web
    keys, proxies = ApiKeys(web_config.api_keys), TrustedProxies(web_config.trusted_proxies)
    # Wrong keys count per client address in the Store, with the console's failed logins.
    auth = auth_middleware(keys, session, failures=FailedLogins(front.store), proxies=proxies,
                           signed_routes=frozenset({PICTURE_ROUTE}))
    app = web.Application(middlewares=[cors_middleware(web_config.cors_origins), _bad_requests, auth])
    links = PictureLinks(front.sink.shelf, keys)
    routes = [*api_routes(front), chat_completions_route(front, links, proxies),
              api_picture_route(front.sink.shelf, links)]
    app.add_routes(routes)
    paths = sorted({route.path for route in routes})
    app.add_routes([web.options(path, _preflight) for path in paths])
    return app
