"""The console against a real ``botgateway run`` process, in headless Chromium: log in with the admin password, ask
the demo model about an IP and watch the card (a tool line before the answer is done, then the host named), stop a
scripted slow answer, and read the turn on the Audit page. The card comes from the turn's one stream; one without
a final snapshot (its card kept elsewhere, or cut short) is settled from the turn's record. A screenshot of the chat
mid-answer is saved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.password_hash import hash_password
from tests.cli.gateway_process import GatewayProcess, free_port, start_gateway
from tests.paths import SAMPLE_INVENTORY
from tools.demo.script import Pause, Script, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

PASSWORD = "console admin password"
HASH = hash_password(PASSWORD)

# Every mutation of the thread is noted: whether a tool line was there, and the card's status then.
WATCH_CARD = """() => {
  window.__seen = [];
  const thread = document.getElementById("thread");
  new MutationObserver(() => {
    const card = thread.querySelector(".card");
    if (card) window.__seen.push({tools: card.querySelectorAll(".tool-line").length, status: card.dataset.status});
  }).observe(thread, {childList: true, subtree: true, attributes: true});
}"""

MID_ANSWER = """() => {
  const card = document.querySelector(".card");
  const answer = card && card.querySelector(".answer");
  return card && (card.dataset.status === "done" || (answer && answer.textContent.length > 80));
}"""


def console_config(tmp_path: Path, port: int, llm: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """The demo (or ``llm``) model, no chat adapters, SQLite in ``tmp_path``, the API and console on ``port``;
    ``sections`` added."""
    return {
        **sections,
        "log": {"level": "info", "format": "json"},
        "llm": llm,
        "memory": {"store": "sqlite", "sqlite_path": str(tmp_path / "data" / "state.db")},
        "http": {"enabled": True, "host": "127.0.0.1", "port": port},
        "web": {"admin_password_hash": HASH},
        "tools": {"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}},
        "card": {"footer": True},
        "adapters": {"terminal": {"enabled": False}, "slack": {"enabled": False}, "dingtalk": {"enabled": False}},
    }


async def running(tmp_path: Path, llm: dict[str, Any], **sections: Any) -> GatewayProcess:
    gateway = await start_gateway(tmp_path, console_config(tmp_path, free_port(), llm, **sections))
    try:
        await gateway.wait_readyz(200)
    except BaseException:
        await gateway.kill()
        raise
    return gateway


@pytest.fixture
async def demo_gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gateway = await running(tmp_path, {"provider": "demo"})
    yield gateway
    await gateway.kill()


async def logged_in(browser: Any, url: str) -> Any:
    context = await browser.new_context(locale="en-US", viewport={"width": 1280, "height": 760}, color_scheme="light")
    page = await context.new_page()
    await page.goto(f"{url}/login")
    await page.fill("#secret", PASSWORD)
    await page.click("#login-submit")
    await page.wait_for_url(f"{url}/")
    await page.locator("#who", has_text="web:admin").wait_for()
    return page


async def ask(page: Any, question: str) -> None:
    await page.fill("#question", question)
    await page.press("#question", "Enter")


async def test_ask_the_demo_model_watch_the_card_then_read_the_audit(
    browser: Any, demo_gateway: GatewayProcess, artifacts: Path
) -> None:
    page = await logged_in(browser, demo_gateway.probe_url)
    requests: list[Any] = []
    page.on("request", lambda request: requests.append(request))
    await page.evaluate(WATCH_CARD)
    await ask(page, "which server is 10.0.1.100?")

    await page.locator(".card .tool-line").first.wait_for()
    # Some of the answer typed out (or, on a machine too slow to catch it mid-way, all of it): the screenshot.
    await page.wait_for_function(MID_ANSWER)
    await page.screenshot(path=str(artifacts / "chat-mid-answer.png"))
    await page.locator('.card[data-status="done"]').wait_for(timeout=30_000)

    seen = await page.evaluate("window.__seen")
    first_tool = next(i for i, state in enumerate(seen) if state["tools"])
    assert seen[first_tool]["status"] not in ("done", "failed", "stopped")  # the tool line came before the end
    assert await page.locator(".card .tool-line", has_text="find_server").count() == 1
    answer = await page.text_content(".card .answer")
    assert answer is not None and "prod-db-01" in answer
    assert await page.text_content(".card .card-footer")  # the footer is drawn
    assert await page.locator(".card .stop").count() == 0  # a final card offers no Stop
    # The card came from the turn's own stream (snapshots asked for), with no second connection to the card: a
    # gateway with several workers or replicas may serve another request from a process that does not keep it.
    posts = [r for r in requests if r.method == "POST" and r.url.endswith("/v1/turns")]
    assert len(posts) == 1 and posts[0].post_data_json["snapshots"] is True
    assert not [r for r in requests if "/card" in r.url]
    # The conversation is kept in this browser, titled by its first question.
    assert await page.text_content("#conversation-list li") == "which server is 10.0.1.100?×"

    await page.click("#nav a[data-page=audit]")
    row = page.locator("#report-table tbody tr", has_text="find_server")
    await row.wait_for()
    text = await row.text_content()
    assert text is not None and "web:admin" in text and "which server is 10.0.1.100?" in text and "ok" in text
    await page.context.close()


async def test_stop_a_slow_answer(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    async with ScriptedLLMServer() as llm:
        # The answer starts, then the model goes quiet: only Stop ends the turn.
        llm.enqueue(Script(chunks=[role_chunk(), *text_chunks("Looking into it, this will take", size=8), Pause(60),
                                   *text_chunks(" ages.", size=8)]))
        gateway = await running(tmp_path, {"provider": "custom", "base_url": llm.base_url, "api_key": "test",
                                           "model": "slow-model", "max_retries": 0})
        try:
            page = await logged_in(browser, gateway.probe_url)
            await ask(page, "how are the disks?")
            await page.locator(".card .answer", has_text="this will take").wait_for()
            await page.click(".card .stop")
            await page.locator('.card[data-status="stopped"]').wait_for(timeout=20_000)
            assert "this will take" in (await page.text_content(".card .answer") or "")
            assert await page.locator(".card .stop").count() == 0
            await page.context.close()
        finally:
            await gateway.kill()



async def test_approve_a_call_that_waits_for_an_approver(browser: Any, tmp_path: Path) -> None:
    access = {"roles": {"ops": {"members": ["web:admin"], "tools": ["*"], "approve": True}},
              "approvals": {"tools": ["find_server"]}}
    gateway = await running(tmp_path, {"provider": "demo"}, access=access)
    try:
        page = await logged_in(browser, gateway.probe_url)
        await ask(page, "which server is 10.0.1.100?")
        prompt = page.locator(".card .approval", has_text="find_server")
        await prompt.wait_for()
        assert "10.0.1.100" in (await prompt.locator("pre").text_content() or "")  # what would run, in full
        assert await page.locator('.card .tool-line[data-status="waiting"]').count() == 1
        await prompt.locator("button.approve").click()
        await page.locator('.card[data-status="done"]').wait_for(timeout=30_000)
        assert await page.locator(".card .approval").count() == 0
        line = await page.text_content(".card .tool-line")
        assert line is not None and "approved" in line
        assert "prod-db-01" in (await page.text_content(".card .answer") or "")
        await page.context.close()
    finally:
        await gateway.kill()


def without_snapshots(body: str) -> str:
    """The turn's stream as a process that does not keep its card sends it: no ``snapshot`` messages."""
    return "".join(m + "\n\n" for m in body.split("\n\n") if m.strip() and not m.startswith("event: snapshot"))


