"""The ``/v1`` sub-application: CORS, authentication and OpenAI-shaped errors around the API's routes (and its pictures)."""

from __future__ import annotations

from aiohttp import web

from adapters.web.api_errors import api_errors_middleware
from adapters.web.artifact_links import PictureLinks
from adapters.web.artifact_routes import PICTURE_ROUTE, api_picture_route
from adapters.web.auth import ApiKeys, SessionCheck, auth_middleware
from adapters.web.client_addr import TrustedProxies
from adapters.web.cors import cors_middleware
from adapters.web.failed_logins import FailedLogins
from adapters.web.front import WebFront
from adapters.web.models_route import model_routes
from adapters.web.openai_compat import chat_completions_route
from adapters.web.routes import api_routes

__all__ = ["API_PREFIX", "api_app"]

API_PREFIX = "/v1"
"""Where the API is mounted on the gateway's HTTP server."""


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
    # Errors inside CORS (an allowed origin reads them too), around the keys' check and every route.
    app = web.Application(middlewares=[cors_middleware(web_config.cors_origins), api_errors_middleware(), auth])
    links = PictureLinks(front.sink.shelf, keys)
    routes = [*api_routes(front), chat_completions_route(front, links, proxies), *model_routes(),
              api_picture_route(front.sink.shelf, links)]
    app.add_routes(routes)
    paths = sorted({route.path for route in routes})
    app.add_routes([web.options(path, _preflight) for path in paths])
    return app
