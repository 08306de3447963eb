"""The console's markdown renderer in a real browser: the whitelist is kept, HTML is text, no remote image is
fetched and only http(s) links survive, each showing its host; on text the server did not make inert (kept in the
browser, a turn's record) it draws the same links as the server's rule leaves. An answer still streaming is drawn
with what is open at its end closed: no raw marker shows, and what shows stays put as the rest comes. One browser
serves the module."""

from __future__ import annotations

from typing import Any

import pytest

from botgateway.cards.inert import inert_markup
from tests.injection_corpus import CONTROL_HOST, CONTROL_URL, CORPUS
from tests.paths import REPO

pytestmark = pytest.mark.asyncio(loop_scope="module")

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


async def test_markdown_renders_the_whitelist_and_nothing_else(module_browser: Any) -> None:
    page = await module_browser.new_page()
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
    assert links == [["docs (docs.example.com)", "https://docs.example.com/hosts", "noopener noreferrer"]]
    assert "click" in html and "javascript:" not in html and "mailto:" not in html
    assert await page.text_content("#out .md-image") == "[diagram]"
    assert await page.text_content("#out table tbody td") == "prod-db-01"
    assert await page.text_content("#out pre code") == "<b>not bold</b>"
    # The raw HTML lines are shown as text, not parsed.
    assert '<img src="https://images.invalid/x.png"' in await page.text_content("#out")
    assert not [url for url in fetched if "images.invalid" in url]


LINKS = """text => {
  const out = document.createElement("div");
  out.appendChild(renderMarkdown(text));
  return [...out.querySelectorAll("a")].map(a => [a.textContent, a.href]);
}"""


async def test_the_console_draws_the_links_the_server_rule_leaves(module_browser: Any) -> None:
    page = await module_browser.new_page()
    await page.set_content("<!doctype html><html><body></body></html>")
    await page.add_script_tag(path=str(MARKDOWN_JS))
    raw = await page.evaluate(LINKS, CORPUS)  # as the browser kept it, or a record holds it
    inert = await page.evaluate(LINKS, inert_markup(CORPUS, "en"))  # as the server sends it
    assert raw == inert, "the same links, each named once"
    assert [f"the Grafana board ({CONTROL_HOST})", CONTROL_URL] in raw
    for text, href in raw:
        host = href.split("/")[2]
        assert href.startswith(("http://", "https://")) and text.endswith(f"({host})"), (text, href)
    assert len(raw) == 4  # the three look-alikes and the legitimate link; every other one lost its link


STREAMED = (
    "Host **prod-db-01** is `up`, in _cn-hangzhou-b_ (not prod_db); see [the runbook](https://docs.example.com/rb) "
    "and *mind the disk*.\n\n- **Disk**: 80 %\n\n```\ndf -h\n```\nDone."
)

# Each prefix of `text` drawn as a streaming answer is (its zero-width separators aside), beside what the whole
# text draws: its words, whether a raw marker shows, and what elements it made.
PREFIXES = """text => {
  const draw = (source, partial) => {
    const out = document.createElement("div");
    out.appendChild(renderMarkdown(source, partial));
    return out;
  };
  const whole = draw(text, false);
  const prefixes = [];
  for (let n = 1; n <= text.length; n++) {
    const shown = draw(text.slice(0, n), true);
    prefixes.push({ n, text: shown.textContent.replace(/\\u200b/g, ""),
                    strong: shown.querySelectorAll("strong").length,
                    unsafe: shown.querySelectorAll("img, script, iframe").length });
  }
  return { whole: whole.textContent, done: draw(text, true).innerHTML === whole.innerHTML, prefixes };
}"""


async def test_a_streaming_answer_shows_no_raw_markers_and_only_grows(module_browser: Any) -> None:
    page = await module_browser.new_page()
    await page.set_content("<!doctype html><html><body></body></html>")
    await page.add_script_tag(path=str(MARKDOWN_JS))
    drawn = await page.evaluate(PREFIXES, STREAMED)
    assert drawn["done"]  # the whole text draws the same, streaming or not
    for shown in drawn["prefixes"]:
        assert "**" not in shown["text"] and "`" not in shown["text"], shown
        assert "](" not in shown["text"], shown  # a link still coming shows as its words
        assert drawn["whole"].startswith(shown["text"]), shown  # what shows stays put as the rest comes
        assert not shown["unsafe"]
    bold = next(s for s in drawn["prefixes"] if s["n"] == len("Host **pr"))
    assert bold["strong"] == 1 and bold["text"] == "Host pr"  # bold from its first letter


async def test_a_streaming_hostile_answer_makes_no_image_or_html(module_browser: Any) -> None:
    page = await module_browser.new_page()
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    await page.set_content("<!doctype html><html><body><div id=out></div></body></html>")
    await page.add_script_tag(path=str(MARKDOWN_JS))
    made = await page.evaluate("""text => {
      let unsafe = 0;
      for (let n = 1; n <= text.length; n++) {
        const out = document.createElement("div");
        out.appendChild(renderMarkdown(text.slice(0, n), true));
        document.getElementById("out").replaceChildren(out);
        unsafe += out.querySelectorAll("img, script, iframe, [onerror]").length;
      }
      return unsafe;
    }""", HOSTILE)
    assert made == 0 and await page.evaluate("window.pwned") is None
    assert not [url for url in fetched if "images.invalid" in url]
