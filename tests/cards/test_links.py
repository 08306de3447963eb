"""The link rule: only http(s) links are clickable, none hides its host, masked links and HTML are text."""

from __future__ import annotations

import pytest

from botgateway.cards.code_spans import code_ranges
from botgateway.cards.inert import inert_markup, stable_cut
from botgateway.cards.links import inert_links, reveals_host, safe_url
from tests.injection_corpus import CONTROL_URL, CORPUS, PAYLOADS, groups, markdown_problems, missing_words

Z = "\u200b"


@pytest.mark.parametrize(
    "text",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](   javascript:alert(1)  )",
        "[x](&#106;avascript&#58;alert(1))",
        "[x](&#x6A;avascript:alert(1))",
        "[x](&amp;#106;avascript:alert(1))",  # decoded twice by a renderer that decodes twice
        "[x](java&#x09;script:alert(1))",
        "[x](java&NewLine;script:alert(1))",
        "[x](\\javascript:alert(1))",
        "[x](<javascript:alert(1)>)",
        '[x](javascript:alert(1) "a title")',
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](vbscript:msgbox(1))",
        "[x](mailto:ops@example.com)",
        "[x](dtmd://dingtalkclient/sendMessage?content=hi)",
        "[x](/relative/path)",
        "[x](#anchor)",
        "[x]()",
        "[x](http:evil.example)",
        "[x](http://)",
        "[x](https://ex ample.com)",
    ],
)
def test_a_link_that_is_not_plainly_http_loses_its_link_and_keeps_its_text(text: str) -> None:
    out = inert_links(text)
    assert out == "x" or out.startswith(("x", "[x]" + Z)), out
    assert markdown_problems(out) == []


@pytest.mark.parametrize(
    ("text", "inert"),
    [
        ("[the runbook](https://evil.example/run)", "[the runbook (evil.example)](https://evil.example/run)"),
        ("[https://good.example](https://evil.example/)", "[https://good.example (evil.example)](https://evil.example/)"),
        ("[good.example](https://good.example@evil.example/x)", "[good.example (evil.example)](https://evil.example/x)"),
        ("[a](HTTPS://Evil.Example:8443/A?b=1&c=2#f)", "[a (evil.example)](https://evil.example:8443/A?b=1&c=2#f)"),
        ("[a](https://evil.example/a b)", "[a]\u200b(https://evil.example/a b)"),  # a space ends it: no link at all
        ("[a](<https://evil.example/a b>)", "[a (evil.example)](https://evil.example/a%20b)"),
        ("[a](https://evil.example/p(x)y)", "[a (evil.example)](https://evil.example/p%28x%29y)"),
        ("[a](https://evil.example/?q=&lt;x&gt;)", "[a (evil.example)](https://evil.example/?q=%3Cx%3E)"),
        ("[a](https://evil.example/?x=&amp;amp;y)", "[a (evil.example)](https://evil.example/?x=&y)"),  # decoded through
        ("[a](https://bücher.example/)", "[a (xn--bcher-kva.example)](https://xn--bcher-kva.example/)"),
        ("[a](http://[::1]:8080/)", "[a ([::1])](http://[::1]:8080/)"),
        ("[**bold**](https://e.example)", "[**bold** (e.example)](https://e.example)"),
        ("[](https://evil.example)", "[(evil.example)](https://evil.example)"),
    ],
)
def test_a_kept_link_is_written_plainly_and_shows_its_host(text: str, inert: str) -> None:
    assert inert_links(text) == inert
    assert markdown_problems(inert) == []


@pytest.mark.parametrize(
    "text",
    [
        "[docs.python.org](https://docs.python.org/3/)",
        "[https://docs.python.org/3/](https://docs.python.org/3/)",
        "[see docs.python.org/3](https://docs.python.org/3/)",
        "[the docs (docs.python.org)](https://docs.python.org/3/)",
        "[10.0.1.100](http://10.0.1.100:9090/graph)",
    ],
)
def test_a_link_whose_text_shows_its_host_is_left_as_written(text: str) -> None:
    assert inert_links(text) == text


