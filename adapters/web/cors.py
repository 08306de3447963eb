"""CORS for the API: off unless ``web.cors_origins`` names the browser origins that may call it.

A request from a listed origin gets ``Access-Control-Allow-Origin`` (that
origin, never a wildcard with credentials) and a preflight (``OPTIONS`` with
``Access-Control-Request-Method``) is answered here, before authentication,
as browsers send it without credentials; it allows the headers the API reads
and those the preflight asks for (``Access-Control-Request-Headers``: a client
library's own, such as the OpenAI SDK's ``x-stainless-*``), when they are
plain header names, at most :data:`MAX_REQUEST_HEADERS` of them. Any other origin gets no CORS header,
so its pages cannot read the answers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from adapters.web.api_errors import BadRequest, error_response

__all__ = ["MAX_REQUEST_HEADERS", "allowed_headers", "cors_headers", "cors_middleware"]

_REQUEST_ORIGIN = "botgateway.cors_origin"
"""Where the middleware notes an allowed origin, for a stream that sends its headers itself."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_ALLOW_HEADERS = ("Authorization", "Content-Type", "X-Conversation")

MAX_REQUEST_HEADERS = 32
"""The most header names of a preflight's ``Access-Control-Request-Headers`` allowed back."""

_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
"""A header name (an RFC 9110 token), short: anything else in the list is left out."""
_ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
_MAX_AGE_S = "600"


def cors_middleware(origins: Sequence[str]) -> Middleware:
    """A middleware adding CORS headers for ``origins`` (``*``: any origin) and answering their preflights."""
    allowed = frozenset(origins)

    def allows(origin: str) -> bool:
        return bool(origin) and ("*" in allowed or origin in allowed)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin", "")
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            if not allows(origin):
                return error_response(BadRequest("this origin may not call the API (web.cors_origins)", 403))
            requested = request.headers.get("Access-Control-Request-Headers", "")
            return web.Response(status=204, headers={
                "Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": _ALLOW_METHODS,
                "Access-Control-Allow-Headers": allowed_headers(requested),
                "Access-Control-Max-Age": _MAX_AGE_S, "Vary": "Origin, Access-Control-Request-Headers",
            })
        if not allows(origin):
            return await handler(request)
        request[_REQUEST_ORIGIN] = origin
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers["Access-Control-Allow-Origin"] = origin
            exc.headers["Vary"] = "Origin"
            raise
        if not response.prepared:  # a stream already sent its headers (they were added before it started)
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
        return response

    return middleware


def allowed_headers(requested: str) -> str:
    """The ``Access-Control-Allow-Headers`` of a preflight asking for ``requested``: the API's own headers and the
    requested names that are plain tokens (others dropped), at most :data:`MAX_REQUEST_HEADERS` of them."""
    names = list(_ALLOW_HEADERS)
    seen = {name.lower() for name in names}
    for name in (part.strip() for part in requested.split(",")[:MAX_REQUEST_HEADERS]):
        if _TOKEN.match(name) and name.lower() not in seen:
            seen.add(name.lower())
            names.append(name)
    return ", ".join(names)


def cors_headers(request: web.Request) -> dict[str, str]:
    """The CORS headers a streamed response of ``request`` must send (none unless its origin is allowed)."""
    origin = request.get(_REQUEST_ORIGIN)
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"} if isinstance(origin, str) else {}
