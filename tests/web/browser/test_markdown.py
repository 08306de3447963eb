"""The console's markdown renderer in a real browser: the whitelist is kept, HTML is text, no remote image is
fetched and only http(s) links survive."""

from __future__ import annotations

from typing import Any

from tests.paths import REPO

MARKDOWN_JS = REPO / "adapters" / "web" / "console" / "markdown.js"

HOSTILE = """# Host **prod-db-01**

<img src="https://images.invalid/x.png" onerror="window.pwned=1">
<script>window.pwned = 2</script>

- IP `10.0.1.100`
- zone _cn-hangzhou-b_
1. first
2. [docs](https://docs.example.com/hosts "title")

[click](javascript:window.pwned=3) and [mail](mailto:a@b.c)
![diagram](https://images.invalid/diagram.png)

| host | ip |
| --- | --- |
| prod-db-01 | 10.0.1.100 |

```
<b>not bold</b>
```
"""


async def test_markdown_renders_the_whitelist_and_nothing_else(browser: Any) -> None:
    page = await browser.new_page()
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    await page.set_content("<!doctype html><html><body><div id=out></div></body></html>")
    await page.add_script_tag(path=str(MARKDOWN_JS))
    await page.evaluate("text => document.getElementById('out').appendChild(renderMarkdown(text))", HOSTILE)
    html = await page.inner_html("#out")
    assert await page.evaluate("window.pwned") is None
    assert "<img" not in html and "<script" not in html
    assert await page.locator("#out img, #out script").count() == 0
    assert await page.text_content("#out h1") == "Host prod-db-01"
    assert await page.text_content("#out h1 strong") == "prod-db-01"
    assert await page.locator("#out ul li").count() == 2 and await page.locator("#out ol li").count() == 2
    assert await page.text_content("#out ul li code") == "10.0.1.100"
    assert await page.text_content("#out ul li em") == "cn-hangzhou-b"
    links = await page.eval_on_selector_all("#out a", "as => as.map(a => [a.textContent, a.href, a.rel])")
    assert links == [["docs", "https://docs.example.com/hosts", "noopener noreferrer"]]
    assert "click" in html and "javascript:" not in html and "mailto:" not in html
    assert await page.text_content("#out .md-image") == "[diagram]"
    assert await page.text_content("#out table tbody td") == "prod-db-01"
    assert await page.text_content("#out pre code") == "<b>not bold</b>"
    # The raw HTML lines are shown as text, not parsed.
    assert '<img src="https://images.invalid/x.png"' in await page.text_content("#out")
    assert not [url for url in fetched if "images.invalid" in url]
