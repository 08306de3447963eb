"""The API's one error shape: every answer of ``/v1`` that is no success is OpenAI's ``{"error": {...}}``.

The body is ``{"error": {"message", "type", "code", "param"}}``, as OpenAI's
API answers, so every OpenAI client (the SDKs' typed errors, Open WebUI,
LibreChat) shows the message and can tell the cases apart: ``type`` follows
the status (``invalid_request_error`` for 4xx, ``requests`` for 429,
``server_error`` for 5xx), ``code`` names the case (``invalid_api_key``,
``rate_limit_exceeded``, ``model_not_found``, a failed turn's reason), and
``param`` the request field at fault. A route whose refusal carries more than
a message (a stop's answer, a vote's) keeps those fields beside ``error``.

One mechanism makes them all: a handler (or :func:`~adapters.web.body.read_json`)
raises :class:`BadRequest`, and :func:`api_errors_middleware`, outermost in the
``/v1`` sub-application, answers it with :func:`error_response`; the same
middleware answers aiohttp's own errors (an unknown route, a method the route
does not take, a body over the server's limit) and any crash (500, an error id
whose log line holds the detail, never a traceback). The middlewares that
answer before a handler runs (the API keys' check, CORS) build their answers
with :func:`error_response` too. The console's own routes keep their shape.

Every error answer says ``x-should-retry: false`` (the OpenAI SDKs would
otherwise ask a whole question again by themselves), except a 503, which
another try may pass (a process starting or draining). A 429 says when to
come back (``Retry-After``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from botgateway.incidents import report_incident

__all__ = [
    "RATE_LIMITED",
    "RATE_LIMIT_TYPE",
    "BadRequest",
    "api_errors_middleware",
    "error_object",
    "error_response",
]

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

RATE_LIMITED = "rate_limit_exceeded"
"""The ``code`` of a 429: the asker reached one of its limits, or its address sent too many wrong keys."""
RATE_LIMIT_TYPE = "requests"
"""The ``type`` of a 429 (OpenAI's, for a limit of requests)."""

_CODES = {401: "invalid_api_key", 405: "method_not_allowed", 413: "request_too_large", 429: RATE_LIMITED,
          500: "internal_error", 503: "unavailable"}
"""The ``code`` of a status when the error names none."""


def _type_of(status: int) -> str:
    if status == 429:
        return RATE_LIMIT_TYPE
    if status == 403:
        return "permission_error"
    return "server_error" if status >= 500 else "invalid_request_error"


class BadRequest(Exception):
    """The request cannot be served as sent: answered as OpenAI's error, with its status; the message says why."""

    def __init__(
        self, message: str, status: int = 400, *, code: str | None = None, param: str | None = None,
        retry_after_s: float | None = None, headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """``code`` (default: the status's), ``param`` (the request field at fault), ``retry_after_s`` (sent as
        ``Retry-After``), ``headers`` (more of them) and ``extra`` (fields of the body beside ``error``)."""
        super().__init__(message)
        self.message = message
        """What was wrong, in words for the client."""
        self.status = status
        """The HTTP status to answer with (400, 401, 404, 409, 413, 429, 503…)."""
        self.code = code if code is not None else _CODES.get(status)
        """The case, for programs (``invalid_api_key``); None when the status says it all."""
        self.param = param
        """The request field at fault (``messages``, ``user``), if one is."""
        self.retry_after_s = retry_after_s
        """When another try may pass, in seconds (a 429's ``Retry-After``)."""
        self.headers = dict(headers or {})
        """More headers of the answer (``WWW-Authenticate``, ``Allow``)."""
        self.extra = dict(extra or {})
        """More fields of the body, beside ``error``."""

    def about(self, param: str) -> BadRequest:
        """The same error, naming ``param`` as the field at fault (a check that did not know the field's name)."""
        return BadRequest(self.message, self.status, code=self.code, param=param, retry_after_s=self.retry_after_s,
                          headers=self.headers, extra=self.extra)


def error_object(message: str, status: int, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object (the value of ``error``) for ``status``; a stream's failure sends it too."""
    return {"message": message, "type": _type_of(status), "code": code if code is not None else _CODES.get(status),
            "param": param}


def error_response(error: BadRequest) -> web.Response:
    """The answer to ``error``: OpenAI's body, its status, ``x-should-retry: false`` (unless a 503) and
    ``Retry-After`` when it says when to come back."""
    headers = dict(error.headers)
    if error.status != 503:
        headers["x-should-retry"] = "false"
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    body = {"error": error_object(error.message, error.status, code=error.code, param=error.param), **error.extra}
    return web.json_response(body, status=error.status, headers=headers)


def _http_error(request: web.Request, exc: web.HTTPException) -> BadRequest:
    """aiohttp's own error (raised by its router, its body limit, or a handler) as the API's."""
    headers = {name: value for name, value in exc.headers.items() if name.lower() not in ("content-type",
                                                                                         "content-length")}
    if isinstance(exc, web.HTTPNotFound):
        return BadRequest(f"no such route: {request.method} {request.path}", 404, code="unknown_url", headers=headers)
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = " or ".join(sorted(exc.allowed_methods))
        return BadRequest(f"{request.method} is not allowed on {request.path}; use {allowed}", 405, headers=headers)
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return BadRequest("the request body is too large", 413, headers=headers)
    return BadRequest(exc.reason or f"HTTP {exc.status}", exc.status, headers=headers)


def api_errors_middleware() -> Middleware:
    """The middleware answering every error of the API's routes (and of the middlewares inside it) in one shape."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as exc:
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise  # a redirect is no error
            return error_response(_http_error(request, exc))
        except Exception as exc:
            incident = report_incident(log, "web.api_crashed", exc, reason="the request failed unexpectedly",
                                       method=request.method, path=request.path)
            return error_response(BadRequest(incident.reason, 500))

    return middleware
