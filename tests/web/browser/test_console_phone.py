"""The console on a phone (390 px, a touch screen honouring the viewport meta) and on a desktop (1280 px), in
headless Chromium against the gateway in this process: the page is never wider than the window (no zoom-out
layout), the header is one compact bar whose Log out opens from ⋯, the conversations are a drawer (☰ opens it;
Escape, a tap outside and picking a conversation close it), a running card's Stop fits on the screen, and a
20,000-character unbroken token wraps in the question and the answer while its code block scrolls in its own box.
One browser, one gateway and one logged-in page per width serve the whole module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.web.browser.console_harness import IP, LONG, NO_OVERFLOW, SLOW, STALLED, ask, console_gateway, logged_in

pytestmark = pytest.mark.asyncio(loop_scope="module")

WIDTHS = {"phone": 390, "desktop": 1280}

# Where the long token's boxes are, against the thread's width.
LONG_TOKEN = """() => {
  const turn = [...document.querySelectorAll(".turn")].pop();
  const thread = document.getElementById("thread");
  const box = (el) => el.getBoundingClientRect();
  const pre = turn.querySelector(".answer pre");
  return {
    thread: box(thread).right,
    question: box(turn.querySelector(".question")).right,
    questionHeight: box(turn.querySelector(".question")).height,
    answer: box(turn.querySelector(".answer")).right,
    answerHeight: box(turn.querySelector(".answer p")).height,
    pre: box(pre).right,
    preScrolls: pre.scrollWidth > pre.clientWidth,
    preText: pre.textContent.length,
  };
}"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with console_gateway(tmp_path_factory.mktemp("phone")) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pages(module_browser: Any, gateway_url: str) -> AsyncIterator[dict[str, Any]]:
    """One logged-in page per width, kept for the module."""
    opened = {name: await logged_in(module_browser, gateway_url, width=width, phone=name == "phone")
              for name, width in WIDTHS.items()}
    yield opened
    for page in opened.values():
        await page.context.close()


async def assert_fits(page: Any, width: int) -> None:
    sizes = await page.evaluate(NO_OVERFLOW)
    assert sizes["innerWidth"] == width and sizes["clientWidth"] == width, sizes  # laid out at the screen's width
    assert sizes["scrollWidth"] <= sizes["innerWidth"], sizes
    assert sizes["threadScroll"] <= sizes["threadClient"], sizes


async def in_view(page: Any, selector: str) -> bool:
    """Whether the element is shown and wholly inside the window."""
    box = await page.locator(selector).bounding_box()
    width = await page.evaluate("window.innerWidth")
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width and box["width"] > 0


async def test_the_login_page_fits_a_phone(module_browser: Any, gateway_url: str) -> None:
    context = await module_browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True)
    page = await context.new_page()
    await page.goto(f"{gateway_url}/login")
    await page.locator("#login-submit").wait_for()
    sizes = await page.evaluate(NO_OVERFLOW)
    assert sizes["innerWidth"] == 360 and sizes["scrollWidth"] <= 360, sizes
    assert await page.get_attribute("link[rel=icon]", "href") == "/console/static/favicon.svg"
    await context.close()


async def test_the_phone_header_is_one_bar_with_its_menu(pages: dict[str, Any]) -> None:
    page = pages["phone"]
    await assert_fits(page, WIDTHS["phone"])
    header = await page.locator("header.top").bounding_box()
    assert header is not None and header["height"] < 56  # one line, not five
    assert not await page.locator("#logout").is_visible()
    await page.click("#menu-toggle")
    assert await page.get_attribute("#menu-toggle", "aria-expanded") == "true"
    assert await in_view(page, "#logout") and await in_view(page, "#theme-toggle")
    await page.keyboard.press("Escape")
    await page.locator("#logout").wait_for(state="hidden")
    await page.click("#menu-toggle")
    await page.locator("#logout").wait_for()
    await page.tap("#thread")  # a tap outside closes it
    await page.locator("#logout").wait_for(state="hidden")
    await assert_fits(page, WIDTHS["phone"])


