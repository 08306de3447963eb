"""The console's pages in a real browser, served in-process over a real SQLite store: the login (a wrong password,
then the right one), the language and theme switches, the Audit table with its filters and CSV link, and the Status
page."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.web.console_routes import mount_console
from adapters.web.console_status import StatusParts
from adapters.web.session import SessionBook
from botgateway.http import HttpServer
from botgateway.password_hash import hash_password
from botgateway.stores.base import AuditRecord
from botgateway.stores.sqlite import SqliteStore

PASSWORD = "correct horse battery staple"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, SqliteStore]]:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    server = HttpServer("127.0.0.1", 0)
    mount_console(server.app, SessionBook(store, admin_password_hash=hash_password(PASSWORD)), StatusParts(store=store))
    await server.start()
    try:
        yield server.url, store
    finally:
        await server.aclose()
        await store.close()


async def test_login_in_chinese_then_the_audit_table_filters_and_links_its_csv(
    browser: Any, served: tuple[str, SqliteStore]
) -> None:
    url, store = served
    now = time.time()
    for turn_id, principal, question in (("t1", "slack:U1", "which server is 10.0.1.100?"),
                                         ("t2", "dingtalk:42", "磁盘满了吗")):
        await store.record_audit(AuditRecord(
            turn_id=turn_id, platform=principal.split(":")[0], conversation_id="c", user_id=principal.split(":")[1],
            question=question, outcome="done", started_at=now - 30, principal=principal,
        ))
    context = await browser.new_context(locale="zh-CN", color_scheme="light")
    page = await context.new_page()
    await page.goto(f"{url}/")
    await page.wait_for_url(f"{url}/login")
    assert await page.text_content("h1") == "登录 botgateway 控制台"
    await page.fill("#secret", "not the password")
    await page.click("#login-submit")
    await page.locator("#login-error").wait_for()
    assert await page.text_content("#login-error") == "API 密钥或密码不正确。"
    await page.click("#locale-toggle")
    assert await page.text_content("h1") == "Log in to the botgateway console"
    await page.fill("#secret", PASSWORD)
    await page.click("#login-submit")
    await page.wait_for_url(f"{url}/")
    await page.locator("#who", has_text="web:admin").wait_for()
    assert await page.text_content("#nav a[data-page=audit]") == "Audit"  # the switch is remembered

    assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(247, 247, 248)"
    await page.click("#theme-toggle")
    assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(17, 19, 22)"

    await page.click("#nav a[data-page=audit]")
    await page.locator("#report-table tbody tr").first.wait_for()
    assert await page.locator("#report-table tbody tr").count() == 2
    await page.fill("#report-filters input[name=user]", "slack:U1")
    await page.click("#report-filters button[type=submit]")
    await page.locator("#report-summary", has_text="1 row(s)").wait_for()
    row = await page.text_content("#report-table tbody tr")
    assert row is not None and "slack:U1" in row and "which server is 10.0.1.100?" in row
    href = await page.get_attribute("#report-csv", "href")
    assert href == "/console/api/audit?user=slack%3AU1&format=csv"
    async with page.expect_download() as download_info:
        await page.click("#report-csv")
    download = await download_info.value
    text = Path(await download.path()).read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("time,platform,") and "which server is 10.0.1.100?" in text
    assert "磁盘满了吗" not in text

    await store.heartbeat("replica-a", 60)
    await page.click("#nav a[data-page=status]")
    await page.locator("#status-body section").first.wait_for()
    assert await page.text_content("#status-body p.ok") == "ok"  # the store answers
    assert "replica-a" in (await page.text_content("#status-body") or "")
    await context.close()
