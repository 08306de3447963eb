"""Platform-neutral rendering of a :class:`~botgateway.snapshot.CardSnapshot`.

Adapters render cards into their own markup; the helpers here give them the
shared pieces: the tool status line, the footer, argument previews, the
preamble (outside data shown above everything else, an alert's status), and a
generic Markdown and plain-text rendering. Fixed strings come from
:mod:`botgateway.strings`. The generic renderings carry no remote image
(:func:`~botgateway.cards.inert.inert_images`); platform rules (mentions) are
the adapters' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botgateway.cards.inert import inert_images
from botgateway.cards.split import FENCE
from botgateway.snapshot import ApprovalPrompt, CardSnapshot, Narration, ToolLine
from botgateway.strings import DEFAULT_LOCALE, t

__all__ = [
    "CURSOR",
    "MAX_PREAMBLE_CHARS",
    "PREAMBLE_DIVIDER",
    "approval_text",
    "close_open_fence",
    "footer_text",
    "format_args",
    "format_duration",
    "preamble_text",
    "render_markdown",
    "render_plain",
    "tool_line_text",
]

CURSOR = "▌"
"""Shown after the answer while it streams."""

MAX_PREAMBLE_CHARS = 3_000
"""Most of a preamble a card shows; a longer one is cut at a line end, so the card still fits its platform
with the answer part below it (Slack takes 12,000 characters of markdown per message, all blocks together)."""

PREAMBLE_DIVIDER = "---"
"""Between the preamble and the rest of a Markdown card (a thematic break: a blank line comes before it)."""


def format_duration(seconds: float, locale: str = DEFAULT_LOCALE) -> str:
    """``1.2 s`` below a minute, ``2 min 5 s`` above (localized)."""
    if seconds < 60:
        return t(locale, "seconds", value=max(seconds, 0.0))
    minutes, rest = divmod(round(seconds), 60)
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
    """One status line: ``🔧 name ip=… …``, ``✅ name · 1.2 s · summary`` or ``❌ name · reason``, then its approval."""
    approval = f" · {line.approval}" if line.approval and line.status != "failed" else ""
    if line.status in ("running", "waiting"):
        args = f" {line.args_preview}" if line.args_preview else ""
        key = "tool_waiting" if line.status == "waiting" else "tool_running"
        return t(locale, key, name=line.name, args=args) + approval
    duration = format_duration(line.duration_s, locale) if line.duration_s is not None else ""
    if line.status == "done":
        summary = (f" · {line.summary}" if line.summary else "") + (f" · {line.freshness}" if line.freshness else "")
        if not duration:
            return f"✅ {line.name}{summary}{approval}"
        return t(locale, "tool_done", name=line.name, duration=duration, summary=summary) + approval
    reason = line.summary or "failed"
    if line.approval and line.approval != line.summary:
        reason = f"{reason} · {line.approval}"
    return t(locale, "tool_failed", name=line.name, duration=f" · {duration}" if duration else "", reason=reason)


def approval_text(prompt: ApprovalPrompt, locale: str = DEFAULT_LOCALE) -> str:
    """What a waiting approval says on the card: the call with all its arguments, who asked, how to decide."""
    return t(locale, "approval_prompt", tool=prompt.tool, arguments=prompt.arguments, asker=prompt.asker,
             code=prompt.code, timeout=format_duration(prompt.timeout_s, locale))


def footer_text(
    *,
    locale: str,
    round: int,
    max_rounds: int,
    tokens: int,
    elapsed_s: float,
    model_label: str = "",
    sources: str = "",
) -> str:
    """``round 2/8 · 1,234 tokens · 3.4 s · demo model``; parts that are unknown are left out.

    ``sources`` (the line of :func:`~botgateway.cards.provenance.sources_text`) follows after a dash:
    ``… · deepseek-chat — sources: Alibaba Cloud prod/cn-hangzhou (40 s old) · static inventory``.
    """
    parts: list[str] = []
    if round > 0 and max_rounds > 0:
        parts.append(t(locale, "footer_round", round=round, max_rounds=max_rounds))
    if tokens > 0:
        parts.append(t(locale, "footer_tokens", tokens=f"{tokens:,}"))
    parts.append(format_duration(elapsed_s, locale))
    if model_label:
        parts.append(model_label)
    return " — ".join(part for part in (" · ".join(parts), sources) if part)


def preamble_text(snapshot: CardSnapshot, *, limit: int = MAX_PREAMBLE_CHARS) -> str:
    """The snapshot's preamble as a card shows it: trimmed, cut at a line end past ``limit`` characters (with
    "…"), a code fence it left open closed; empty when there is none.

    Still outside data: each platform makes it inert on the way out, like the answer.
    """
    text = snapshot.preamble.strip()
    if len(text) > limit:
        cut = text[: limit - 1]
        line_end = cut.rfind("\n")
        # At a line end when one is near: half a line of an alert reads worse than one line fewer.
        text = (cut[:line_end] if line_end > limit // 2 else cut).rstrip() + "…"
    return close_open_fence(text)


def close_open_fence(text: str) -> str:
    """Close a code fence left open (mid-stream or at a part boundary) so the rest renders normally."""
    if len(FENCE.findall(text)) % 2 == 1:
        return text + ("" if text.endswith("\n") else "\n") + "```"
    return text


def _muted_markdown(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(f"> _{_escape_emphasis(line)}_" for line in lines)


def _escape_emphasis(text: str) -> str:
    return text.replace("_", "\\_")


def _body_parts(snapshot: CardSnapshot, *, markdown: bool) -> list[str]:

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
    out.extend(approval_text(prompt, locale) for prompt in snapshot.approvals)
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
    out.extend(artifact_failures(snapshot))
    if snapshot.continued:
        out.append(t(locale, "continued"))
    if snapshot.error and snapshot.final:
        out.append(snapshot.error)
    return out


def _below_preamble(snapshot: CardSnapshot, parts: list[str], divider: str) -> list[str]:
    """``parts`` with the preamble above them, set apart by ``divider`` (when anything follows it)."""
    preamble = preamble_text(snapshot)
    if not preamble:
        return parts
    return [preamble, *([divider] if parts and divider else []), *parts]


def render_markdown(snapshot: CardSnapshot, *, preamble: bool = True, embeds: bool = False) -> str:
    """Generic Markdown: the preamble and a divider, status lines, muted (quoted, italic) thought, answer with ▌
    while streaming, footer. ``preamble=False``: everything below the preamble (a platform that draws it apart).
    ``embeds``: the pictures the sink placed in the card, below the answer (:func:`artifact_embeds`)."""
    parts = _body_parts(snapshot, markdown=True)
    if preamble:
        parts = _below_preamble(snapshot, parts, PREAMBLE_DIVIDER)
    footer = f"_{_escape_emphasis(snapshot.footer)}_" if snapshot.footer else ""
    # The sink's embeds are ours, not model text: they are added after the text is made inert, never defused.
    pieces = [inert_images("\n\n".join(parts), snapshot.locale), *(artifact_embeds(snapshot) if embeds else []),
              inert_images(footer, snapshot.locale) if footer else ""]
    return "\n\n".join(p for p in pieces if p)


def artifact_embeds(snapshot: CardSnapshot) -> list[str]:
    """The markup of each picture the sink placed in the card's body (a ``media_id`` image), in order."""
    return [v.embed for v in snapshot.artifacts if v.state == "shown" and v.embed]


def artifact_failures(snapshot: CardSnapshot) -> list[str]:
    """One line for each picture that could not be delivered, saying which and why."""
    return [t(snapshot.locale, "chart_failed", title=" ".join(v.artifact.title.split()), reason=v.error)
            for v in snapshot.artifacts if v.state == "failed"]


def render_plain(snapshot: CardSnapshot, *, preamble: bool = True) -> str:
    """Plain text for fallback messages and logs: the same content without markup (a blank line below the
    preamble); ``preamble=False`` leaves the preamble out."""
    parts = _body_parts(snapshot, markdown=False)
    if snapshot.footer:
        parts.append(f"— {snapshot.footer}")
    if preamble:
        parts = _below_preamble(snapshot, parts, "")
    return inert_images("\n\n".join(parts), snapshot.locale)


# --- splitting ------------------------------------------------------------------
