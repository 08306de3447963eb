"""The console's browser tests' shared parts: a scripted model, the gateway in this process, logged-in pages.

The model answers by the question: one holding :data:`LONG` (a 20,000-character
unbroken token) gets it back inline and in a code block; one starting
:data:`SLOW` calls ``find_server`` then starts its answer and goes quiet (only
Stop ends it); any other calls ``find_server`` and answers :data:`LEAD` and the
tool's result. The gateway is :func:`tests.web.chart_gateway.chart_gateway`
(the sample inventory, the admin password's ``web:admin`` an admin), its SQLite
Store at :func:`store_path`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.estate_fixtures import tools_then_answer
from tests.web.chart_gateway import PASSWORD, chart_gateway
from tools.demo.script import Pause, Script, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

__all__ = [
    "IP", "LEAD", "LONG", "NO_OVERFLOW", "SLOW", "STALLED", "ask", "console_gateway", "console_model", "logged_in",
    "store_path",
]

IP = "10.0.1.100"
"""The address every question looks up (prod-db-01 in the sample inventory)."""
LEAD = "Here is what I found about **10.0.1.100**:"
"""The first line of an answer after its tool call."""
LONG = "".join(f"{n:04x}" for n in range(5000))
"""A 20,000-character token without a break opportunity (hex digits only)."""
SLOW = "slow:"
"""A question starting so gets a tool call, then an answer that stalls."""
STALLED = "Looking into the host, this will take"
"""What a slow answer says before it stalls."""

NO_OVERFLOW = """() => {
  const root = document.scrollingElement;
  const thread = document.getElementById("thread");
  return {
    innerWidth: window.innerWidth,
    clientWidth: root.clientWidth,
    scrollWidth: root.scrollWidth,
    threadScroll: thread ? thread.scrollWidth : 0,
    threadClient: thread ? thread.clientWidth : 0,
  };
}"""
"""The page's width against the window's, and the thread's own (a wider message would make it scroll sideways)."""


def _question(body: dict[str, Any]) -> tuple[str, bool]:
    """The question the model is asked, and whether tool results came since."""
    messages = body["messages"]
    asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    results = any(m.get("role") == "tool" for m in messages[asked:])
    return str(messages[asked].get("content") or ""), results


def console_model() -> ScriptedLLMServer:
    """The scripted model (see the module's doc)."""
    lookup = tools_then_answer([("call_1", "find_server", {"query": IP})], LEAD)

    def respond(body: dict[str, Any]) -> Script | Awaitable[Script]:
        question, results = _question(body)
        if LONG in question:
            return Script.text(f"The token, inline: {LONG}\n\n```\n{LONG}\n```\n\nDone.", chunk_size=4096)
        if SLOW in question and results:
            return Script(chunks=[role_chunk(), *text_chunks(STALLED, size=8), Pause(60), *text_chunks(".", size=8)])
        return lookup(body)

    return ScriptedLLMServer(responder=respond)


def store_path(folder: Path) -> Path:
    """The gateway's SQLite file, for a test to read what it stored."""
    return folder / "data" / "state.db"


@asynccontextmanager
async def console_gateway(folder: Path) -> AsyncIterator[str]:
    """The model and the gateway (questions of up to 50,000 characters); yields the gateway's URL."""
    async with console_model() as llm, chart_gateway(folder, llm.base_url,
                                                     gateway={"max_question_chars": 50_000}) as url:
        yield url


async def logged_in(browser: Any, url: str, *, width: int, phone: bool, **options: Any) -> Any:
    """A page of a new context ``width`` pixels wide (a touch phone's, with its viewport rules, when ``phone``),
    logged in with the admin password and showing the chat."""
    context = await browser.new_context(locale="en-US", viewport={"width": width, "height": 800 if phone else 760},
                                        is_mobile=phone, has_touch=phone, color_scheme="light", **options)
    page = await context.new_page()
    await page.goto(f"{url}/login")
    await page.fill("#secret", PASSWORD)
    await page.click("#login-submit")
    await page.wait_for_url(f"{url}/")
    await page.locator("#thread").wait_for(state="attached")
    await page.wait_for_function("() => document.getElementById('who').textContent === 'web:admin'")
    return page


async def ask(page: Any, question: str) -> None:
    """Start a new conversation (from the drawer on a phone) and ask ``question`` in it."""
    if await page.locator("#drawer-toggle").is_visible():
        await page.click("#drawer-toggle")
    await page.click("#new-conversation")
    await page.fill("#question", question)
    await page.press("#question", "Enter")
