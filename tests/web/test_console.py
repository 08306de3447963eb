"""The web console's server side over real HTTP on loopback, against a real SQLite store: logins (password and API
key), the session cookie and its CSRF token, failed-login throttling, the pages and their files, the report tables
(JSON and CSV) and the status."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from adapters.web.auth import ApiKeys
from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.session import CSRF_HEADER, MAX_FAILED_LOGINS, SESSION_COOKIE, SessionBook, session_principal
from botgateway.budget import RateBudget, RateLimit
from botgateway.config.web import ApiKeyConfig
from botgateway.http import HttpServer
from botgateway.password_hash import hash_password
from botgateway.stores.base import AuditRecord, FeedbackRecord, UsageRow
from botgateway.stores.sqlite import SqliteStore

PASSWORD = "correct horse battery staple"
API_KEY = "ci-key-0123456789abcdef"


@dataclass
class Console:
    """The console served on loopback, and what it reads."""

    url: str
    store: SqliteStore
    budget: RateBudget


async def whoami(request: web.Request) -> web.Response:
    """What the API's auth middleware sees: the session's principal (None without one, or without the CSRF token)."""
    principal = await session_principal(request)
    return web.json_response({"principal": principal.id if principal else None})


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    budget = RateBudget()
    server = HttpServer("127.0.0.1", 0)
    keys = ApiKeys([ApiKeyConfig(name="ci", key=API_KEY)])
    book = SessionBook(store, admin_password_hash=hash_password(PASSWORD), api_keys=keys)
    mount_console(server.app, book, StatusParts(store=store, budget=lambda: budget, instance_id=lambda: "host-1"))
    server.add_routes([web.get("/v1/whoami", whoami), web.post("/v1/whoami", whoami)])
    await server.start()
    try:
        yield Console(server.url, store, budget)
    finally:
        await server.aclose()
        await store.close()


def client() -> aiohttp.ClientSession:
    # unsafe: the cookie jar keeps cookies of an IP address (127.0.0.1) too
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def login(http: aiohttp.ClientSession, url: str, **body: str) -> dict[str, object]:
    async with http.post(f"{url}/login", json=body) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def test_the_admin_password_opens_a_session_whose_cookie_is_httponly_and_strict(console: Console) -> None:
    async with client() as http:
        async with http.post(f"{console.url}/login", json={"password": PASSWORD}) as response:
            assert response.status == 200
            body = await response.json()
            cookie = response.cookies[SESSION_COOKIE]
        assert body["principal"] == "web:admin" and body["admin"] is True and body["csrf"]
        assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and not cookie["secure"]
        assert cookie.value not in str(await console.store.get_document(f"web:session:{cookie.value}"))
        async with http.get(f"{console.url}/console/session") as response:
            assert (await response.json())["principal"] == "web:admin"
        async with http.get(f"{console.url}/v1/whoami") as response:
            assert (await response.json())["principal"] == "web:admin"


async def test_behind_an_https_proxy_the_cookie_is_secure(console: Console) -> None:
    async with client() as http, http.post(f"{console.url}/login", json={"password": PASSWORD},
                                           headers={"X-Forwarded-Proto": "https"}) as response:
        assert response.status == 200
        assert response.cookies[SESSION_COOKIE]["secure"] is True


async def test_a_state_changing_request_needs_the_sessions_csrf_token(console: Console) -> None:
    async with client() as http:
        session = await login(http, console.url, password=PASSWORD)
        async with http.post(f"{console.url}/v1/whoami") as response:
            assert (await response.json())["principal"] is None
        async with http.post(f"{console.url}/v1/whoami", headers={CSRF_HEADER: "not-the-token"}) as response:
            assert (await response.json())["principal"] is None
        async with http.post(f"{console.url}/v1/whoami", headers={CSRF_HEADER: str(session["csrf"])}) as response:
            assert (await response.json())["principal"] == "web:admin"
        async with http.post(f"{console.url}/logout") as response:
            assert response.status == 403  # logging out is state-changing too
        async with http.post(f"{console.url}/logout", headers={CSRF_HEADER: str(session["csrf"])}) as response:
            assert response.status == 200
        async with http.get(f"{console.url}/console/session") as response:
            assert response.status == 401


async def test_a_logged_out_session_id_opens_nothing_again(console: Console) -> None:
    async with client() as http:
        session = await login(http, console.url, password=PASSWORD)
        kept = next(c.value for c in http.cookie_jar if c.key == SESSION_COOKIE)
        async with http.post(f"{console.url}/logout", headers={CSRF_HEADER: str(session["csrf"])}) as response:
            assert response.status == 200
    async with aiohttp.ClientSession(cookies={SESSION_COOKIE: kept}) as replay:
        async with replay.get(f"{console.url}/console/session") as response:
            assert response.status == 401
        async with replay.get(f"{console.url}/v1/whoami") as response:
            assert (await response.json())["principal"] is None


async def test_an_api_key_logs_in_as_its_principal_and_may_not_read_the_admin_pages(console: Console) -> None:
    async with client() as http:
        session = await login(http, console.url, key=API_KEY)
        assert session["principal"] == "api:ci" and session["admin"] is False
        for page in ("audit", "usage", "feedback", "status"):
            async with http.get(f"{console.url}/console/api/{page}") as response:
                assert response.status == 403, page


async def test_wrong_credentials_are_refused_and_many_failures_lock_the_address_out(console: Console) -> None:
    async with client() as http:
        async with http.post(f"{console.url}/login", json={"password": "wrong password here"}) as response:
            assert response.status == 401
            assert (await response.json())["code"] == "bad_credentials"
        async with http.post(f"{console.url}/login", json={"key": "not-a-configured-key"}) as response:
            assert response.status == 401
        for _ in range(MAX_FAILED_LOGINS - 2):
            async with http.post(f"{console.url}/login", json={"password": "still wrong"}) as response:
                assert response.status == 401
        async with http.post(f"{console.url}/login", json={"password": PASSWORD}) as response:
            assert response.status == 429  # even the right one, until the window ends
            assert SESSION_COOKIE not in response.cookies


async def test_a_login_sent_as_a_form_is_refused(console: Console) -> None:
    """A cross-site form can post a form but not JSON (that needs a CORS preflight): a login must be JSON."""
    async with client() as http, http.post(f"{console.url}/login", data={"password": PASSWORD}) as response:
        assert response.status == 415
        assert SESSION_COOKIE not in response.cookies


async def test_the_console_page_needs_a_session_and_loads_only_its_own_files(console: Console) -> None:
    async with client() as http:
        async with http.get(f"{console.url}/", allow_redirects=False) as response:
            assert response.status == 302 and response.headers["Location"] == "/login"
        async with http.get(f"{console.url}/login") as response:
            assert response.status == 200 and "login.js" in await response.text()
        await login(http, console.url, password=PASSWORD)
        async with http.get(f"{console.url}/") as response:
            assert response.status == 200
            page = await response.text()
            policy = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "http" not in policy
        assert "/console/static/chat.js" in page and "<script>" not in page  # no inline script
        async with http.get(f"{console.url}/console/static/markdown.js") as response:
            assert response.status == 200 and response.content_type == "text/javascript"
        for name in ("session.py", "..%2Fsession.py", "index.html"):
            async with http.get(f"{console.url}/console/static/{name}") as response:
                assert response.status == 404, name


async def test_the_audit_table_holds_the_cli_rows_and_downloads_as_csv(console: Console) -> None:
    now = time.time()
    await console.store.record_audit(AuditRecord(
        turn_id="t1", platform="api", conversation_id="c1", user_id="ci", question="which server is 10.0.1.100?",
        outcome="done", answer="prod-db-01", started_at=now - 60, principal="api:ci", channel="web",
        tool_calls=({"name": "inventory__find_host", "arguments": {"ip": "10.0.1.100"}, "ok": True,
                     "duration_s": 0.2, "started_at": now - 59},),
    ))
    await console.store.record_audit(AuditRecord(
        turn_id="t0", platform="slack", conversation_id="c0", user_id="U1", question="old", outcome="done",
        started_at=now - 7200, principal="slack:U1",
    ))
    async with client() as http:
        await login(http, console.url, password=PASSWORD)
        async with http.get(f"{console.url}/console/api/audit", params={"since": "1h"}) as response:
            body = await response.json()
        assert [row["turn_id"] for row in body["rows"]] == ["t1"]
        assert body["rows"][0]["tool"] == "inventory__find_host" and body["rows"][0]["outcome"] == "ok"
        assert body["columns"][0] == "time"
        async with http.get(f"{console.url}/console/api/audit", params={"user": "slack:U1"}) as response:
            assert [row["turn_id"] for row in (await response.json())["rows"]] == ["t0"]
        async with http.get(f"{console.url}/console/api/audit", params={"since": "1h", "format": "csv"}) as response:
            assert response.content_type == "text/csv"
            assert response.headers["Content-Disposition"].startswith('attachment; filename="audit-')
            rows = list(csv.DictReader(io.StringIO(await response.text())))
        assert [(row["turn_id"], row["principal"], row["question"]) for row in rows] == [
            ("t1", "api:ci", "which server is 10.0.1.100?")]
        async with http.get(f"{console.url}/console/api/audit", params={"since": "yesterday-ish"}) as response:
            assert response.status == 400
            assert "since" in (await response.json())["error"]


async def test_usage_and_feedback_tables_group_and_filter_as_the_cli_does(console: Console) -> None:
    now = time.time()
    await console.store.record_usage([
        UsageRow(at=now, turn_id="t1", principal="api:ci", model="gpt-x", prompt_tokens=100, completion_tokens=20,
                 cost=0.01, currency="USD", row_id="t1:1"),
        UsageRow(at=now, turn_id="t2", principal="web:admin", model="gpt-x", prompt_tokens=50, completion_tokens=5,
                 row_id="t2:1"),
    ])
    await console.store.record_feedback(FeedbackRecord(turn_id="t1", voter="slack:U1", vote="down", at=now,
                                                       reason="wrong host", tools=("a", "b")))
    await console.store.record_feedback(FeedbackRecord(turn_id="t2", voter="slack:U2", vote="up", at=now))
    async with client() as http:
        await login(http, console.url, password=PASSWORD)
        async with http.get(f"{console.url}/console/api/usage", params={"by": "user"}) as response:
            body = await response.json()
        assert body["columns"][0] == "user"
        assert [(row["user"], row["total_tokens"], row["unpriced_calls"]) for row in body["rows"]] == [
            ("api:ci", 120, 0), ("web:admin", 55, 1)]
        assert body["cut_at"] is None
        async with http.get(f"{console.url}/console/api/usage", params={"by": "user", "limit": "1"}) as response:
            assert (await response.json())["cut_at"] == 1  # older calls were left out: the page says so
        async with http.get(f"{console.url}/console/api/usage", params={"by": "planet"}) as response:
            assert response.status == 400
        async with http.get(f"{console.url}/console/api/feedback", params={"vote": "down"}) as response:
            rows = (await response.json())["rows"]
        assert [(row["voter"], row["reason"], row["tools"]) for row in rows] == [("slack:U1", "wrong host", "a; b")]


async def test_status_names_the_checks_store_budgets_open_cards_and_replicas(console: Console) -> None:
    await console.store.heartbeat("host-1", 60)
    await console.store.heartbeat("host-2", 60)
    assert console.budget.try_acquire("slack:T1:chat.update", RateLimit.window(50, 60), "card-1")
    async with client() as http:
        await login(http, console.url, password=PASSWORD)
        async with http.get(f"{console.url}/console/api/status") as response:
            status = await response.json()
    assert status["store"] == "ok"
    assert status["replicas"] == ["host-1", "host-2"] and status["instance"] == "host-1"
    [line] = status["budgets"]
    assert line["key"] == "slack:T1:chat.update" and line["granted"] == 1 and line["limit"] == "50/60s"
    assert status["open_cards"] == []
