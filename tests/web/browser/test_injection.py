"""The injection corpus in the console: a real ``botgateway run`` with a real MCP server, drawn by headless Chromium.

Issue 25's corpus (:mod:`tests.injection_corpus`) arrives as tool text (the
scripted model calls the MCP server's ``echo`` tool with the payloads, then
repeats what it answered) and as model text (its own thought and answer). The
card must draw it inert: no element but the renderer's whitelist (no script,
image, frame or ``<font>``), no script run, nothing fetched from the
attacker's host, every link http(s) with its host beside its text, the
legitimate link still a link, every payload's words still shown. A reload
draws the card again from what this browser kept, by the console's own rule.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.gateway_process import GatewayProcess, free_port, start_gateway
from tests.injection_corpus import CONTROL_HOST, CONTROL_URL, EVIL, MODES, Mode, groups, missing_words, scripted_model
from tests.paths import FAKES
from tests.web.browser.test_console_chat import ask, console_config, logged_in
from tools.demo.server import ScriptedLLMServer

ELEMENTS = {"div", "span", "p", "strong", "em", "code", "pre", "ul", "ol", "li", "blockquote", "br", "a", "table",
            "thead", "tbody", "tr", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6", "button", "details", "summary",
            "time", "svg", "path"}
"""What a card may be made of (the console's markdown whitelist and the card's own parts: its tool calls that open,
its time, its buttons' thumbs)."""

CARD = """() => {
  const card = document.querySelector(".card");
  return {
    tags: [...new Set([...card.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()))],
    handlers: [...card.querySelectorAll("*")].flatMap((e) => [...e.attributes].map((a) => a.name))
      .filter((name) => name.startsWith("on")),
    links: [...card.querySelectorAll("a")].map((a) => ({text: a.textContent, href: a.href, protocol: a.protocol,
                                                       host: a.hostname, rel: a.rel})),
    text: card.textContent,
    pwned: window.pwned === undefined ? null : String(window.pwned),
  };
}"""


async def _gateway(tmp_path: Path, llm: ScriptedLLMServer) -> GatewayProcess:
    """The console on a free port, the scripted model, the fake MCP server (``ops__echo``) for the admin."""
    llm_config = {"provider": "custom", "base_url": llm.base_url, "api_key": "test", "model": "scripted-model",
                  "max_retries": 0}
    config = console_config(tmp_path, free_port(), llm_config,
                            access={"roles": {"ops": {"members": ["web:admin"], "tools": ["*"]}}})
    config["tools"]["mcp"] = [{"name": "ops", "command": sys.executable, "args": [str(FAKES / "mcp_server.py"), "stdio"]}]
    gateway = await start_gateway(tmp_path, config)
    try:
        await gateway.wait_readyz(200)
    except BaseException:
        await gateway.kill()
        raise
    return gateway


def _assert_inert(card: dict[str, Any]) -> None:
    assert set(card["tags"]) <= ELEMENTS, f"elements beyond the whitelist: {set(card['tags']) - ELEMENTS}"
    assert card["handlers"] == [] and card["pwned"] is None, "a script ran"
    for link in card["links"]:
        assert link["protocol"] in ("http:", "https:"), link
        assert link["text"].rstrip().endswith(f"({link['host']})"), f"a link hides its host: {link}"
        assert link["rel"] == "noopener noreferrer"
    assert missing_words(card["text"]) == [], "made inert, every payload is still shown"
    control = [link for link in card["links"] if link["href"] == CONTROL_URL]
    assert [link["text"] for link in control] == [f"the Grafana board ({CONTROL_HOST})"], "a safe link stays a link"


@pytest.mark.parametrize("mode", MODES)
async def test_the_injection_corpus_is_drawn_inert_in_the_console(browser: Any, tmp_path: Path, mode: Mode) -> None:
    async with ScriptedLLMServer(responder=scripted_model(mode, "ops__echo", "text")) as llm:
        gateway = await _gateway(tmp_path, llm)
        try:
            page = await logged_in(browser, gateway.probe_url)
            fetched: list[str] = []
            page.on("request", lambda request: fetched.append(request.url))
            await ask(page, "what do the servers say?")
            await page.locator('.card[data-status="done"]').wait_for(timeout=30_000)
            groups_count = len(groups())
            if mode == "tool":
                assert await page.locator(".card .tool-line", has_text="ops__echo").count() == groups_count
                [*_, answer_request] = llm.requests
                assert [m["role"] for m in answer_request["messages"]].count("tool") == len(groups())
            _assert_inert(await page.evaluate(CARD))
            if mode == "tool":  # each call opened: its arguments and result are drawn as text too
                for line in await page.locator(".card .tool-line").all():
                    await line.click()
                await page.wait_for_function(
                    "n => document.querySelectorAll('.card .tool-details .tool-field').length === 3 * n", arg=groups_count)
                _assert_inert(await page.evaluate(CARD))

            await page.reload()  # drawn again from what the browser kept, by its own rule
            await page.locator('.card[data-status="done"]').wait_for()
            _assert_inert(await page.evaluate(CARD))
            assert not [url for url in fetched if EVIL in url], "something was fetched from the attacker's host"
            await page.context.close()
        finally:
            await gateway.kill()
