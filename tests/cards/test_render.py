"""Rendering of card snapshots (en, zh-CN) and splitting long answers into parts."""

from __future__ import annotations

import dataclasses

import pytest

from botgateway.cards.inert import inert_images
from botgateway.cards.render import (
    CURSOR,
    MAX_PREAMBLE_CHARS,
    format_args,
    preamble_text,
    render_markdown,
    render_plain,
    tool_line_text,
)
from botgateway.cards.split import split_parts, split_point
from botgateway.cards.state import CardState
from botgateway.events import AnswerDelta, RoundStarted, ToolCallFinished, ToolCallStarted, TurnDone, TurnResult
from botgateway.snapshot import CardSnapshot, Narration, ToolLine
from botgateway.strings import STRINGS, t


def card(locale: str) -> CardState:
    state = CardState(locale=locale, model_label="demo model", clock=lambda: 0.0)
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(AnswerDelta(text="Checking."))
    state.apply(ToolCallStarted(call_id="c1", name="inventory_lookup", arguments={"ip": "10.0.1.100"}))
    state.apply(ToolCallStarted(call_id="c2", name="aws_find", arguments={"ip": "10.0.1.100"}))
    state.apply(ToolCallFinished(call_id="c1", name="inventory_lookup", ok=True, summary="1 host found", duration_s=1.2))
    state.apply(RoundStarted(round=2, max_rounds=8))
    state.apply(AnswerDelta(text="It is web-01."))
    return state


def test_locales_have_the_same_keys() -> None:
    assert set(STRINGS["en"]) == set(STRINGS["zh-CN"])
    assert t("fr", "stopped") == STRINGS["en"]["stopped"]
    assert t("zh_CN", "stopped") == STRINGS["zh-CN"]["stopped"]


def test_markdown_en_has_status_lines_cursor_and_footer() -> None:
    text = render_markdown(card("en").snapshot())
    assert "Checking." in text
    assert "✅ inventory_lookup · 1.2 s · 1 host found" in text
    assert "🔧 aws_find ip=10.0.1.100 …" in text
    assert text.index("Checking.") < text.index("inventory_lookup") < text.index("It is web-01.")
    assert f"It is web-01.{CURSOR}" in text
    assert "_round 2/8 · 0.0 s · demo model_" in text


def test_markdown_zh_cn_and_no_cursor_once_final() -> None:
    state = card("zh-CN")
    streaming = render_markdown(state.snapshot())
    assert "第 2/8 轮" in streaming and "0.0 秒" in streaming and CURSOR in streaming
    state.apply(TurnDone(result=TurnResult(answer="It is web-01.")))
    final = render_markdown(state.snapshot())
    assert CURSOR not in final
    assert "⚙️" not in final and "🤔" not in final


def test_stopped_and_failed_notes_render_in_both_locales() -> None:
    for locale, expect in (("en", "⏹ Stopped."), ("zh-CN", "⏹ 已停止。")):
        state = card(locale)
        state.mark_stopped()
        text = render_plain(state.snapshot())
        assert expect in text and "It is web-01." in text and CURSOR not in text
        # The unfinished tool line no longer spins.
        assert "🔧" not in text
    failed = CardState(locale="zh-CN")
    failed.mark_failed("模型连接中断。")
    assert "⚠️ 模型连接中断。" in render_plain(failed.snapshot())


def test_thought_is_muted_and_placeholder_shows_while_empty() -> None:
    assert "🤔 Thinking…" in render_markdown(CardSnapshot(status="working"))
    assert "🤔 思考中…" in render_markdown(CardSnapshot(status="working", locale="zh-CN"))
    muted = render_markdown(CardSnapshot(status="working", thought="user_name lookup"))
    assert "> _user\\_name lookup_" in muted
    assert "🤔" not in muted


def test_queued_card_shows_position() -> None:
    state = CardState(locale="zh-CN")
    state.mark_queued(2)
    assert "排在第 2 位" in render_markdown(state.snapshot())


ALERT = "🔥 **FIRING** · critical\n\n- HighCPU on 10.0.1.100 ![x](http://evil.example/p?d=1)"