def test_a_non_ascii_host_is_always_spelled_out() -> None:
    # The text names the same (look-alike) host: it is shown in the ASCII form a reader can tell apart.
    assert reveals_host("xn--ggle-55da.com", "xn--ggle-55da.com")
    assert not reveals_host("gооgle.com", "xn--ggle-55da.com")
    assert inert_links("[gооgle.com](https://gооgle.com/)") == (
        "[gооgle.com (xn--ggle-55da.com)](https://xn--ggle-55da.com/)"
    )


def test_an_address_is_read_the_way_a_browser_reads_it() -> None:
    assert safe_url("https://good.example\\@evil.example/") is not None  # \@ is a Markdown escape: "@"
    assert safe_url("https://good.example\\@evil.example/").host == "evil.example"  # type: ignore[union-attr]
    assert safe_url("https://evil.example\\a/").href == "https://evil.example/a/"  # type: ignore[union-attr]
    assert safe_url("https://evil%2Eexample/").host == "evil.example"  # type: ignore[union-attr]
    assert safe_url("https://evil.example#@good.example").host == "evil.example"  # type: ignore[union-attr]
    assert safe_url("https://evil.example:99999/") is None
    assert safe_url("https://e\u0000vil.example/") is None


@pytest.mark.parametrize(
    ("text", "inert"),
    [
        ("<http://evil.example/login|innocent link>", "innocent link (evil.example)"),
        ("<https://evil.example|https://good.example>", "https://good.example (evil.example)"),
        ("<https://ok.example/x|ok.example>", "ok.example"),
        ("<javascript:alert(1)|click>", "click"),
        ("<http://evil.example|>", "(evil.example)"),
        ("<https://ok.example/x>", "<https://ok.example/x>"),  # an autolink shows where it goes
        ("<HTTPS://ok.example>", f"<{Z}HTTPS://ok.example>"),  # not in plain form: text
        ("<javascript:alert(1)>", f"<{Z}javascript:alert(1)>"),
        ("<mailto:a@b.example>", f"<{Z}mailto:a@b.example>"),
        ("<script>x()</script>", f"<{Z}script>x()<{Z}/script>"),
        ('<a href="javascript:x">y</a>', f'<{Z}a href="javascript:x">y<{Z}/a>'),
        ("<font color=red>r</font>", f"<{Z}font color=red>r<{Z}/font>"),
        ("<!-- hidden -->", f"<{Z}!-- hidden -->"),
        ("<?php x ?>", f"<{Z}?php x ?>"),
        ("<![CDATA[x]]>", f"<{Z}![CDATA[x]]>"),
        ("&lt;script&gt; &LT;b&GT; &#60;i> &#x3C;u>", f"&lt;{Z}script&gt; &LT;{Z}b&GT; &#60;{Z}i> &#x3C;{Z}u>"),
        ("<@U123> <#C123|general>", "<@U123> <#C123|general>"),  # Slack's mentions are the platform's
        ("a < b and 2<3", "a < b and 2<3"),
    ],
)
def test_masked_links_and_html_become_text(text: str, inert: str) -> None:
    assert inert_links(text) == inert
    assert markdown_problems(inert) == []


def test_reference_definitions_are_broken_so_no_reference_links() -> None:
    text = "[a][r] [b][] [r]\n\n[r]: https://evil.example\n> [q]: javascript:x\n- [l]:\n  https://evil.example"
    out = inert_links(text)
    assert out.count(f"]{Z}:") == 3
    assert markdown_problems(out) == [] and "](" not in out


def test_what_the_scanner_does_not_read_as_a_link_cannot_be_one_elsewhere() -> None:
    # Parentheses nested twice: a CommonMark renderer reads a link, this rule does not; its "](" is broken.
    out = inert_links("[x](javascript:alert((1)))")
    assert out == f"[x]{Z}(javascript:alert((1)))"
    assert markdown_problems(out) == []
    # Links nested deeper than the rule reads them: their text stays, none is drawn.
    deep = "[" * 3000 + "x" + "](javascript:y)" * 3000
    assert markdown_problems(inert_links(deep)) == []


