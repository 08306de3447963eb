"""The console's Status page in a real browser: each rate key's configured limit, learned limit and throttles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.session import SessionBook
from botgateway.budget import RateBudget, RateLimit
from botgateway.http import HttpServer
from botgateway.password_hash import hash_password
from botgateway.stores.sqlite import SqliteStore

PASSWORD = "correct horse battery staple"
KEY = "dingtalk:app-1:card"


async def test_the_status_page_shows_what_a_throttle_taught_a_key(browser: Any, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    budget = RateBudget()
    assert budget.try_acquire(KEY, RateLimit(rate_per_s=19.0, burst=1, arrivals_per_s=20), "card")
    budget.pause(KEY, 30.0)  # DingTalk answered 403 QpsLimit
    server = HttpServer("127.0.0.1", 0)
    mount_console(server.app, SessionBook(store, admin_password_hash=hash_password(PASSWORD)),
                  StatusParts(store=store, budget=lambda: budget))
    await server.start()
    try:
        context = await browser.new_context(locale="en-US")
        page = await context.new_page()
        await page.goto(f"{server.url}/login")
        await page.fill("#secret", PASSWORD)
        await page.click("#login-submit")
        await page.wait_for_url(f"{server.url}/")
        await page.click("#nav a[data-page=status]")
        row = page.locator("#status-body tr", has_text=KEY)
        await row.wait_for()
        table = row.locator("xpath=ancestor::table")
        headers = await table.locator("th").all_text_contents()
        cells = dict(zip(headers, await row.locator("td").all_text_contents(), strict=True))
        assert (cells["limit"], cells["learned"], cells["throttles"]) == ("19/s burst 1, 20/1s arriving", "9.5/s burst 1, 10/1s arriving", "1")
        await context.close()
    finally:
        await server.aclose()
        await store.close()