def test_preamble_comes_first_set_apart_from_the_investigation_and_its_images_are_inert() -> None:
    snapshot = dataclasses.replace(card("en").snapshot(), preamble=ALERT, asker="alice")
    text = render_markdown(snapshot)
    assert text.startswith("🔥 **FIRING** · critical\n\n- HighCPU on 10.0.1.100")
    # a thematic break on its own paragraph, before the asker line and the tool lines
    assert text.index("\n\n---\n\n") < text.index("alice") < text.index("inventory_lookup")
    assert "![x](" not in text and "http://evil.example/p?d=1" in text  # shown as text, never fetched
    plain = render_plain(snapshot)
    assert plain.startswith("🔥 **FIRING**") and "---" not in plain and "![x](" not in plain
    assert plain.index("10.0.1.100") < plain.index("alice")
    assert "FIRING" not in render_markdown(snapshot, preamble=False)
    assert "FIRING" not in render_plain(snapshot, preamble=False)


def test_a_final_card_with_only_a_preamble_renders_just_the_preamble() -> None:
    for status in ("done", "stopped"):
        snapshot = CardSnapshot(status=status, preamble=f"  {ALERT}\n")  # type: ignore[arg-type]
        alone = inert_images(preamble_text(snapshot), "en")
        assert render_markdown(snapshot) == alone  # no divider, no Thinking…, no cursor
        assert render_plain(snapshot) == alone
    assert "Thinking" in render_markdown(CardSnapshot(status="working", preamble=ALERT))  # a live card still says so


def test_a_long_preamble_is_cut_at_a_line_end_and_a_fence_it_opened_is_closed() -> None:
    lines = [f"- alert {i} on host-{i:04d} is firing since 09:{i % 60:02d}" for i in range(200)]
    text = preamble_text(CardSnapshot(status="done", preamble="\n".join(lines)))
    assert len(text) <= MAX_PREAMBLE_CHARS and text.endswith("…")
    assert text[:-1].splitlines()[-1] in lines  # whole lines only
    fenced = preamble_text(CardSnapshot(status="done", preamble="```\n" + "x" * 5000))
    assert fenced.endswith("```") and fenced.count("```") == 2
    assert len(preamble_text(CardSnapshot(status="done", preamble="y" * 5000))) == MAX_PREAMBLE_CHARS


def test_streaming_code_block_is_closed_before_the_cursor() -> None:
    snap = CardSnapshot(status="streaming", answer="Run:\n```\nls -l")
    text = render_markdown(snap)
    assert text.endswith("```\n" + CURSOR)
    assert text.count("```") == 2


def test_tool_line_failed_and_args_preview() -> None:
    line = ToolLine("c", "ssh", "", "failed", 2.0, "permission denied")
    assert tool_line_text(line) == "❌ ssh · 2.0 s · permission denied"
    assert format_args({"host": "db-01", "verbose": True, "deep": {"x": 1}, "tags": ["a", "b"]}) == "host=db-01 verbose=true tags=a,b"
    assert format_args({"q": "x" * 100}).endswith("…")


def test_continuation_part_marks() -> None:
    part1 = CardSnapshot(status="done", answer="a", continued=True, blocks=(Narration(1, "n"),))
    part2 = CardSnapshot(status="done", answer="b", part=2)
    assert "continued in the next message" in render_plain(part1)
    assert "part 2" in render_plain(part2)


WORDS = ("alpha beta gamma delta. " * 40 + "\n\nSecond paragraph with words. " * 20).strip()


@pytest.mark.parametrize("max_chars", [50, 97, 200, 500])
def test_split_parts_never_loses_text_and_respects_size(max_chars: int) -> None:
    parts = split_parts(WORDS, max_chars)
    assert "".join(parts) == WORDS
    assert all(0 < len(p) <= max_chars for p in parts)
    # Never inside a word: every cut lands after whitespace.
    for part in parts[:-1]:
        assert part[-1].isspace()


def test_split_prefers_paragraphs_and_keeps_code_fences_whole() -> None:
    text = "Intro line.\n\n```\n" + "x = 1\n" * 10 + "```\n\nAfter the code, more text here."
    cut = split_point(text, len(text) - 5)
    assert text[:cut].count("```") % 2 == 0
    assert text[:cut].endswith("\n\n")


def test_split_cjk_and_unbroken_text() -> None:
    cjk = "这是一个很长的回答。" * 30
    parts = split_parts(cjk, 45)
    assert "".join(parts) == cjk and all(p.endswith("。") for p in parts[:-1])
    blob = "x" * 250
    parts = split_parts(blob, 100)
    assert [len(p) for p in parts] == [100, 100, 50]
    assert split_parts("", 10) == [""]