@pytest.mark.parametrize(
    "text",
    [
        "`[x](javascript:y)` and `<script>` stay as written",
        "```\n[x](javascript:y) <b>\n```",
        "~~~\n<!-- x -->\n~~~",
        "``a ` [x](javascript:y) b``",
    ],
)
def test_code_is_left_as_written(text: str) -> None:
    assert inert_markup(text, "en") == text


@pytest.mark.parametrize(
    "text",
    [
        "a ` b\n\n[x](javascript:y) <b>\n\nc ` d",  # a code span never crosses a blank line
        "```x`\n[x](javascript:y) <b>",  # a backtick fence's info string has no backtick
        "- item\n\n  ```\n  code\n\n[x](javascript:y) <b>\n\n  ```",  # the list item ended, and its fence with it
        "a \\` [x](javascript:y) <b> `",  # an escaped backtick opens nothing
        "[x](http://a.example/`) [y](javascript:z) <b> `",  # no rewrite moves a backtick
    ],
)
def test_what_a_renderer_reads_as_prose_is_not_taken_for_code(text: str) -> None:
    out = inert_markup(text, "en")
    assert markdown_problems(out) == [], out


def test_an_indented_fence_that_stays_indented_is_code() -> None:
    text = "1. run:\n   ```\n   kubectl logs <pod>\n   ```\n2. done <b>"
    out = inert_markup(text, "en")
    assert "kubectl logs <pod>" in out and f"<{Z}b>" in out
    assert len(code_ranges(text)) == 1


def test_every_payload_of_the_corpus_is_inert_and_still_shown() -> None:
    out = inert_markup(CORPUS, "en")
    assert markdown_problems(CORPUS) != []  # the corpus does carry what it should
    assert markdown_problems(out) == []
    assert missing_words(out) == []
    assert f"({CONTROL_URL})" in out, "the legitimate link is still a link"


@pytest.mark.parametrize("text", [CORPUS, *groups(), *(payload.text for payload in PAYLOADS)])
def test_the_rule_applied_twice_changes_nothing_more(text: str) -> None:
    once = inert_markup(text, "en")
    assert inert_markup(once, "en") == once


def _texts() -> list[str]:
    tricky = (
        "Run `kubectl logs <pod>` then [x](javascript:alert((1)) and [y](http://a.example (t))\n\n"
        "- item [z](http://b.example/`) ` tail\n  ```\n  <pod>\n  ```\n[w](https://c.example 'u') &lt;!here&gt;\n\n"
        "a \\` b [v](<javascript:q>) <http://evil.example|x> ![i](http://e.example/i) end"
    )
    return [CORPUS, tricky, "\n\n".join(groups())]


@pytest.mark.parametrize("text", _texts())
def test_a_growing_text_streams_append_only(text: str) -> None:
    full = inert_markup(text, "en")
    for end in range(len(text) + 1):
        head = text[:end]
        sent = inert_markup(head[: stable_cut(head)], "en")
        assert full.startswith(sent), (end, head[-40:], sent[-60:])


def test_a_stream_holds_an_open_link_and_an_open_code_span() -> None:
    assert stable_cut("see [the runbook](https://evil.example/ru") == 4
    assert stable_cut("see [the runbook") == 4
    assert stable_cut("see [the runbook]") == 4  # a "(" may follow
    assert stable_cut("see [the runbook] now") == len("see [the runbook] now")
    assert stable_cut("see [a](javascript:alert(") == 4  # the parenthesis may close
    assert stable_cut("run `kubectl logs <pod") == 4  # the span may close: "<pod>" would then be code
    assert stable_cut("run `kubectl logs` now") == len("run `kubectl logs` now")
    assert stable_cut("x &lt;!here") == 2
