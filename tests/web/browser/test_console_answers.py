"""What a console card offers beside its answer, at 390 px (a touch phone) and at 1280 px, in headless Chromium
against the gateway in this process: its time (local, the full ISO time on hover), each tool call opened to its
arguments, result and sources (from the turn's events while it runs, from its record once done), Copy (the
answer on the clipboard), 👍 / 👎 with a reason (read back from the gateway's own Store, where Slack's and
DingTalk's votes go), and Ask again (the answer's Refresh: a new card, a new turn); the page stays within the
window throughout, and the console's icon is served. One browser and one gateway serve the module, and one
logged-in page each width."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import pytest_asyncio

from botgateway.stores.sqlite import SqliteStore
from tests.polling import until_read
from tests.web.browser.console_harness import (
    IP,
    LEAD,
    NO_OVERFLOW,
    SLOW,
    STALLED,
    ask,
    console_gateway,
    logged_in,
    store_path,
)
from tools.providers.inventory import LABEL

pytestmark = pytest.mark.asyncio(loop_scope="module")

WIDTHS = {"phone": 390, "desktop": 1280}
QUESTION = f"which server is {IP}?"
FIRST = ".turn:nth-child(1) .card"
"""The card of the question each page asked first."""

SAVED_TURN = """() => {
  const saved = JSON.parse(localStorage.getItem("botgateway.conversations.web:admin"));
  return saved[0].turns[0];
}"""


class Served:
    """The gateway's URL, its Store (opened on the same SQLite file) and when the module began."""

    def __init__(self, url: str, store: SqliteStore) -> None:
        self.url = url
        self.store = store
        self.since = time.time()


class Answered:
    """A logged-in page of one width whose first question was answered."""

    def __init__(self, page: Any, width: int, turn_id: str) -> None:
        self.page = page
        self.width = width
        self.turn_id = turn_id


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    folder = tmp_path_factory.mktemp("answers")
    async with console_gateway(folder) as url:
        store = SqliteStore(store_path(folder))
        await store.open()
        try:
            yield Served(url, store)
        finally:
            await store.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(WIDTHS))
async def answered(request: pytest.FixtureRequest, module_browser: Any, served: Served) -> AsyncIterator[Answered]:
    """A page of each width, with the clipboard allowed, that asked :data:`QUESTION` and got its answer."""
    width = WIDTHS[request.param]
    page = await logged_in(module_browser, served.url, width=width, phone=request.param == "phone",
                           permissions=["clipboard-read", "clipboard-write"])
    await ask(page, QUESTION)
    await page.locator(f'{FIRST}[data-status="done"]').wait_for(timeout=30_000)
    turn = await page.evaluate(SAVED_TURN)
    yield Answered(page, width, turn["turnId"])
    await page.context.close()


async def assert_fits(answered: Answered) -> None:
    sizes = await answered.page.evaluate(NO_OVERFLOW)
    assert sizes["innerWidth"] == answered.width and sizes["scrollWidth"] <= answered.width, sizes
    assert sizes["threadScroll"] <= sizes["threadClient"], sizes


async def test_the_card_shows_when_it_was_answered(answered: Answered, served: Served) -> None:
    stamp = answered.page.locator(f"{FIRST} .card-head time.card-time")
    iso = await stamp.get_attribute("datetime")
    assert iso is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", iso)
    assert await stamp.get_attribute("title") == iso  # the full time on hover
    at = datetime.fromisoformat(iso).timestamp()
    assert served.since - 1 <= at <= time.time() + 1
    shown = await stamp.text_content()
    local = await answered.page.evaluate(
        "iso => new Date(iso).toLocaleString('en-US', {hour: '2-digit', minute: '2-digit'})", iso)
    assert shown == local  # today's answer: the local hour and minute


async def test_a_tool_call_opens_to_its_arguments_result_and_sources(answered: Answered) -> None:
    page = answered.page
    line = page.locator(f"{FIRST} .tool-line", has_text="find_server")
    details = page.locator(f"{FIRST} .tool-call .tool-details")
    assert not await details.is_visible()
    looked_up: list[str] = []
    page.on("request", lambda r: looked_up.append(r.url) if r.method == "GET" and "/v1/turns/" in r.url else None)
    await line.click()
    await details.locator(".tool-sources li").first.wait_for()
    fields = await details.locator(".tool-field").all_text_contents()
    assert fields[0].startswith("Arguments") and f'"query": "{IP}"' in fields[0]
    assert fields[1].startswith("Result") and "prod-db-01" in fields[1]
    assert fields[2].startswith("Sources") and LABEL in fields[2]
    assert any(url.endswith(f"/v1/turns/{answered.turn_id}") for url in looked_up)  # from its record, now done
    await assert_fits(answered)
    await line.click()
    await details.wait_for(state="hidden")


