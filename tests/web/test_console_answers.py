"""The console's per-answer routes over real HTTP, against the gateway in this process and its SQLite Store: a vote
and a 👎's reason go to the gateway's feedback store (one per voter and answer), a Refresh streams the question
asked anew as a new turn of the same conversation; only the answer's asker (an admin may vote on anyone's), with
the session's CSRF token, may use them, and a console served without the chat says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.session import CSRF_HEADER, SessionBook
from botgateway.http import HttpServer
from botgateway.password_hash import hash_password
from botgateway.stores.sqlite import SqliteStore
from botgateway.strings import t
from tests.web.api_harness import VIEWER_KEY, sse_events
from tests.web.browser.console_harness import IP, SLOW, console_gateway, store_path
from tests.web.chart_gateway import PASSWORD

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUESTION = f"which server is {IP}?"


@dataclass
class Served:
    url: str
    store: SqliteStore


@dataclass
class Session:
    http: aiohttp.ClientSession
    csrf: str

    def headers(self, csrf: bool = True) -> dict[str, str]:
        return {CSRF_HEADER: self.csrf} if csrf else {}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    folder = tmp_path_factory.mktemp("answers-http")
    async with console_gateway(folder) as url:
        store = SqliteStore(store_path(folder))
        await store.open()
        try:
            yield Served(url, store)
        finally:
            await store.close()


@asynccontextmanager
async def logged_in(url: str, **credentials: str) -> AsyncIterator[Session]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(f"{url}/login", json=credentials) as response:
            assert response.status == 200, await response.text()
            csrf = (await response.json())["csrf"]
        yield Session(http, csrf)


async def stream(response: aiohttp.ClientResponse) -> list[tuple[str, dict[str, Any]]]:
    assert response.status == 200, await response.text()
    return [event async for event in sse_events(response)]


async def asked(session: Session, url: str, question: str) -> str:
    """Ask ``question`` in a new conversation; the turn's id once its stream ended."""
    async with session.http.post(f"{url}/v1/turns", json={"question": question, "snapshots": True},
                                 headers=session.headers()) as response:
        events = await stream(response)
    return str(events[0][1]["turn_id"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def answer(served: Served) -> str:
    """The id of the admin's answered question."""
    async with logged_in(served.url, password=PASSWORD) as admin:
        return await asked(admin, served.url, QUESTION)


async def test_a_vote_then_a_down_vote_with_its_reason_are_one_record(served: Served, answer: str) -> None:
    async with logged_in(served.url, password=PASSWORD) as admin:
        feedback = f"{served.url}/console/answers/{answer}/feedback"
        async with admin.http.post(feedback, json={"vote": "up"}, headers=admin.headers()) as response:
            assert response.status == 200
            assert await response.json() == {"turn_id": answer, "vote": "up", "note": t("en", "feedback_thanks")}
        async with admin.http.post(feedback, json={"vote": "down", "reason": "wrong host"},
                                   headers={**admin.headers(), "Accept-Language": "zh-CN"}) as response:
            assert response.status == 200
            assert (await response.json())["note"] == t("zh-CN", "feedback_reason_thanks")
    record = await served.store.feedback_vote(answer, "web:admin")
    assert record is not None and (record.vote, record.reason) == ("down", "wrong host")
    assert record.question == QUESTION and record.tools == ("find_server",) and record.asker == "web:admin"


async def test_bad_votes_and_strangers_are_turned_away(served: Served, answer: str) -> None:
    feedback = f"{served.url}/console/answers/{answer}/feedback"
    async with logged_in(served.url, password=PASSWORD) as admin:
        async with admin.http.post(feedback, json={"vote": "up"}, headers=admin.headers(csrf=False)) as response:
            assert response.status == 403 and (await response.json())["code"] == "csrf"
        for body in ({"vote": "meh"}, {"vote": "up", "reason": "great"}, {"vote": "down", "reason": 7}):
            async with admin.http.post(feedback, json=body, headers=admin.headers()) as response:
                assert response.status == 400, body
        async with admin.http.post(f"{served.url}/console/answers/no-such-turn/feedback", json={"vote": "up"},
                                   headers=admin.headers()) as response:
            assert response.status == 404
    async with aiohttp.ClientSession() as anonymous, anonymous.post(feedback, json={"vote": "up"}) as response:
        assert response.status == 401
    async with logged_in(served.url, key=VIEWER_KEY) as viewer:  # api:dash, no admin: not its answer
        for action, body in (("feedback", {"vote": "down"}), ("refresh", {})):
            async with viewer.http.post(f"{served.url}/console/answers/{answer}/{action}", json=body,
                                        headers=viewer.headers()) as response:
                assert response.status == 404, action
    assert await served.store.feedback_vote(answer, "api:dash") is None


async def test_a_refresh_streams_the_question_asked_anew_in_the_same_conversation(served: Served, answer: str) -> None:
    async with logged_in(served.url, password=PASSWORD) as admin:
        async with admin.http.post(f"{served.url}/console/answers/{answer}/refresh",
                                   headers=admin.headers()) as response:
            events = await stream(response)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "turn" and "done" in kinds and "snapshot" in kinds, kinds
    new_id = events[0][1]["turn_id"]
    assert new_id and new_id != answer and events[0][1]["status"] in ("started", "queued")
    final = [data for kind, data in events if kind == "snapshot" and data["final"]]
    assert final and final[-1]["status"] == "done" and "prod-db-01" in final[-1]["answer"]
    records = {r.turn_id: r for r in await served.store.audit_records(limit=500)}
    assert records[new_id].question == QUESTION and records[new_id].outcome == "done"
    assert records[new_id].conversation_id == records[answer].conversation_id
    async with logged_in(served.url, password=PASSWORD) as admin:  # its answer is the asker's to look up
        async with admin.http.get(f"{served.url}/v1/turns/{new_id}") as response:
            assert response.status == 200 and (await response.json())["tool_calls"][0]["name"] == "find_server"


async def test_a_refresh_of_an_answer_not_on_record_says_so(served: Served) -> None:
    async with logged_in(served.url, password=PASSWORD) as admin:
        async with admin.http.post(f"{served.url}/v1/turns", json={"question": f"{SLOW} anything?"},
                                   headers=admin.headers()) as response:
            turn_id = ""
            async for kind, data in sse_events(response):
                if kind == "turn":
                    turn_id = data["turn_id"]
                if kind == "answer_delta":
                    break  # the stalled answer began: leaving stops it, so it is never an answer on record
        async with admin.http.post(f"{served.url}/v1/turns/{turn_id}/stop", headers=admin.headers()) as response:
            assert response.status in (200, 409)
        async with admin.http.post(f"{served.url}/console/answers/{turn_id}/refresh",
                                   headers=admin.headers()) as response:
            events = await stream(response)
    assert events[0][0] == "turn" and events[0][1]["status"] == "refused"
    assert events[-1] == ("error", {"kind": "turn_failed", "reason": "refused",
                                    "message": t("en", "refresh_unknown"), "partial_answer": ""})


async def test_a_console_without_the_chat_answers_503(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    server = HttpServer("127.0.0.1", 0)
    mount_console(server.app, SessionBook(store, admin_password_hash=hash_password(PASSWORD)), StatusParts(store=store))
    await server.start()
    try:
        async with logged_in(server.url, password=PASSWORD) as admin:
            async with admin.http.post(f"{server.url}/console/answers/t1/feedback", json={"vote": "up"},
                                       headers=admin.headers()) as response:
                assert response.status == 503
    finally:
        await server.aclose()
        await store.close()
