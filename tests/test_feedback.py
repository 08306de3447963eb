"""What a 👎's typed reason and a vote button's value look like, and how a reason is kept."""

from __future__ import annotations

import pytest

from botgateway.answers import MAX_REASON_CHARS, one_line, parse_reason, parse_vote


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("reason the host is gone", "the host is gone"),
        ("Reason: wrong region", "wrong region"),
        ("原因 这台机器已经下线了", "这台机器已经下线了"),
        ("原因：数据过时", "数据过时"),
        ("  reason   two\nlines  ", "two lines"),
        ("reasonable question about web-1", None),
        ("reason", None),
        ("the reason is unclear", None),
        ("原因", None),
        ("原因:过期", "过期"),
        ("reason:stale", "stale"),
        # a question about a cause is no reason: the word must be followed by a space or a colon
        ("原因是什么？", None),
        ("原因呢", None),
        ("reasons: many", None),
    ],
)
def test_a_reason_reply_is_recognized_and_made_one_line(text: str, reason: str | None) -> None:
    assert parse_reason(text) == reason


def test_a_reason_is_cut_and_its_secrets_masked() -> None:
    kept = one_line("token sk-live-0123456789abcdef leaked " + "x" * 1000)
    assert "sk-live" not in kept and len(kept) == MAX_REASON_CHARS and kept.endswith("…")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("up:t1", ("up", "t1")), ("down:t1", ("down", "t1")), ("sideways:t1", None), ("up:", None), ("", None)],
)
def test_a_vote_buttons_value_names_the_vote_and_the_turn(value: str, parsed: tuple[str, str] | None) -> None:
    assert parse_vote(value) == parsed
