"""Server-Sent Events on an aiohttp response, and noticing that the client went away.

Each message is ``event: <name>`` and one ``data:`` line of JSON.
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

__all__ = ["SseStream", "gone"]

_WATCH_S = 0.2
"""How often :func:`gone` looks at the connection (it has no event to wait on)."""


class SseStream:
    """One ``text/event-stream`` response."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        """The streamed response (prepared)."""

    @classmethod
    async def open(cls, request: web.Request) -> SseStream:
        """Send the stream's headers (with CORS headers when the origin is allowed)."""
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx would buffer the stream otherwise
            **cors_headers(request),
        })
        await response.prepare(request)
        return cls(response)

    async def send(self, event: str, data: dict[str, Any]) -> None:
        """One message; raises :class:`ConnectionError` when the client is gone."""
        payload = json.dumps(data, ensure_ascii=False, default=str)
        await self.response.write(f"event: {event}\ndata: {payload}\n\n".encode())

    async def close(self) -> None:
        """End the response (quietly when the client is gone)."""
        try:
            await self.response.write_eof()
        except (ConnectionError, RuntimeError):
            pass


async def gone(request: web.Request) -> None:
    """Return once ``request``'s client connection is closed."""
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(_WATCH_S)