async def test_the_desktop_header_shows_everything(pages: dict[str, Any]) -> None:
    page = pages["desktop"]
    await assert_fits(page, WIDTHS["desktop"])
    assert await page.locator("#logout").is_visible() and await page.locator("#conversations").is_visible()
    assert not await page.locator("#menu-toggle").is_visible()
    assert not await page.locator("#drawer-toggle").is_visible()


@pytest.mark.parametrize("name", list(WIDTHS))
async def test_a_long_unbroken_token_wraps_in_the_question_and_the_answer(pages: dict[str, Any], name: str) -> None:
    page = pages[name]
    await ask(page, LONG)
    await page.locator('.turn:last-child .card[data-status="done"]').wait_for(timeout=30_000)
    await assert_fits(page, WIDTHS[name])
    shown = await page.evaluate(LONG_TOKEN)
    assert shown["question"] <= shown["thread"] and shown["answer"] <= shown["thread"], shown
    assert shown["questionHeight"] > 100 and shown["answerHeight"] > 100  # wrapped onto many lines
    assert shown["pre"] <= shown["thread"] and shown["preScrolls"], shown  # the code block scrolls in its box
    assert shown["preText"] == len(LONG)


async def test_the_conversations_are_a_drawer_on_a_phone(pages: dict[str, Any]) -> None:
    page = pages["phone"]
    await ask(page, f"which server is {IP}?")
    await page.locator('.turn:last-child .card[data-status="done"]').wait_for(timeout=30_000)
    drawer = page.locator("#conversations")
    await drawer.wait_for(state="hidden")  # asking closed it

    await page.click("#drawer-toggle")
    await drawer.wait_for()
    assert await page.get_attribute("#drawer-toggle", "aria-expanded") == "true"
    await assert_fits(page, WIDTHS["phone"])
    await page.keyboard.press("Escape")
    await drawer.wait_for(state="hidden")

    await page.click("#drawer-toggle")
    await drawer.wait_for()
    await page.touchscreen.tap(WIDTHS["phone"] - 20, 400)  # on the dimmed thread, outside the drawer
    await drawer.wait_for(state="hidden")

    await page.click("#drawer-toggle")
    await drawer.wait_for()
    titles = page.locator("#conversation-list .conversation-title")
    assert await titles.count() >= 2
    await titles.nth(1).click()  # an older conversation: shown, and the drawer goes
    await drawer.wait_for(state="hidden")
    assert await page.locator(".turn").count() >= 1
    assert await page.text_content(".turn .question") != f"which server is {IP}?"


async def test_a_running_cards_stop_fits_on_a_phone(pages: dict[str, Any]) -> None:
    page = pages["phone"]
    await ask(page, f"{SLOW} is {IP} healthy?")
    card = ".turn:last-child .card"
    await page.locator(f"{card} .answer", has_text=STALLED).wait_for(timeout=30_000)
    await assert_fits(page, WIDTHS["phone"])
    assert await in_view(page, f"{card} .stop")
    await page.click(f"{card} .stop")
    await page.locator(f'{card}[data-status="stopped"]').wait_for(timeout=20_000)
    assert await page.locator(f"{card} .stop").count() == 0


async def test_the_admin_pages_fit_a_phone(pages: dict[str, Any], artifacts: Path) -> None:
    page = pages["phone"]
    for name, shown in (("audit", "#report-table tbody tr"), ("status", "#status-body section")):
        await page.click("#menu-toggle")
        await page.click(f"#nav a[data-page={name}]")
        await page.locator(shown).first.wait_for()
        assert not await page.locator("#drawer-toggle").is_visible()  # the drawer is the Chat page's
        await assert_fits(page, WIDTHS["phone"])
        await page.screenshot(path=str(artifacts / f"phone-{name}.png"))
    await page.click("#menu-toggle")
    await page.click("#nav a[data-page=chat]")
    await page.locator("#drawer-toggle").wait_for()


async def test_log_out_from_the_phone_menu(pages: dict[str, Any], gateway_url: str) -> None:
    page = pages["phone"]
    await page.click("#menu-toggle")
    await page.click("#logout")
    await page.wait_for_url(f"{gateway_url}/login")

