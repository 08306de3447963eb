"""Text sent as deltas: each piece only adds to what was sent, and the pieces join into the inert whole."""

from __future__ import annotations

import pytest

from botgateway.cards.inert import inert_markup
from botgateway.cards.inert_stream import InertStream
from tests.injection_corpus import CORPUS, groups, markdown_problems


def _rule(text: str) -> str:
    return inert_markup(text, "en")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("text", [CORPUS, "\n\n".join(groups())])
def test_the_pieces_join_into_the_inert_whole(text: str, size: int) -> None:
    stream = InertStream(_rule)
    pieces = [stream.push(text[i : i + size]) for i in range(0, len(text), size)]
    pieces.append(stream.close())
    assert "".join(pieces) == _rule(text)
    sent = ""
    for piece in pieces:  # what a client joined so far never draws a link or a tag the whole would not
        sent += piece
        assert markdown_problems(sent) == [], sent[-80:]


def test_plain_text_passes_at_once_and_a_construct_waits_until_it_is_complete() -> None:
    stream = InertStream(_rule)
    assert stream.push("web-1 is up. ") == "web-1 is up. "
    assert stream.push("See [the run") == "See "
    assert stream.push("book](https://evil.example/r") == ""
    assert stream.push(") now") == "[the runbook (evil.example)](https://evil.example/r) now"
    assert stream.push(" <scr") == " "
    assert stream.push("ipt>") == "<\u200bscript>"
    assert stream.push(" [x](javascript:") == " "
    assert stream.close() == "[x]\u200b(javascript:"
    assert stream.sent == _rule("web-1 is up. See [the runbook](https://evil.example/r) now <script> [x](javascript:")


def test_a_rule_that_takes_back_sent_text_loses_nothing() -> None:
    # A rule the stream cannot follow (it rewrites what was sent once more text comes): the rest follows apart.
    stream = InertStream(lambda text: text.replace("a", "b") if "&" in text else text)
    assert stream.push("aaa") == "aaa"
    assert stream.push("&") == ""
    assert stream.close() == "\n\n&"
    assert stream.sent == "aaa\n\n&"
