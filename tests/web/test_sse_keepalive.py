"""An event stream that has nothing to say for a while sends ``: ping`` comments, so proxies keep it open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from adapters.web.sse import PING, SseStream
from botgateway.http import HttpServer


@pytest.fixture
async def quiet_stream() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """``GET /quiet``: one message, then silence until the test lets it end with a second one."""
    release = asyncio.Event()

    async def quiet(request: web.Request) -> web.StreamResponse:
        stream = await SseStream.open(request, ping_s=0.05)
        try:
            await stream.send("first", {"n": 1})
            await release.wait()
            await stream.send("last", {"n": 2})
            await stream.close()
        finally:
            stream.stop_pings()
        return stream.response

    server = HttpServer("127.0.0.1", 0)
    server.add_routes([web.get("/quiet", quiet)])
    await server.start()
    try:
        yield server.url, release
    finally:
        release.set()
        await server.aclose()


async def test_a_silent_stream_pings_and_the_pings_never_split_a_message(
    quiet_stream: tuple[str, asyncio.Event],
) -> None:
    url, release = quiet_stream
    async with aiohttp.ClientSession() as http, http.get(f"{url}/quiet") as response:
        lines = []
        while (line := await response.content.readline()) != PING[:-1]:  # ": ping\n" (then the blank line)
            lines.append(line)
        assert lines == [b"event: first\n", b'data: {"n": 1}\n', b"\n"]  # the message came whole, before the ping
        assert await response.content.readline() == b"\n"
        release.set()
        rest = (await response.content.read()).decode()
    messages = [block for block in rest.split("\n\n") if block]
    assert messages[-1] == 'event: last\ndata: {"n": 2}'
    assert all(block in (": ping", 'event: last\ndata: {"n": 2}') for block in messages)
