"""The gateway's one HTTP server: an aiohttp application, its runner and its listening socket, started and stopped as a unit.

The probes (:mod:`.probes`) and ``/metrics`` (:mod:`.metrics`) are mounted on
it by the composition root, and so is anything later features serve (webhooks,
an API): every part adds its routes with :meth:`HttpServer.add_routes` (or
mounts a sub-application on :attr:`HttpServer.app`) before :meth:`HttpServer.start`.
Worker processes of one host bind the same port with ``SO_REUSEPORT`` and the
kernel spreads the connections between them.

Errors are answered in JSON that says what was wrong: an unknown path (404),
a method the path does not take (405, with ``Allow``), a body over the limit
(413), and an unexpected failure (500, with an error id whose log line holds
the detail, never a traceback).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from botgateway.incidents import report_incident

__all__ = ["MAX_BODY_BYTES", "HttpServer"]

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 1 << 20
"""Largest request body read (1 MiB): far above a webhook's or an API call's, far below what could hurt the process."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _plain_errors(max_body_bytes: int) -> Middleware:
    """A middleware answering aiohttp's own errors, and any crash of a handler, as one JSON object that says what to do."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return web.json_response({"error": "not found", "path": request.path}, status=404)
        except web.HTTPMethodNotAllowed as exc:
            allowed = sorted(exc.allowed_methods)
            body = {"error": f"{request.method} is not allowed here; use {' or '.join(allowed)}", "path": request.path}
            return web.json_response(body, status=405, headers={"Allow": ",".join(allowed)})
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"the request body is larger than {max_body_bytes} bytes"}, status=413)
        except web.HTTPException:
            raise  # a deliberate answer of a handler
        except Exception as exc:
            incident = report_incident(log, "http.handler_crashed", exc, reason="the request failed unexpectedly",
                                       method=request.method, path=request.path)
            return web.json_response({"error": incident.reason}, status=500)

    return middleware


class HttpServer:
    """One aiohttp application served on ``host:port``; routes are added before :meth:`start`."""

    def __init__(self, host: str, port: int, *, reuse_port: bool = False, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        """``reuse_port``: bind with ``SO_REUSEPORT``, so the worker processes of one host share ``port``."""
        self.host = host
        """The listen address."""
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=[_plain_errors(max_body_bytes)])
        """The application; mount sub-applications on it before :meth:`start`."""
        self._port = port
        self._reuse_port = reuse_port
        self._runner: web.AppRunner | None = None

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Serve ``routes`` too; only before :meth:`start` (aiohttp freezes the router then)."""
        if self._runner is not None:
            raise RuntimeError("routes must be added before the HTTP server starts")
        self.app.add_routes(list(routes))

    @property
    def port(self) -> int:
        """The port listened on (the real one when ``port`` was 0), once started; else the configured one."""
        if self._runner is None or not self._runner.addresses:
            return self._port
        return int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen; raises :class:`OSError` when the address cannot be bound (the port is taken by another program)."""
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, reuse_port=self._reuse_port or None)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("http.serving", url=self.url, reuse_port=self._reuse_port)

    async def aclose(self) -> None:
        """Stop listening and end open requests (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
