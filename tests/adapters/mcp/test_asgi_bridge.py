"""The ASGI bridge: an ASGI app answering aiohttp requests on loopback, whole or streamed, with its scope."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

import aiohttp
from aiohttp import web

from adapters.mcp.asgi_bridge import AsgiApp, serve_asgi

Receive = Callable[[], Any]
Send = Callable[[MutableMapping[str, Any]], Any]


@contextlib.asynccontextmanager
async def bridged(app: AsgiApp) -> AsyncIterator[str]:
    """An aiohttp server on loopback answering ``/asgi`` with ``app``; its URL."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(app, request, await request.read(), {"botgateway.who": "api:ci"})

    application = web.Application()
    application.router.add_route("*", "/asgi", handler)
    runner = web.AppRunner(application)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/asgi"
    finally:
        await runner.cleanup()


async def test_a_whole_answer_with_the_request_in_its_scope() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        seen.update(scope)
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json"), (b"x-reply", b"yes")]})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})

    async with bridged(app) as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}?a=1", data=b'{"q": 1}', headers={"X-Custom": "Value"}) as response:
            assert response.status == 201 and await response.json() == {"ok": True}
            assert response.headers["x-reply"] == "yes" and response.headers["Content-Length"] == "12"
    assert (seen["type"], seen["method"], seen["path"], seen["query_string"]) == ("http", "POST", "/asgi", b"a=1")
    assert (b"x-custom", b"Value") in seen["headers"]  # names lower-cased, as ASGI requires
    assert seen["body"] == b'{"q": 1}' and seen["botgateway.who"] == "api:ci"
    assert seen["client"][0] == "127.0.0.1"


async def test_a_listener_for_the_client_leaving_is_told_once_the_answer_is_sent() -> None:
    told: list[dict[str, Any]] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        leaving = asyncio.ensure_future(receive())  # as an event stream listens for the client's leaving
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        told.append(await asyncio.wait_for(leaving, 10))

    async with bridged(app) as url, aiohttp.ClientSession() as http, http.post(url, data=b"x") as response:
        assert await response.read() == b"done"
    assert told == [{"type": "http.disconnect"}]


async def test_a_streamed_answer_reaches_the_client_as_it_is_written() -> None:
    first_read = asyncio.Event()

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        await first_read.wait()  # the client has the first event before the app writes the second
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})

    async with bridged(app) as url, aiohttp.ClientSession() as http:
        async with http.post(url, data=b"{}") as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 10)
            first_read.set()
            rest = await asyncio.wait_for(response.read(), 10)
    assert first == b"data: one\n\n" and rest == b"data: two\n\n"


async def test_an_app_that_answers_nothing_is_a_500() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await receive()

    async with bridged(app) as url, aiohttp.ClientSession() as http, http.post(url) as response:
        assert response.status == 500 and "no answer" in (await response.json())["error"]
