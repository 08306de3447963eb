"""Wrong API keys counted per client address with the console's failed logins: the API's auth middleware and the
console's login over real HTTP on loopback, a real SQLite store whose clock the tests move to end the window."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from adapters.web.auth import ApiKeys, auth_middleware, principal_of
from adapters.web.client_addr import TrustedProxies
from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.failed_logins import FAILED_LOGIN_WINDOW_S, MAX_FAILED_LOGINS, FailedLogins
from adapters.web.session import SessionBook
from botgateway.config.web import ApiKeyConfig
from botgateway.http import HttpServer
from botgateway.principal import Principal
from botgateway.stores.sqlite import SqliteStore

API_KEY = "ci-key-0123456789abcdef"
WRONG_KEY = "not-the-key-0123456789"


@dataclass
class Served:
    url: str
    clock: list[float]
    """The store's wall clock (``clock[0]``), moved by the tests."""


async def _no_session(request: web.Request) -> Principal | None:
    return None


async def _whoami(request: web.Request) -> web.Response:
    return web.json_response({"principal": principal_of(request).id})


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """``/v1/whoami`` behind the API's auth and the console's ``/login``, one key, counting in one store."""
    clock = [1_700_000_000.0]
    store = SqliteStore(tmp_path / "state.db", clock=lambda: clock[0])
    await store.open()
    keys = ApiKeys([ApiKeyConfig(name="ci", key=API_KEY)])
    server = HttpServer("127.0.0.1", 0)
    api = web.Application(middlewares=[
        auth_middleware(keys, _no_session, failures=FailedLogins(store), proxies=TrustedProxies()),
    ])
    api.router.add_get("/whoami", _whoami)
    server.app.add_subapp("/v1", api)
    mount_console(server.app, SessionBook(store, api_keys=keys), StatusParts(store=store))
    await server.start()
    try:
        yield Served(server.url, clock)
    finally:
        await server.aclose()
        await store.close()


async def whoami(http: aiohttp.ClientSession, url: str, key: str) -> int:
    async with http.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {key}"}) as response:
        return response.status


async def test_the_address_waits_out_the_window_and_is_let_in_again_when_it_ends(served: Served) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(MAX_FAILED_LOGINS):
            assert await whoami(http, served.url, WRONG_KEY) == 401
        assert await whoami(http, served.url, WRONG_KEY) == 429
        served.clock[0] += FAILED_LOGIN_WINDOW_S - 1
        assert await whoami(http, served.url, API_KEY) == 429  # a second before the window ends: still waiting
        served.clock[0] += 1
        assert await whoami(http, served.url, API_KEY) == 200
        assert await whoami(http, served.url, WRONG_KEY) == 401  # a new window, counted from nothing


async def test_concurrent_wrong_keys_past_the_limit_are_refused_and_right_ones_in_parallel_never_count(
    served: Served,
) -> None:
    async with aiohttp.ClientSession() as http:
        # Many right keys at once (a client's parallel requests) use up nothing.
        rights = await asyncio.gather(*(whoami(http, served.url, API_KEY) for _ in range(MAX_FAILED_LOGINS * 3)))
        assert rights == [200] * (MAX_FAILED_LOGINS * 3)
        wrongs = await asyncio.gather(*(whoami(http, served.url, WRONG_KEY) for _ in range(MAX_FAILED_LOGINS * 3)))
        assert wrongs.count(401) == MAX_FAILED_LOGINS and wrongs.count(429) == MAX_FAILED_LOGINS * 2
        assert await whoami(http, served.url, API_KEY) == 429


async def test_wrong_keys_and_failed_logins_share_one_count(served: Served) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(MAX_FAILED_LOGINS // 2):
            async with http.post(f"{served.url}/login", json={"key": WRONG_KEY}) as response:
                assert response.status == 401
        for _ in range(MAX_FAILED_LOGINS - MAX_FAILED_LOGINS // 2):
            assert await whoami(http, served.url, WRONG_KEY) == 401
        assert await whoami(http, served.url, API_KEY) == 429  # guesses split between the two got no more
        async with http.post(f"{served.url}/login", json={"key": API_KEY}) as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) == FAILED_LOGIN_WINDOW_S
