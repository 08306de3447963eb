"""Server-Sent Events on an aiohttp response, and noticing that the client went away.

Each message is ``event: <name>`` and one ``data:`` line of JSON. After
:data:`PING_S` seconds without a message the stream sends a comment line
(``: ping``, which clients skip), so a proxy or load balancer that closes idle
connections leaves it open while a tool runs for minutes.
:func:`gone` returns once the client's connection is closed:
aiohttp does not cancel a handler whose client left, and a turn that is busy
in a tool sends nothing that could fail for a while.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from adapters.web.cors import cors_headers

__all__ = ["PING", "PING_S", "SseStream", "gone"]

PING_S = 15.0
"""Seconds of silence after which a stream sends :data:`PING` (``web.keepalive_s``)."""

PING = b": ping\n\n"
"""The keep-alive: an SSE comment, ignored by every client."""

_WATCH_S = 0.2
"""How often :func:`gone` looks at the connection (it has no event to wait on)."""


class SseStream:
    """One ``text/event-stream`` response, kept alive by a ping after each :attr:`ping_s` of silence."""

    def __init__(self, response: web.StreamResponse, ping_s: float = PING_S) -> None:
        self.response = response
        """The streamed response (prepared)."""
        self.ping_s = ping_s
        """Seconds of silence before a ping."""
        self.pings = 0
        """Pings sent so far."""
        self._lock = asyncio.Lock()  # a ping never lands inside a message
        self._wrote = asyncio.Event()
        self._pinger: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, request: web.Request, *, ping_s: float = PING_S) -> SseStream:
        """Send the stream's headers (with CORS headers when the origin is allowed) and start its pings."""
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx would buffer the stream otherwise
            **cors_headers(request),
        })
        await response.prepare(request)
        stream = cls(response, ping_s)
        stream._pinger = asyncio.create_task(stream._ping())
        return stream

    async def send(self, event: str, data: dict[str, Any]) -> None:
        """One message; raises :class:`ConnectionError` when the client is gone."""
        payload = json.dumps(data, ensure_ascii=False, default=str)
        await self.write(f"event: {event}\ndata: {payload}\n\n".encode())

    async def write(self, message: bytes) -> None:
        """One whole message as it is to be sent (the OpenAI stream's ``data:`` lines); raises
        :class:`ConnectionError` when the client is gone."""
        async with self._lock:
            await self.response.write(message)
        self._wrote.set()

    async def _ping(self) -> None:
        """Send :data:`PING` whenever nothing was sent for :attr:`ping_s`; ends when the client is gone."""
        while True:
            try:
                async with asyncio.timeout(self.ping_s):
                    await self._wrote.wait()
            except TimeoutError:
                try:
                    async with self._lock:
                        await self.response.write(PING)
                except (ConnectionError, RuntimeError):
                    return  # the stream's writer finds out on its next message
                self.pings += 1
            self._wrote.clear()

    async def close(self) -> None:
        """Stop the pings and end the response (quietly when the client is gone)."""
        self.stop_pings()
        try:
            await self.response.write_eof()
        except (ConnectionError, RuntimeError):
            pass

    def stop_pings(self) -> None:
        """No more pings (the stream ends, or its handler returns without :meth:`close`)."""
        if self._pinger is not None:
            self._pinger.cancel()
            self._pinger = None

    async def __aenter__(self) -> SseStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        """The handler is done with the stream: no more pings; a client gone mid-write ends it quietly."""
        self.stop_pings()
        return exc_type is not None and issubclass(exc_type, ConnectionError)


async def gone(request: web.Request) -> None:
    """Return once ``request``'s client connection is closed."""
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(_WATCH_S)