def cut_after_turn(body: str) -> str:
    """The turn's stream broken after its first message (a proxy or a replica going away)."""
    return body.split("\n\n")[0] + "\n\n"


@pytest.mark.parametrize("reshape", [without_snapshots, cut_after_turn])
async def test_a_card_settles_from_the_turn_record_when_its_stream_brings_no_final_snapshot(
    browser: Any, demo_gateway: GatewayProcess, reshape: Any
) -> None:
    page = await logged_in(browser, demo_gateway.probe_url)

    async def reshaped(route: Any) -> None:
        if route.request.method != "POST":
            await route.fallback()
            return
        response = await route.fetch()  # the whole turn, streamed by the real gateway
        await route.fulfill(response=response, body=reshape(await response.text()))

    await page.route("**/v1/turns", reshaped)
    # Nor does this process keep the card (another worker's or replica's turn): its card URL is unknown here.
    await page.route("**/v1/turns/*/card", lambda route: route.fulfill(status=404, json={"error": "not kept here"}))
    looked_up: list[str] = []
    page.on("request", lambda r: looked_up.append(r.url) if r.method == "GET" and "/v1/turns/" in r.url else None)
    await ask(page, "which server is 10.0.1.100?")

    await page.locator('.card[data-status="done"]').wait_for(timeout=30_000)
    assert "prod-db-01" in (await page.text_content(".card .answer") or "")
    assert await page.locator(".card .stop").count() == 0
    turn_id = await page.evaluate("JSON.parse(localStorage.getItem('botgateway.conversations.web:admin'))[0]"
                                  ".turns[0].turnId")
    assert turn_id and any(url.endswith(f"/v1/turns/{turn_id}") for url in looked_up)  # its record, fleet-wide
    await page.context.close()

