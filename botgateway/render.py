"""Localized strings and platform-neutral rendering of a :class:`~botgateway.card.CardSnapshot`.

Adapters render cards into their own markup; the helpers here give them the
shared pieces: the fixed strings in ``en`` and ``zh-CN``, the tool status line,
the footer, a generic Markdown and a plain-text rendering, and
:func:`split_parts`, which cuts a long answer into continuation parts at clean
points without ever dropping a character.

This module must not import :mod:`botgateway.card` at import time (the card
module imports it for its strings); type names are only used for checking.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botgateway.card import CardSnapshot, ToolLine

CURSOR = "▌"
"""Shown after the answer while it streams."""

DEFAULT_LOCALE = "en"

STRINGS: Mapping[str, Mapping[str, str]] = {
    "en": {
        "queued": "⏳ Waiting for the previous question to finish…",
        "queued_position": "⏳ Waiting for the previous question to finish (position {position} in line)…",
        "thinking": "🤔 Thinking…",
        "working": "⚙️ Working…",
        "tool_running": "🔧 {name}{args} …",
        "tool_done": "✅ {name} · {duration}{summary}",
        "tool_failed": "❌ {name}{duration} · {reason}",
        "tool_stopped": "stopped",
        "footer_round": "round {round}/{max_rounds}",
        "footer_tokens": "{tokens} tokens",
        "seconds": "{value:.1f} s",
        "minutes": "{minutes} min {seconds} s",
        "demo_model": "demo model",
        "stopped": "⏹ Stopped.",
        "stopped_by": "⏹ Stopped by {asker}.",
        "failed": "⚠️ {message}",
        "failed_llm_unavailable": "⚠️ The model could not be reached, so there is no answer. {message}",
        "failed_interrupted": "⚠️ The answer was interrupted before it was complete. {message}",
        "failed_internal": "⚠️ Something went wrong on our side. {message}",
        "failed_unfinished": "The answer ended before it was complete.",
        "partial_note": "(partial answer)",
        "continued": "(continued in the next message ↓)",
        "continuation": "(continued, part {part})",
        "answer_below": "↓ The full answer was posted as a new message below.",
        "asker": "@{asker}",
    },
    "zh-CN": {
        "queued": "⏳ 正在等待上一个问题完成…",
        "queued_position": "⏳ 正在等待上一个问题完成（排在第 {position} 位）…",
        "thinking": "🤔 思考中…",
        "working": "⚙️ 处理中…",
        "tool_running": "🔧 {name}{args} …",
        "tool_done": "✅ {name} · {duration}{summary}",
        "tool_failed": "❌ {name}{duration} · {reason}",
        "tool_stopped": "已停止",
        "footer_round": "第 {round}/{max_rounds} 轮",
        "footer_tokens": "{tokens} tokens",
        "seconds": "{value:.1f} 秒",
        "minutes": "{minutes} 分 {seconds} 秒",
        "demo_model": "演示模型",
        "stopped": "⏹ 已停止。",
        "stopped_by": "⏹ 已被 {asker} 停止。",
        "failed": "⚠️ {message}",
        "failed_llm_unavailable": "⚠️ 无法连接模型，暂时没有回答。{message}",
        "failed_interrupted": "⚠️ 回答在完成前中断了。{message}",
        "failed_internal": "⚠️ 我们这边出了问题。{message}",
        "failed_unfinished": "回答未能完成。",
        "partial_note": "（部分回答）",
        "continued": "（接下一条消息 ↓）",
        "continuation": "（续，第 {part} 部分）",
        "answer_below": "↓ 完整回答已作为新消息发在下方。",
        "asker": "@{asker}",
    },
}
"""Every fixed string of the card, per locale. Both locales hold the same keys."""


def normalize_locale(locale: str) -> str:
    """``zh``, ``zh_CN``, ``zh-cn`` → ``zh-CN``; anything unknown → ``en``."""
    lowered = locale.replace("_", "-").lower()
    if lowered.startswith("zh"):
        return "zh-CN"
    return DEFAULT_LOCALE


def t(locale: str, key: str, **values: Any) -> str:
    """The string ``key`` in ``locale`` (English when the locale is unknown), formatted with ``values``."""
    table = STRINGS.get(locale) or STRINGS[normalize_locale(locale)]
    return table[key].format(**values)


def format_duration(seconds: float, locale: str = DEFAULT_LOCALE) -> str:
    """``1.2 s`` below a minute, ``2 min 5 s`` above (localized)."""
    if seconds < 60:
        return t(locale, "seconds", value=max(seconds, 0.0))
    minutes, rest = divmod(int(round(seconds)), 60)
    return t(locale, "minutes", minutes=minutes, seconds=rest)


def format_args(arguments: Mapping[str, Any], *, max_items: int = 3, max_value: int = 40) -> str:
    """Key arguments in short form: ``ip=10.0.1.100 region=cn-hangzhou``.

    Scalars only (nested values say nothing at a glance), at most ``max_items``,
    long values cut with an ellipsis.
    """
    parts: list[str] = []
    for key, value in arguments.items():
        if isinstance(value, bool) or value is None:
            shown = str(value).lower()
        elif isinstance(value, (str, int, float)):
            shown = str(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, int, float)) for v in value):
            shown = ",".join(str(v) for v in value)
        else:
            continue
        shown = " ".join(shown.split())
        if len(shown) > max_value:
            shown = shown[: max_value - 1] + "…"
        parts.append(f"{key}={shown}")
        if len(parts) == max_items:
            break
    return " ".join(parts)


def tool_line_text(line: ToolLine, locale: str = DEFAULT_LOCALE) -> str:
    """One status line: ``🔧 name ip=… …``, ``✅ name · 1.2 s · summary`` or ``❌ name · reason``."""
    if line.status == "running":
        args = f" {line.args_preview}" if line.args_preview else ""
        return t(locale, "tool_running", name=line.name, args=args)
    duration = format_duration(line.duration_s, locale) if line.duration_s is not None else ""
    if line.status == "done":
        summary = f" · {line.summary}" if line.summary else ""
        if not duration:
            return f"✅ {line.name}{summary}"
        return t(locale, "tool_done", name=line.name, duration=duration, summary=summary)
    return t(locale, "tool_failed", name=line.name, duration=f" · {duration}" if duration else "", reason=line.summary or "failed")


def footer_text(
    *,
    locale: str,
    round: int,
    max_rounds: int,
    tokens: int,
    elapsed_s: float,
    model_label: str = "",
) -> str:
    """``round 2/8 · 1,234 tokens · 3.4 s · demo model``; parts that are unknown are left out."""
    parts: list[str] = []
    if round > 0 and max_rounds > 0:
        parts.append(t(locale, "footer_round", round=round, max_rounds=max_rounds))
    if tokens > 0:
        parts.append(t(locale, "footer_tokens", tokens=f"{tokens:,}"))
    parts.append(format_duration(elapsed_s, locale))
    if model_label:
        parts.append(model_label)
    return " · ".join(parts)


def close_open_fence(text: str) -> str:
    """Close a code fence left open (mid-stream or at a part boundary) so the rest renders normally."""
    if len(_FENCE.findall(text)) % 2 == 1:
        return text + ("" if text.endswith("\n") else "\n") + "```"
    return text


def _muted_markdown(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(f"> _{_escape_emphasis(line)}_" for line in lines)


def _escape_emphasis(text: str) -> str:
    return text.replace("_", "\\_")


def _body_parts(snapshot: CardSnapshot, *, markdown: bool) -> list[str]:
    from botgateway.card import Narration  # deferred: card imports this module

    locale = snapshot.locale
    out: list[str] = []
    if snapshot.asker and snapshot.part == 1:
        out.append(t(locale, "asker", asker=snapshot.asker))
    if snapshot.part > 1:
        out.append(t(locale, "continuation", part=snapshot.part))
    if snapshot.status == "queued":
        out.append(snapshot.error or t(locale, "queued"))
        return out
    tool_run: list[str] = []  # consecutive status lines read best as one block
    for block in snapshot.blocks:
        if isinstance(block, Narration):
            if tool_run:
                out.append("\n".join(tool_run))
                tool_run = []
            if block.text.strip():
                out.append(close_open_fence(block.text.strip()) if markdown else block.text.strip())
        else:
            tool_run.append(tool_line_text(block, locale))
    if tool_run:
        out.append("\n".join(tool_run))
    if snapshot.thought:
        out.append(_muted_markdown(snapshot.thought) if markdown else f"💭 {' '.join(snapshot.thought.split())}")
    answer = snapshot.answer
    if snapshot.status == "streaming":
        answer = answer + CURSOR
        if markdown:
            # The cursor goes after the text, outside an unfinished code block.
            answer = close_open_fence(snapshot.answer)
            answer = answer + ("\n" if answer.endswith("```") else "") + CURSOR
    elif markdown:
        answer = close_open_fence(answer)
    if answer.strip():
        out.append(answer)
    elif snapshot.status == "working" and not snapshot.thought:
        out.append(t(locale, "working") if snapshot.blocks else t(locale, "thinking"))
    if snapshot.continued:
        out.append(t(locale, "continued"))
    if snapshot.error and snapshot.final:
        out.append(snapshot.error)
    return out


def render_markdown(snapshot: CardSnapshot) -> str:
    """Generic Markdown: status lines, muted (quoted, italic) thought, answer with ▌ while streaming, footer."""
    parts = _body_parts(snapshot, markdown=True)
    if snapshot.footer:
        parts.append(f"_{_escape_emphasis(snapshot.footer)}_")
    return "\n\n".join(parts)


def render_plain(snapshot: CardSnapshot) -> str:
    """Plain text for fallback messages and logs: the same content without markup."""
    parts = _body_parts(snapshot, markdown=False)
    if snapshot.footer:
        parts.append(f"— {snapshot.footer}")
    return "\n\n".join(parts)


# --- splitting ------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*```", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；：])")
_SPACE = re.compile(r"\s+")


def _fence_open_at(text: str, pos: int) -> bool:
    """True when ``pos`` lies inside a fenced code block of ``text``."""
    return len(_FENCE.findall(text, 0, pos)) % 2 == 1


def split_point(text: str, max_chars: int) -> int:
    """Where to cut ``text`` so the first part has at most ``max_chars`` characters.

    Preference: a paragraph break, a line break, a sentence end, a space, all
    outside code fences and in the second half of the window; then the same
    inside a fence; a hard cut only when the window has no break at all (a
    60 kB token). Returns ``len(text)`` when everything fits.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    if len(text) <= max_chars:
        return len(text)
    window = text[: max_chars + 1]
    floor = max_chars // 2
    candidates: list[list[int]] = [[], [], [], []]
    for match in re.finditer(r"\n\s*\n", window):
        candidates[0].append(match.end())
    for match in re.finditer(r"\n", window):
        candidates[1].append(match.end())
    for match in _SENTENCE_END.finditer(window):
        candidates[2].append(match.end())
    for match in _SPACE.finditer(window):
        candidates[3].append(match.end())
    for need_outside_fence in (True, False):
        for group in candidates:
            for cut in sorted(group, reverse=True):
                if cut > max_chars or cut < floor or cut <= 0:
                    continue
                if need_outside_fence and _fence_open_at(text, cut):
                    continue
                return cut
    # No break in the second half: take any break at all before a hard cut.
    for group in candidates:
        usable = [c for c in group if 0 < c <= max_chars]
        if usable:
            return max(usable)
    return max_chars


def split_parts(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` into parts of at most ``max_chars`` characters at clean points.

    ``"".join(split_parts(text, n)) == text`` always: nothing is dropped or
    added, whitespace included.
    """
    parts: list[str] = []
    rest = text
    while len(rest) > max_chars:
        cut = split_point(rest, max_chars)
        parts.append(rest[:cut])
        rest = rest[cut:]
    if rest or not parts:
        parts.append(rest)
    return parts
