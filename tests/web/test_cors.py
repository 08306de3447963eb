"""CORS preflights: an allowed origin may send the headers its client library adds, as plain header names only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from adapters.web.cors import MAX_REQUEST_HEADERS, allowed_headers, cors_middleware
from botgateway.http import HttpServer

ORIGIN = "https://ops.example.com"


@pytest.fixture
async def api() -> AsyncIterator[str]:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def options(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application(middlewares=[cors_middleware([ORIGIN])])
    app.add_routes([web.post("/chat/completions", ok), web.options("/chat/completions", options)])
    server = HttpServer("127.0.0.1", 0)
    server.app.add_subapp("/v1", app)
    await server.start()
    try:
        yield f"{server.url}/v1/chat/completions"
    finally:
        await server.aclose()


async def test_a_preflight_allows_the_headers_it_asks_for(api: str) -> None:
    """The OpenAI SDK in a browser sends x-stainless-* headers: without them allowed, the browser sends nothing."""
    asked = "authorization, content-type, x-stainless-os, x-stainless-retry-count"
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": asked}
    async with aiohttp.ClientSession() as http, http.options(api, headers=preflight) as response:
        assert response.status == 204
        allowed = {name.strip().lower() for name in response.headers["Access-Control-Allow-Headers"].split(",")}
        assert "Access-Control-Request-Headers" in response.headers["Vary"]
    assert {"authorization", "content-type", "x-conversation", "x-stainless-os", "x-stainless-retry-count"} <= allowed


def test_only_plain_header_names_are_echoed_and_only_so_many() -> None:
    echoed = allowed_headers("x-ok, bad header, x-also-ok,\r\nx-injected: 1, " + "y" * 100)
    assert echoed == "Authorization, Content-Type, X-Conversation, x-ok, x-also-ok"
    many = allowed_headers(", ".join(f"x-h{n}" for n in range(MAX_REQUEST_HEADERS * 3)))
    assert len(many.split(", ")) == 3 + MAX_REQUEST_HEADERS
    assert allowed_headers("AUTHORIZATION") == "Authorization, Content-Type, X-Conversation"  # no duplicates
