"""DingTalk markdown for a :class:`~botgateway.snapshot.CardSnapshot`.

Two renderings: the AI card's markdown variable (:func:`render_card`, redrawn
on every streaming update) and the one-shot robot markdown message
(:func:`render_reply`) used without a card template, after degrading, and as
the fallback. DingTalk's robot markdown is a small dialect (no colours, single
newlines collapse), so blocks are separated by blank lines. A card's preamble
(an alert's status, outside data) comes first, above everything else, a blank
line below it. Every piece of model, tool and outside text is made inert once, on its way out
(:func:`dingtalk_inert`: remote images become text, only http(s) links stay and show their host, HTML and masked
links are text, ``@所有人`` cannot notify), before the card's own markup (the muted ``<font>``) goes around it;
the header's display name is escaped (:func:`escape_name`) so a crafted name cannot break the bold. Shared
strings and the tool line come from :mod:`botgateway.cards.render` and
:mod:`botgateway.strings`. A reply's charts are the sink's own ``![title](@media_id)`` (never made inert); a card
shows none (they go under it as image messages, :mod:`adapters.dingtalk.pictures`), and both show a line for a
chart that could not be delivered.
"""

from __future__ import annotations

from adapters.dingtalk.inert import dingtalk_inert, escape_name
from botgateway.cards import render as core
from botgateway.snapshot import CardSnapshot, Narration, ToolLine
from botgateway.strings import t

__all__ = ["MAX_SUMMARY_LINES", "MAX_TOOL_LINES", "MUTED", "render_card", "render_reply", "reply_title", "tool_summary"]

MAX_TOOL_LINES = 10
"""Tool lines shown on a card; older ones collapse into one "and N earlier" line."""
MAX_SUMMARY_LINES = 5
"""Tool lines in the summary above a markdown reply."""
MUTED = "<font color=common_level3_base_color>{}</font>"
"""Muted text in the AI card's markdown (a colour token of the card platform)."""


def _tool_lines(snapshot: CardSnapshot, limit: int) -> list[str]:
    lines = [b for b in snapshot.blocks if isinstance(b, ToolLine)]
    shown = [core.tool_line_text(line, snapshot.locale) for line in lines[-limit:]]
    if len(lines) > limit:
        shown.insert(0, t(snapshot.locale, "earlier_calls", n=len(lines) - limit))
    return shown


def _blocks(snapshot: CardSnapshot) -> list[str]:
    """Narration and tool lines in time order, older tool lines collapsed."""
    tool_count = sum(1 for b in snapshot.blocks if isinstance(b, ToolLine))
    hidden = max(0, tool_count - MAX_TOOL_LINES)
    out: list[str] = []
    if hidden:
        out.append(t(snapshot.locale, "earlier_calls", n=hidden))
    seen = 0
    for block in snapshot.blocks:
        if isinstance(block, ToolLine):
            seen += 1
            if seen > hidden:
                out.append(core.tool_line_text(block, snapshot.locale))
        elif isinstance(block, Narration) and block.text.strip():
            out.append(core.close_open_fence(block.text.strip()))
    return out


def _header(snapshot: CardSnapshot, is_group: bool, mention: str = "", asker: str = "") -> str:
    parts = []
    name = snapshot.asker or asker
    if mention:
        parts.append(mention)
    elif is_group and name:
        shown = dingtalk_inert(core.t(snapshot.locale, "asker", asker=escape_name(name)), snapshot.locale)
        parts.append(f"**{shown}**")
    if snapshot.part > 1:
        parts.append(core.t(snapshot.locale, "continuation", part=snapshot.part))
    return " ".join(parts)


def _answer(snapshot: CardSnapshot, *, cursor: bool) -> str:
    if not snapshot.answer:
        return ""
    text = core.close_open_fence(snapshot.answer)
    if cursor and snapshot.status == "streaming":
        text += ("\n" if text.endswith("```") else "") + core.CURSOR
    return text


def render_card(snapshot: CardSnapshot, *, is_group: bool = False, asker: str = "") -> str:
    """The AI card's markdown: the preamble, who asked, tool lines, muted thought, answer with a cursor, end note,
    footer.

    In groups every card names the asker (``asker`` stands in when the snapshot
    has none, as on continuation cards), since several people ask in one chat.
    """
    return _with_header(snapshot, _header(snapshot, is_group, asker=asker), _card_sections(snapshot))