async def test_copy_puts_the_answer_on_the_clipboard(answered: Answered) -> None:
    page = answered.page
    await page.evaluate("() => navigator.clipboard.writeText('')")
    await page.click(f"{FIRST} .answer-actions .copy")
    await page.locator(f"{FIRST} .answer-actions .copy", has_text="Copied").wait_for()
    copied = await page.evaluate("() => navigator.clipboard.readText()")
    assert copied == (await page.evaluate(SAVED_TURN))["answer"]
    assert copied.startswith(LEAD) and "prod-db-01" in copied  # the answer's markdown, as written


async def test_a_vote_and_a_reason_land_in_the_gateways_feedback_store(answered: Answered, served: Served) -> None:
    page, turn_id = answered.page, answered.turn_id
    await page.click(f"{FIRST} .vote-up")
    await page.locator(f"{FIRST} .answer-note", has_text="Thanks for your feedback.").wait_for()
    assert await page.get_attribute(f"{FIRST} .vote-up", "aria-pressed") == "true"
    voted = await served.store.feedback_vote(turn_id, "web:admin")
    assert voted is not None and voted.vote == "up" and voted.reason == ""
    assert voted.question == QUESTION and voted.tools == ("find_server",)
    assert [source.get("label") for source in voted.sources] == [LABEL]

    await page.click(f"{FIRST} .vote-down")  # changes the vote, and asks why
    await page.fill(f"{FIRST} .reason-form input", "it is the wrong host")
    await page.click(f"{FIRST} .reason-form button")
    await page.locator(f"{FIRST} .answer-note", has_text="your reason was recorded").wait_for()
    assert await page.locator(f"{FIRST} .reason-form").count() == 0
    assert await page.get_attribute(f"{FIRST} .vote-down", "aria-pressed") == "true"
    voted = await served.store.feedback_vote(turn_id, "web:admin")
    assert voted is not None and voted.vote == "down" and voted.reason == "it is the wrong host"
    assert voted.platform == "web" and voted.asker == "web:admin"
    await assert_fits(answered)


async def test_ask_again_asks_the_question_anew_in_a_new_card(answered: Answered, served: Served) -> None:
    page = answered.page
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    before = await page.locator(".turn").count()
    await page.click(f"{FIRST} .answer-actions .ask-again")
    again = page.locator(".turn").nth(before)
    await again.locator('.card[data-status="done"]').wait_for(timeout=30_000)
    assert await again.locator(".question").text_content() == QUESTION
    assert "prod-db-01" in (await again.locator(".answer").text_content() or "")
    assert posts == [f"{served.url}/console/answers/{answered.turn_id}/refresh"]

    saved = await page.evaluate("() => JSON.parse(localStorage.getItem('botgateway.conversations.web:admin'))[0]")
    new_id = saved["turns"][-1]["turnId"]
    assert new_id and new_id != answered.turn_id and saved["turns"][-1]["status"] == "done"
    # The audit record is written once the card is final: a moment after the browser shows it, by another process.
    found = await until_read(lambda: served.store.audit_records(limit=500),
                             lambda found: any(r.turn_id == new_id for r in found))
    records = {r.turn_id: r for r in found}
    assert records[new_id].question == QUESTION and records[new_id].principal == "web:admin"
    assert records[new_id].conversation_id == records[answered.turn_id].conversation_id  # the same conversation

    # Its card's call opens too: from its record (a Refresh's stream carries its card, not its events).
    await again.locator(".tool-line", has_text="find_server").click()
    await again.locator(".tool-details .tool-sources li").first.wait_for()
    assert f'"query": "{IP}"' in (await again.locator(".tool-details pre").text_content() or "")
    await assert_fits(answered)


async def test_a_running_calls_details_come_from_its_events(answered: Answered) -> None:
    page = answered.page
    await ask(page, f"{SLOW} is {IP} healthy?")
    card = page.locator(".turn:last-child .card")
    await card.locator(".answer", has_text=STALLED).wait_for(timeout=30_000)
    await card.locator(".tool-line", has_text="find_server").click()
    details = card.locator(".tool-details")
    await details.locator(".tool-sources li").first.wait_for()
    assert f'"query": "{IP}"' in (await details.locator("pre").text_content() or "")
    assert LABEL in (await details.text_content() or "")
    assert await card.locator(".answer-actions").count() == 0  # nothing to copy or vote on yet
    await card.locator(".stop").click()
    await page.locator('.turn:last-child .card[data-status="stopped"]').wait_for(timeout=20_000)
    assert await card.locator(".tool-details").is_visible()  # still open after the redraws


async def test_the_console_icon_is_served(answered: Answered, served: Served) -> None:
    page = answered.page
    assert await page.get_attribute("link[rel=icon]", "href") == "/console/static/favicon.svg"
    for path in ("/console/static/favicon.svg", "/favicon.ico"):
        response = await page.request.get(f"{served.url}{path}")
        assert response.status == 200 and response.headers["content-type"].startswith("image/svg+xml")
        assert (await response.text()).startswith("<svg")

