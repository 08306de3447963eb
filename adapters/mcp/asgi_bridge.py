"""One aiohttp request served by an ASGI application (the MCP SDK's streamable HTTP transport is one).

The gateway has one HTTP server, aiohttp's; the SDK speaks ASGI. This bridge
hands the ASGI app one ``http`` scope built from the request (header names
lower-cased, as ASGI requires; ``extra`` keys added, which is how the caller's
principal reaches the MCP handlers), a ``receive`` that gives the body already
read and then waits, answering ``http.disconnect`` once the response is done,
and a ``send`` that turns the app's messages into an aiohttp response: one
whole :class:`~aiohttp.web.Response` when the body comes in one message, or a
prepared :class:`~aiohttp.web.StreamResponse` written as it comes (an event
stream) otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

__all__ = ["AsgiApp", "serve_asgi"]

AsgiApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]
"""An ASGI application: ``await app(scope, receive, send)``."""

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection"})
"""Response headers aiohttp sets itself from the body it sends."""


def _scope(request: web.Request, extra: Mapping[str, Any]) -> dict[str, Any]:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    own = transport.get_extra_info("sockname") if transport is not None else None
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}", "method": request.method,
        "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.partition("?")[0].encode(),
        "query_string": request.query_string.encode(), "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(own[:2]) if isinstance(own, tuple) else None,
        "state": {}, **extra,
    }


class _Exchange:
    """One request's ``receive`` and ``send``, and the aiohttp response they make."""

    def __init__(self, request: web.Request, body: bytes) -> None:
        self._request = request
        self._body: bytes | None = body
        self._done = asyncio.Event()
        self._status = 0
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._whole: bytes | None = None
        self._stream: web.StreamResponse | None = None

    async def receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._done.wait()  # nothing more comes: the client is gone once the response is
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self._status = int(message["status"])
            for name, value in message.get("headers", ()):
                key = bytes(name).decode("latin-1")
                if key.lower() not in _HOP_BY_HOP:
                    self._headers.add(key, bytes(value).decode("latin-1"))
        elif message["type"] == "http.response.body":
            await self._body_part(bytes(message.get("body", b"")), bool(message.get("more_body", False)))

    async def _body_part(self, chunk: bytes, more: bool) -> None:
        if self._stream is None and not more:
            self._whole = (self._whole or b"") + chunk
            self._done.set()
            return
        if self._stream is None:
            self._stream = web.StreamResponse(status=self._status, headers=self._headers)
            await self._stream.prepare(self._request)
        if chunk:
            await self._stream.write(chunk)
        if not more:
            await self._stream.write_eof()
            self._done.set()

    def close(self) -> None:
        """The app returned: a ``receive`` still waiting answers ``http.disconnect``."""
        self._done.set()

    def response(self) -> web.StreamResponse:
        """What the app answered (500 when it answered nothing)."""
        if self._stream is not None:
            return self._stream
        if not self._status:
            return web.json_response({"error": "the MCP server gave no answer"}, status=500)
        return web.Response(status=self._status, headers=self._headers, body=self._whole or b"")


async def serve_asgi(app: AsgiApp, request: web.Request, body: bytes, extra: Mapping[str, Any]) -> web.StreamResponse:
    """Serve ``request`` (its ``body`` already read) with the ASGI ``app``, the scope carrying ``extra``."""
    exchange = _Exchange(request, body)
    try:
        await app(_scope(request, extra), exchange.receive, exchange.send)
    finally:
        exchange.close()
    return exchange.response()
