"""The model client's HTTP transport: the SDK's requests, sent and their streams read by aiohttp.

Every streamed chunk is one read of the response body. Through the SDK's
default stack (httpx, httpcore, the pure-Python h11 parser, anyio, which also
registers and unregisters the socket with the event loop for every read) one
read cost about three times what it costs through aiohttp's C parser on plain
asyncio, and at thousands of chunks a second that was most of the process's
CPU. :class:`AiohttpTransport` is an httpx transport, so the SDK keeps
building the request (auth, headers, base URL), applying its timeouts and
raising its errors; only the bytes travel through aiohttp.

Failures become the httpx errors the SDK maps (``ConnectError``: could not
reach; ``ConnectTimeout``/``ReadTimeout``: did not answer in time;
``ReadError``: the connection broke), so the user sees the same plain words.
Proxies from the environment still go through httpx's own proxy transports.

An uncompressed body also offers :meth:`_Body.read` as the response extension
:data:`~botgateway.model.sse.BODY_READER`: :class:`~botgateway.model.sse.ChunkStream` reads
through it directly instead of through httpx's and the SDK's layers of async
iterators, one coroutine per read instead of six.
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import aiohttp
import openai

from botgateway.model.sse import BODY_READER

__all__ = ["AiohttpTransport", "sdk_http"]


def sdk_http() -> ModuleType:
    """The HTTP library the SDK is built on: ``httpx2``, or ``httpx`` for older SDKs."""
    for cls in openai.DefaultAsyncHttpxClient.__mro__:
        package = cls.__module__.partition(".")[0]
        if cls.__name__ == "AsyncClient" and package.startswith("httpx"):
            return sys.modules[package]
    raise ImportError("the openai SDK's HTTP client is not httpx-based")


http = sdk_http()

_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", ())
_READ_TIMEOUT = getattr(aiohttp, "SocketTimeoutError", ())


def _mapped(exc: BaseException, *, reading: bool) -> Exception:
    """The httpx error for an aiohttp failure (``reading``: while reading the body, else while connecting/sending)."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, _CONNECT_TIMEOUT):
        return http.ConnectTimeout(message)
    if isinstance(exc, _READ_TIMEOUT):
        return http.ReadTimeout(message)
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return http.ReadTimeout(message) if reading else http.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return http.ProxyError(message)
    if isinstance(exc, aiohttp.InvalidURL):
        return http.UnsupportedProtocol(message)
    if reading:
        return http.ReadError(message)
    return http.ConnectError(message)


# The SDK's HTTP library is found at run time (httpx2 or httpx), so its classes are no names mypy can resolve.
class _Body(http.AsyncByteStream):  # type: ignore[name-defined]
    """A response body as httpx reads it: the bytes as they arrive."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while data := await self.read():
            yield data

    async def read(self) -> bytes:
        """The next piece of the body as it arrives; ``b""`` at its end."""
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _mapped(exc, reading=True) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # read to the end: the connection goes back to the pool
        else:
            self._response.close()  # hung up mid-answer: the provider stops generating


class AiohttpTransport(http.AsyncBaseTransport):  # type: ignore[name-defined]  # found at run time, as _Body's base
    """An httpx transport over one ``aiohttp`` session (opened on first use, in the running loop).

    Args:
        max_connections: Connections open at once (the SDK's default is 1,000).
        keepalive_s: How long an idle connection is kept for the next request.
        ssl_context: Certificate checks; by default the ones httpx would make (certifi's bundle).
    """

    def __init__(self, *, max_connections: int = 1000, keepalive_s: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._ssl = ssl_context if ssl_context is not None else http.create_ssl_context()
        self._session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: Any) -> Any:
        """Send ``request``; the response with its body still to read."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=self._keepalive_s,
                                             ssl=self._ssl)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()
        try:
            response = await self._session.request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=timeout.get("pool"),
                                              sock_connect=timeout.get("connect"), sock_read=timeout.get("read")),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _mapped(exc, reading=False) from exc
        body = _Body(response)
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        if response.headers.get("Content-Encoding", "identity").strip().lower() == "identity":
            extensions[BODY_READER] = body.read  # bytes as sent: nothing for httpx to decode
        return http.Response(status_code=response.status, headers=response.raw_headers, stream=body,
                             request=request, extensions=extensions)

    async def aclose(self) -> None:
        """Close every connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None
