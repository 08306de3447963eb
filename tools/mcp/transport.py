"""The SDK transport of one server, with its read side watched for end-of-stream.

A stdio server that exits, or an HTTP server that goes away, ends the read
stream; the connection learns it at once through ``on_eof`` instead of at the
next call's timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio

from botgateway.config import McpServerConfig

__all__ = ["WatchedRead", "WatchedTransport", "open_transport"]


def open_transport(config: McpServerConfig, stack: AsyncExitStack) -> Any:
    """The SDK transport for ``config``: a stdio subprocess, or streamable HTTP (its client closed by ``stack``)."""
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if config.command:
        env = {key: value.get_secret_value() for key, value in config.env.items()}
        params = StdioServerParameters(command=config.command, args=list(config.args), env=env or None)
        return stdio_client(params)
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {k: v.get_secret_value() for k, v in config.headers.items()}
    http = create_mcp_http_client(headers=headers or None)
    stack.push_async_callback(http.aclose)
    return streamable_http_client(config.url or "", http_client=http)


class WatchedRead:
    """A read stream that reports end-of-stream (the server went away) through a callback."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    def __getattr__(self, name: str) -> Any:  # last_context and friends
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        """The next message; end-of-stream is reported before it is raised."""
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_eof()
            raise

    async def aclose(self) -> None:
        """Close the inner stream."""
        await self._inner.aclose()

    def __aiter__(self) -> WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchedRead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class WatchedTransport:
    """Wraps an SDK transport so its read side is watched."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return WatchedRead(read, self._on_eof), write

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)
