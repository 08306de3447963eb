"""The console's logins under pressure and behind a proxy, and sessions that end with the key or password that
opened them; over real HTTP on loopback against a real SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from adapters.web.auth import ApiKeys
from adapters.web.client_addr import TrustedProxies
from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.session import MAX_FAILED_LOGINS, SessionBook
from botgateway.config.web import ApiKeyConfig, WebConfig
from botgateway.http import HttpServer
from botgateway.password_hash import hash_password
from botgateway.stores.sqlite import SqliteStore

PASSWORD = "correct horse battery staple"
API_KEY = "ci-key-0123456789abcdef"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def served(store: SqliteStore) -> AsyncIterator[str]:
    """The console with the admin password and one key, trusting the loopback address as its reverse proxy."""
    server = HttpServer("127.0.0.1", 0)
    book = SessionBook(store, admin_password_hash=hash_password(PASSWORD),
                       api_keys=ApiKeys([ApiKeyConfig(name="ci", key=API_KEY)]),
                       proxies=TrustedProxies(["127.0.0.0/8"]))
    mount_console(server.app, book, StatusParts(store=store))
    await server.start()
    try:
        yield server.url
    finally:
        await server.aclose()


async def post_login(http: aiohttp.ClientSession, url: str, body: dict[str, str], client: str) -> int:
    async with http.post(f"{url}/login", json=body, headers={"X-Forwarded-For": client}) as response:
        return response.status


async def test_concurrent_bad_logins_past_the_limit_are_throttled_unchecked(served: str) -> None:
    async with aiohttp.ClientSession() as http:
        statuses = await asyncio.gather(*(
            post_login(http, served, {"password": f"guess {n}"}, "198.51.100.7") for n in range(MAX_FAILED_LOGINS * 3)
        ))
        assert statuses.count(401) == MAX_FAILED_LOGINS  # checked (and wrong)
        assert statuses.count(429) == MAX_FAILED_LOGINS * 2  # refused before any password check
        # Even the right password waits out the window from that client.
        assert await post_login(http, served, {"password": PASSWORD}, "198.51.100.7") == 429


async def test_a_success_does_not_count_as_a_failure(served: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(MAX_FAILED_LOGINS * 2):
            assert await post_login(http, served, {"password": PASSWORD}, "198.51.100.8") == 200


async def test_behind_a_trusted_proxy_each_client_is_throttled_on_its_own_address(served: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(MAX_FAILED_LOGINS):
            assert await post_login(http, served, {"password": "wrong"}, "198.51.100.9") == 401
        assert await post_login(http, served, {"password": "wrong"}, "198.51.100.9") == 429
        # Another client behind the same proxy is not locked out by the first one's failures...
        assert await post_login(http, served, {"password": PASSWORD}, "203.0.113.5") == 200
        # ...and a client cannot escape by writing its own X-Forwarded-For: the proxy appends what it saw.
        spoofed = "203.0.113.77, 198.51.100.9"
        assert await post_login(http, served, {"password": PASSWORD}, spoofed) == 429


def request_from(peer: str, headers: dict[str, str]) -> web.Request:
    """A request as aiohttp builds it, from a connection whose socket reports ``peer``."""
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 4242) if name == "peername" else default
    return make_mocked_request("POST", "/login", headers=headers, transport=transport)


def test_the_client_is_the_last_untrusted_forwarded_hop_and_only_a_trusted_peer_is_believed() -> None:
    proxies = TrustedProxies(["10.0.0.0/8", "127.0.0.1"])

    def client(peer: str, forwarded: str | None) -> str:
        headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
        return proxies.client(request_from(peer, headers))

    assert client("10.1.2.3", "198.51.100.1, 203.0.113.9, 10.0.0.7") == "203.0.113.9"
    assert client("127.0.0.1", "203.0.113.9") == "203.0.113.9"
    assert client("192.0.2.50", "203.0.113.9") == "192.0.2.50"  # an untrusted peer is the client, whatever it says
    assert client("10.1.2.3", None) == "10.1.2.3"
    assert client("10.1.2.3", "10.0.0.8") == "10.1.2.3"  # every hop trusted: the peer
    assert client("10.1.2.3", "[2001:db8::1]:443, 10.0.0.8") == "2001:db8::1"
    assert TrustedProxies().client(request_from("10.1.2.3", {"X-Forwarded-For": "1.2.3.4"})) == "10.1.2.3"


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    assert WebConfig(trusted_proxies=[" 10.0.0.0/8", "::1"]).trusted_proxies == ["10.0.0.0/8", "::1"]
    with pytest.raises(ValueError, match=r"trusted proxy 'proxy.local' must be an IP address or a CIDR network"):
        WebConfig(trusted_proxies=["proxy.local"])


async def test_a_session_ends_when_its_key_is_removed_or_changed(store: SqliteStore) -> None:
    ci = ApiKeyConfig(name="ci", key=API_KEY)
    book = SessionBook(store, api_keys=ApiKeys([ci]))
    outcome, session_id, _ = await book.login(key=API_KEY, client="192.0.2.1")
    assert outcome == "ok" and await book.find(session_id) is not None

    # The process restarts with the key removed: the session it opened is refused.
    other = ApiKeyConfig(name="other", key="other-key-0123456789abcdef")
    assert await SessionBook(store, api_keys=ApiKeys([other])).find(session_id) is None
    # Or with the same name and a new key.
    rotated = ApiKeyConfig(name="ci", key="rotated-key-0123456789abcdef")
    assert await SessionBook(store, api_keys=ApiKeys([rotated])).find(session_id) is None
    assert await SessionBook(store, api_keys=ApiKeys([ci])).find(session_id) is not None  # the same key: still on


async def test_a_session_ends_when_the_admin_password_changes(store: SqliteStore) -> None:
    first = hash_password(PASSWORD)
    outcome, session_id, session = await SessionBook(store, admin_password_hash=first).login(password=PASSWORD)
    assert outcome == "ok" and session is not None and session.admin
    assert await SessionBook(store, admin_password_hash=first).find(session_id) is not None
    assert await SessionBook(store, admin_password_hash=hash_password("a new password")).find(session_id) is None
    assert await SessionBook(store).find(session_id) is None  # password login turned off
