"""The conversations the console keeps in the browser's localStorage, against a real ``botgateway run``: only each
turn's question, status, final answer, id and time are saved (never its card), the newest 50 conversations of 50 turns at
most, a full storage drops the oldest and never stops a question, a turn left running by a reload is settled from
the gateway, and logging out forgets them all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.gateway_process import GatewayProcess
from tests.web.browser.test_console_chat import ask, logged_in, running
from tools.demo.script import Pause, Script, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

LAST = ".turn:last-child .card"
"""The card of the question asked last."""

KEY = "botgateway.conversations.web:admin"
"""Where the console saves the admin's conversations."""

SAVED = f"() => JSON.parse(localStorage.getItem({json.dumps(KEY)}))"

# localStorage with room for `limit` characters of saved conversations: a longer save throws as a full storage does.
SMALL_STORAGE = """limit => {
  window.__refused = 0;
  const setItem = Storage.prototype.setItem;
  Storage.prototype.setItem = function (key, value) {
    if (key.startsWith("botgateway.conversations.") && String(value).length > limit) {
      window.__refused += 1;
      throw new DOMException("the quota has been exceeded", "QuotaExceededError");
    }
    return setItem.call(this, key, value);
  };
}"""


@pytest.fixture
async def demo_gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gateway = await running(tmp_path, {"provider": "demo"})
    yield gateway
    await gateway.kill()


def conversations(count: int, turns: int, answer: str) -> list[dict[str, Any]]:
    """``count`` saved conversations of ``turns`` finished turns each, newest first."""
    return [{"id": f"web-{c:04d}", "title": f"conversation {c}",
             "turns": [{"question": f"q{c}.{n}", "turnId": f"t{c}.{n}", "status": "done", "answer": answer}
                       for n in range(turns)]}
            for c in range(count)]


async def seeded(page: Any, saved: list[dict[str, Any]]) -> None:
    """Put ``saved`` in the browser's storage and load the console again, which reads it."""
    await page.evaluate("([key, value]) => localStorage.setItem(key, value)", [KEY, json.dumps(saved)])
    await page.reload()
    await page.locator("#conversation-list li").first.wait_for()


async def test_only_the_answer_is_saved_a_reload_shows_it_and_logging_out_forgets_it(
    browser: Any, demo_gateway: GatewayProcess
) -> None:
    page = await logged_in(browser, demo_gateway.probe_url)
    await ask(page, "which server is 10.0.1.100?")
    await page.locator('.card[data-status="done"]').wait_for(timeout=30_000)

    saved = await page.evaluate(SAVED)
    assert len(saved) == 1 and saved[0]["title"] == "which server is 10.0.1.100?"
    (turn,) = saved[0]["turns"]
    # No card (no tool lines, approvals, footer): the question, its answer, its id and when it was answered.
    assert set(turn) == {"question", "turnId", "status", "answer", "at"}
    assert turn["status"] == "done" and turn["turnId"] and "prod-db-01" in turn["answer"]

    await page.reload()
    await page.locator('.card[data-status="done"]').wait_for()
    assert "prod-db-01" in (await page.text_content(".card .answer") or "")
    assert await page.text_content(".question") == "which server is 10.0.1.100?"

    await page.click("#logout")
    await page.wait_for_url("**/login")
    assert await page.evaluate(f"() => localStorage.getItem({json.dumps(KEY)})") is None
    await page.context.close()


async def test_the_newest_fifty_conversations_of_fifty_turns_are_kept(
    browser: Any, demo_gateway: GatewayProcess
) -> None:
    page = await logged_in(browser, demo_gateway.probe_url)
    await seeded(page, conversations(60, 60, "ok"))
    await ask(page, "which server is 10.0.1.100?")  # in the conversation shown: the newest one
    await page.locator(f'{LAST}[data-status="done"]').wait_for(timeout=30_000)

    saved = await page.evaluate(SAVED)
    assert [c["id"] for c in saved] == [f"web-{c:04d}" for c in range(50)]
    assert all(len(c["turns"]) == 50 for c in saved)
    assert saved[0]["turns"][0]["question"] == "q0.11"  # its oldest turns dropped
    assert saved[0]["turns"][-1]["question"] == "which server is 10.0.1.100?"
    assert await page.locator("#conversation-list li").count() == 50
    await page.context.close()


async def test_a_full_storage_drops_the_oldest_conversations_and_the_question_is_still_answered(
    browser: Any, demo_gateway: GatewayProcess
) -> None:
    page = await logged_in(browser, demo_gateway.probe_url)
    await page.context.add_init_script(script=f"({SMALL_STORAGE})(5000)")
    await seeded(page, conversations(3, 1, "x" * 3000))
    await page.click("#conversation-list li:nth-child(2) .conversation-title")  # ask in the middle one
    await ask(page, "which server is 10.0.1.100?")
    await page.locator(f'{LAST}[data-status="done"]').wait_for(timeout=30_000)
    assert "prod-db-01" in (await page.text_content(f"{LAST} .answer") or "")

    assert await page.evaluate("window.__refused") > 0
    saved = await page.evaluate(SAVED)
    assert [c["id"] for c in saved] == ["web-0001"]  # the one asked in, now the newest; the others dropped
    assert saved[0]["turns"][-1]["status"] == "done"
    await page.context.close()


async def test_a_turn_left_running_by_a_reload_is_settled_from_the_gateway(browser: Any, tmp_path: Path) -> None:
    async with ScriptedLLMServer() as llm:
        # The answer starts, then the model goes quiet: the reload closes the turn's stream, which stops it.
        llm.enqueue(Script(chunks=[role_chunk(), *text_chunks("Looking into it, this will take", size=8), Pause(60),
                                   *text_chunks(" ages.", size=8)]))
        gateway = await running(tmp_path, {"provider": "custom", "base_url": llm.base_url, "api_key": "test",
                                           "model": "slow-model", "max_retries": 0})
        try:
            page = await logged_in(browser, gateway.probe_url)
            await ask(page, "how are the disks?")
            await page.locator(".card .answer", has_text="this will take").wait_for()
            assert (await page.evaluate(SAVED))[0]["turns"][0]["status"] not in ("done", "failed", "stopped")

            await page.reload()
            await page.locator('.card[data-status="stopped"]').wait_for(timeout=20_000)
            assert await page.locator(".card .stop").count() == 0
            assert (await page.evaluate(SAVED))[0]["turns"][0]["status"] == "stopped"
            await page.context.close()
        finally:
            await gateway.kill()