def _with_header(snapshot: CardSnapshot, header: str, sections: list[str]) -> str:
    """The preamble (made inert here), then the header (ours, escaped already) above the sections (inert
    already)."""
    preamble = dingtalk_inert(core.preamble_text(snapshot), snapshot.locale)
    return "\n\n".join(part for part in (preamble, header, *sections) if part)


def _card_sections(snapshot: CardSnapshot) -> list[str]:
    """The AI card's sections below the header, each made inert; the thought and the footer in the card's muted
    colour, whose tag is ours and so goes around the inert text."""
    locale = snapshot.locale
    if snapshot.status == "queued":
        return [dingtalk_inert(snapshot.error or core.t(locale, "queued"), locale)]
    sections: list[tuple[str, bool]] = []  # (text, muted)
    if snapshot.part == 1:
        sections.extend((block, False) for block in _blocks(snapshot))
    # The card cannot carry buttons: each waiting approval says how to decide by reply.
    sections.extend((core.approval_text(prompt, locale), False) for prompt in snapshot.approvals)
    if snapshot.thought and not snapshot.final:
        sections.append((" ".join(snapshot.thought.split()), True))
    answer = _answer(snapshot, cursor=True)
    if answer.strip():
        sections.append((answer, False))
    elif snapshot.status == "working" and not snapshot.thought:
        sections.append((core.t(locale, "working") if snapshot.blocks else core.t(locale, "thinking"), False))
    # The card's pictures go out as image messages under it; only one that could not is told here.
    sections.extend((line, False) for line in core.artifact_failures(snapshot))
    if snapshot.continued:
        sections.append((core.t(locale, "continued"), False))
    if snapshot.final and snapshot.error:
        sections.append((snapshot.error, False))
    if snapshot.footer:
        sections.append((snapshot.footer, True))
    return [MUTED.format(dingtalk_inert(text, locale)) if muted else dingtalk_inert(text, locale)
            for text, muted in sections]


def tool_summary(snapshot: CardSnapshot) -> str:
    """The short tool summary above a markdown reply (empty without tool calls)."""
    count = sum(1 for b in snapshot.blocks if isinstance(b, ToolLine))
    if not count:
        return ""
    lines = [t(snapshot.locale, "tools_used", n=count), *_tool_lines(snapshot, MAX_SUMMARY_LINES)]
    # One quote paragraph per line: DingTalk's robot markdown joins single newlines.
    return "\n\n".join(f"> {line}" for line in lines)


def render_reply(snapshot: CardSnapshot, *, is_group: bool = False, mention: str = "", asker: str = "") -> tuple[str, str]:
    """A robot markdown message as (title, text): the preamble, who asked, tool summary, answer, its pictures, end
    note, footer.

    ``mention`` replaces the display-name header verbatim (``@staffId`` makes
    DingTalk notify the asker when the message also lists them in ``at.atUserIds``).
    The pictures are the sink's embeds (``![title](@media_id)``): ours, so they
    are not made inert as the model's text is.
    """
    before: list[str] = []
    if snapshot.part == 1:
        summary = tool_summary(snapshot)
        if summary:
            before.append(summary)
    answer = _answer(snapshot, cursor=False)
    if answer.strip():
        before.append(answer)
    after = core.artifact_failures(snapshot)
    if snapshot.continued:
        after.append(core.t(snapshot.locale, "continued"))
    if snapshot.error and (snapshot.final or snapshot.status == "queued"):
        after.append(snapshot.error)
    if snapshot.footer:
        after.append(f"> {snapshot.footer}")
    shown = [*(dingtalk_inert(section, snapshot.locale) for section in before), *core.artifact_embeds(snapshot),
             *(dingtalk_inert(section, snapshot.locale) for section in after)]
    return reply_title(snapshot), _with_header(snapshot, _header(snapshot, is_group, mention, asker), shown)


def reply_title(snapshot: CardSnapshot) -> str:
    """The notification title of a markdown reply: the first line of its preamble (an alert's status), else of
    the answer, cut short."""
    source = snapshot.preamble.strip() or snapshot.answer.strip() or snapshot.error.strip()
    text = dingtalk_inert(source, snapshot.locale)
    first = text.splitlines()[0].lstrip("#>*-` ").strip() if text else ""
    if not first:
        return t(snapshot.locale, "reply_title")
    return first if len(first) <= 30 else first[:29] + "…"
