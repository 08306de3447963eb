"""Slack markup for a :class:`~botgateway.snapshot.CardSnapshot`.

Edit mode shows the whole card in one ``markdown`` block (Slack renders
standard Markdown there) with a plain ``text`` fallback for notifications and
screen readers, plus a Stop button while the card is live. Native streams can
only append, so :func:`stream_pieces` linearizes a snapshot into text and
``task_update`` chunks that the sink sends as deltas; a streaming message
cannot carry a button, so its Stop button lives in a small companion message
(:func:`control_blocks`) that is deleted when the answer ends.
"""

from __future__ import annotations

import re
from typing import Any

from botgateway.cards.render import render_markdown, render_plain
from botgateway.snapshot import CardSnapshot, Narration, ToolLine
from botgateway.strings import t

__all__ = [
    "MAX_MARKDOWN_CHARS",
    "MAX_TEXT_FALLBACK",
    "STOP_ACTION_ID",
    "card_blocks",
    "card_markdown",
    "card_text",
    "control_blocks",
    "control_done_blocks",
    "defuse",
    "escape_text",
    "stop_button",
    "stream_closing",
    "stream_pieces",
    "task_chunk",
]

STOP_ACTION_ID = "botgateway_stop"
"""``action_id`` of the Stop button; its ``value`` is the turn id."""

MAX_MARKDOWN_CHARS = 12_000
"""Slack's limit for the text of one ``markdown`` block (and a stream's markdown_text)."""

MAX_TEXT_FALLBACK = 3_000
"""The plain ``text`` fallback is only for notifications; keep it short."""

_BROADCAST = re.compile(r"<!(channel|here|everyone)(\|[^>]*)?>")


def defuse(text: str) -> str:
    """Keep model output from pinging a whole channel: ``<!here>`` becomes inert text."""
    return _BROADCAST.sub(lambda m: f"@\u200b{m.group(1)}", text)


def escape_text(text: str) -> str:
    """Escape ``& < >`` as Slack requires in the plain ``text`` field."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def card_markdown(snapshot: CardSnapshot) -> str:
    """The card body as Slack Markdown."""
    return defuse(render_markdown(snapshot))


def card_text(snapshot: CardSnapshot) -> str:
    """The plain ``text`` fallback (notifications, accessibility), shortened."""
    plain = defuse(render_plain(snapshot)).strip() or "…"
    if len(plain) > MAX_TEXT_FALLBACK:
        plain = plain[: MAX_TEXT_FALLBACK - 1] + "…"
    return escape_text(plain)


def stop_button(turn_id: str, locale: str) -> dict[str, Any]:
    """An actions block with the Stop button for ``turn_id``."""
    return {
        "type": "actions",
        "block_id": STOP_ACTION_ID,
        "elements": [
            {
                "type": "button",
                "action_id": STOP_ACTION_ID,
                "text": {"type": "plain_text", "text": t(locale, "stop_button"), "emoji": True},
                "style": "danger",
                "value": turn_id,
            }
        ],
    }


def control_blocks(turn_id: str, locale: str) -> list[dict[str, Any]]:
    """The companion message of a native stream: a "working" note and the Stop button for ``turn_id``."""
    return [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": t(locale, "control_working")}]},
        stop_button(turn_id, locale),
    ]


def control_done_blocks(locale: str) -> list[dict[str, Any]]:
    """What a companion message shows when it cannot be deleted: the note, no button."""
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": t(locale, "control_done")}]}]


def card_blocks(snapshot: CardSnapshot, *, turn_id: str = "") -> list[dict[str, Any]]:
    """Blocks of an edit-mode card: the markdown body and, while live, the Stop button."""
    blocks: list[dict[str, Any]] = [{"type": "markdown", "text": card_markdown(snapshot)}]
    if turn_id and not snapshot.final:
        blocks.append(stop_button(turn_id, snapshot.locale))
    return blocks


# --- native streams ----------------------------------------------------------------

_TASK_STATUS = {"running": "in_progress", "done": "complete", "failed": "error"}


def task_chunk(line: ToolLine) -> dict[str, Any]:
    """A ``task_update`` chunk for one tool call."""
    title = f"{line.name} {line.args_preview}".strip()
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": line.call_id,
        "title": title[:256],
        "status": _TASK_STATUS[line.status],
    }
    if line.status != "running" and line.summary:
        chunk["output"] = defuse(line.summary)[:1000]
    return chunk


def stream_pieces(snapshot: CardSnapshot) -> list[tuple[str, Any]]:
    """The snapshot as an append-only sequence: ``("text", str)`` and ``("task", chunk)``, in time order.

    Narration is followed by a blank line so the next piece starts a paragraph;
    the thought and the cursor are left out (a stream cannot take text back).
    """
    pieces: list[tuple[str, Any]] = []
    if snapshot.part > 1:
        pieces.append(("text", t(snapshot.locale, "continuation", part=snapshot.part) + "\n\n"))
    for block in snapshot.blocks:
        if isinstance(block, Narration):
            if block.text.strip():
                pieces.append(("text", defuse(block.text.rstrip()) + "\n\n"))
        else:
            pieces.append(("task", task_chunk(block)))
    if snapshot.answer:
        pieces.append(("text", defuse(snapshot.answer)))
    return pieces


def stream_closing(snapshot: CardSnapshot) -> tuple[str, list[dict[str, Any]]]:
    """What ``chat.stopStream`` adds: the failure/stop note as text, the footer as a context block."""
    note = ""
    if snapshot.error and snapshot.final:
        note = f"\n\n{defuse(snapshot.error)}"
    if snapshot.continued:
        note += "\n\n" + t(snapshot.locale, "continued")
    blocks: list[dict[str, Any]] = []
    if snapshot.footer:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape_text(snapshot.footer)}]})
    return note, blocks
