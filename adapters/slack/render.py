"""Slack markup for a :class:`~botgateway.snapshot.CardSnapshot`.

Edit mode shows the whole card in one ``markdown`` block (Slack renders
standard Markdown there) with a plain ``text`` fallback for notifications and
screen readers, plus a Stop button while the card is live. A card with a
preamble (an alert's status) shows it first, in a ``markdown`` block of its
own with a divider below it. Native streams can
only append, so :func:`stream_pieces` linearizes a snapshot into text and
``task_update`` chunks that the sink sends as deltas; a streaming message
cannot carry a button, so its Stop button lives in a small companion message
(:func:`control_blocks`) that is deleted when the answer ends.

A final answer (done, the last part, not an alert's card) offers Refresh and
👍 / 👎 in a block of its own (:data:`ANSWER_BLOCK_ID`): Block Kit buttons on
an edited message (:func:`answer_buttons`), Slack's feedback buttons and a
Refresh button among the blocks ``chat.stopStream`` adds to a stream
(:func:`stream_answer_blocks`). A 👎 opens :func:`feedback_modal` for a
one-line reason.

Every piece of model text (answer, narration, thought, tool lines, notes) and
the preamble (outside data) goes through :func:`defuse` (:mod:`adapters.slack.inert`) once, on its way out:
images become text, broadcasts and mentions the asker did not write stop pinging.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.slack.inert import slack_inert
from botgateway.answers import offers_answer_controls
from botgateway.cards.inert import stable_cut
from botgateway.cards.render import approval_text, artifact_failures, preamble_text, render_markdown, render_plain
from botgateway.sink import CardTarget
from botgateway.snapshot import ApprovalPrompt, CardSnapshot, Narration, ToolLine
from botgateway.strings import t

__all__ = [
    "ANSWER_BLOCK_ID",
    "APPROVE_ACTION_ID",
    "DENY_ACTION_ID",
    "FEEDBACK_ACTION_ID",
    "FEEDBACK_DOWN_ACTION_ID",
    "FEEDBACK_REASON_ID",
    "FEEDBACK_UP_ACTION_ID",
    "FEEDBACK_VIEW_ID",
    "MAX_MARKDOWN_CHARS",
    "MAX_TEXT_FALLBACK",
    "NO_MENTIONS",
    "REFRESH_ACTION_ID",
    "STOP_ACTION_ID",
    "answer_buttons",
    "approval_blocks",
    "approval_value",
    "card_blocks",
    "card_markdown",
    "card_text",
    "control_blocks",
    "control_done_blocks",
    "defuse",
    "escape_text",
    "feedback_modal",
    "markdown_chars",
    "preamble_blocks",
    "refresh_button",
    "stop_button",
    "stream_answer_blocks",
    "stream_closing",
    "stream_pieces",
    "task_chunk",
]

STOP_ACTION_ID = "botgateway_stop"
"""``action_id`` of the Stop button; its ``value`` is the turn id."""

APPROVE_ACTION_ID = "botgateway_approve"
"""``action_id`` of an Approve button; its ``value`` is ``code:token`` (:func:`approval_value`)."""

DENY_ACTION_ID = "botgateway_deny"
"""``action_id`` of a Deny button; its ``value`` is ``code:token``."""

ANSWER_BLOCK_ID = "botgateway_answer"
"""``block_id`` of a final answer's Refresh and feedback buttons (one block per message)."""

REFRESH_ACTION_ID = "botgateway_refresh"
"""``action_id`` of the Refresh button; its ``value`` is the answer's turn id."""

FEEDBACK_ACTION_ID = "botgateway_feedback"
"""``action_id`` of a stream's feedback buttons (Slack's ``feedback_buttons``); the pressed one's ``value`` is
``up:<turn id>`` or ``down:<turn id>``."""

FEEDBACK_UP_ACTION_ID = "botgateway_feedback_up"
"""``action_id`` of an edited answer's 👍 button; its ``value`` is ``up:<turn id>``."""

FEEDBACK_DOWN_ACTION_ID = "botgateway_feedback_down"
"""``action_id`` of an edited answer's 👎 button; its ``value`` is ``down:<turn id>``."""

FEEDBACK_VIEW_ID = "botgateway_feedback_reason"
"""``callback_id`` of the modal a 👎 opens; its ``private_metadata`` is the turn id."""

FEEDBACK_REASON_ID = "reason"
"""``block_id`` and ``action_id`` of the modal's one-line reason input."""


def approval_value(prompt: ApprovalPrompt) -> str:
    """An approval button's value: the code, and the token that ties a press to this request alone."""
    return f"{prompt.code}:{prompt.token}"

MAX_MARKDOWN_CHARS = 12_000
"""Slack's limit for the text of one ``markdown`` block (and a stream's markdown_text)."""

MAX_TEXT_FALLBACK = 3_000
"""The plain ``text`` fallback is only for notifications; keep it short."""

NO_MENTIONS: frozenset[str] = frozenset()
"""No user mention is let through (the default when the asker's mentions are unknown)."""


def defuse(text: str, locale: str = "en", allowed: frozenset[str] = NO_MENTIONS) -> str:
    """Model text made inert for Slack: images as text, ``<!here>`` and unasked ``<@U…>`` shown but not pinging."""
    return slack_inert(text, locale, allowed)


def escape_text(text: str) -> str:
    """Escape ``& < >`` as Slack requires in the plain ``text`` field."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def card_markdown(snapshot: CardSnapshot, allowed: frozenset[str] = NO_MENTIONS) -> str:
    """The card body as Slack Markdown, below its preamble (:func:`preamble_blocks`); ``allowed`` are the user
    ids the asker mentioned."""
    return defuse(render_markdown(snapshot, preamble=False), snapshot.locale, allowed)


def preamble_blocks(snapshot: CardSnapshot, *, divider: bool = True) -> list[dict[str, Any]]:
    """The preamble's own ``markdown`` block and, when ``divider``, a divider below it; none without a preamble.

    Outside data mentions nobody: every ``<@U…>`` in it is defused too.
    """
    text = preamble_text(snapshot)
    if not text:
        return []
    return [{"type": "markdown", "text": defuse(text, snapshot.locale)}, *([{"type": "divider"}] if divider else [])]


def markdown_chars(blocks: Sequence[dict[str, Any]]) -> int:
    """Characters of all ``markdown`` blocks together: Slack takes :data:`MAX_MARKDOWN_CHARS` per message."""
    return sum(len(str(b.get("text", ""))) for b in blocks if b.get("type") == "markdown")


def card_text(snapshot: CardSnapshot, allowed: frozenset[str] = NO_MENTIONS) -> str:
    """The plain ``text`` fallback (notifications, accessibility): the preamble first, shortened."""
    preamble = defuse(preamble_text(snapshot), snapshot.locale)
    body = defuse(render_plain(snapshot, preamble=False), snapshot.locale, allowed).strip()
    plain = "\n\n".join(part for part in (preamble, body) if part) or "…"
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


def approval_blocks(prompts: Sequence[ApprovalPrompt], locale: str, allowed: frozenset[str] = NO_MENTIONS) -> list[dict[str, Any]]:
    """Per waiting approval: what would run (defused: its arguments come from the model) and Approve/Deny buttons."""
    blocks: list[dict[str, Any]] = []
    for prompt in prompts:
        blocks.append({"type": "markdown", "text": defuse(approval_text(prompt, locale), locale, allowed)})
        blocks.append({
            "type": "actions",
            "block_id": f"botgateway_approval_{prompt.code}",
            "elements": [
                {"type": "button", "action_id": APPROVE_ACTION_ID, "style": "primary", "value": approval_value(prompt),
                 "text": {"type": "plain_text", "text": t(locale, "approve_button"), "emoji": True}},
                {"type": "button", "action_id": DENY_ACTION_ID, "style": "danger", "value": approval_value(prompt),
                 "text": {"type": "plain_text", "text": t(locale, "deny_button"), "emoji": True}},
            ],
        })
    return blocks


def control_blocks(turn_id: str, locale: str, prompts: Sequence[ApprovalPrompt] = (),
                   allowed: frozenset[str] = NO_MENTIONS) -> list[dict[str, Any]]:
    """The companion message of a native stream: a "working" note, waiting approvals, the Stop button for ``turn_id``.

    ``turn_id`` empty: no Stop button (``stop_button: false``), only the approvals.
    """
    blocks = [{"type": "context", "elements": [{"type": "mrkdwn", "text": t(locale, "control_working")}]},
              *approval_blocks(prompts, locale, allowed)]
    if turn_id:
        blocks.append(stop_button(turn_id, locale))
    return blocks


def control_done_blocks(locale: str) -> list[dict[str, Any]]:
    """What a companion message shows when it cannot be deleted: the note, no button."""
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": t(locale, "control_done")}]}]


def card_blocks(snapshot: CardSnapshot, *, turn_id: str = "", allowed: frozenset[str] = NO_MENTIONS,
                target: CardTarget | None = None) -> list[dict[str, Any]]:
    """Blocks of an edit-mode card: the preamble, the markdown body and, while live, Approve/Deny buttons and the
    Stop button (``turn_id``); once a final answer to the typed question of ``target`` (when given), Refresh and
    👍 / 👎 for its turn. A card of a preamble alone (a final alert card without an investigation) is that block
    only."""
    body = card_markdown(snapshot, allowed)
    blocks = preamble_blocks(snapshot, divider=bool(body))
    if body or not blocks:
        blocks.append({"type": "markdown", "text": body})
    if not snapshot.final:
        # The body already says what waits; the buttons go right below it.
        blocks += [b for b in approval_blocks(snapshot.approvals, snapshot.locale, allowed) if b["type"] == "actions"]
    if turn_id and not snapshot.final:
        blocks.append(stop_button(turn_id, snapshot.locale))
    if target is not None and offers_answer_controls(snapshot, target):
        blocks.append(answer_buttons(target.turn_id, snapshot.locale))
    return blocks


# --- a final answer's Refresh and feedback ----------------------------------------


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def refresh_button(turn_id: str, locale: str) -> dict[str, Any]:
    """The Refresh button of the answer of ``turn_id``."""
    text = _plain(t(locale, "refresh_button"))
    return {"type": "button", "action_id": REFRESH_ACTION_ID, "value": turn_id, "text": text}


def answer_buttons(turn_id: str, locale: str) -> dict[str, Any]:
    """The actions block of an edited final answer: Refresh, 👍 and 👎 for ``turn_id``."""
    return {
        "type": "actions",
        "block_id": ANSWER_BLOCK_ID,
        "elements": [
            refresh_button(turn_id, locale),
            {"type": "button", "action_id": FEEDBACK_UP_ACTION_ID, "value": f"up:{turn_id}", "text": _plain("👍"),
             "accessibility_label": t(locale, "feedback_up_label")},
            {"type": "button", "action_id": FEEDBACK_DOWN_ACTION_ID, "value": f"down:{turn_id}", "text": _plain("👎"),
             "accessibility_label": t(locale, "feedback_down_label")},
        ],
    }


def stream_answer_blocks(turn_id: str, locale: str) -> list[dict[str, Any]]:
    """What a stream's final answer adds below itself (``chat.stopStream`` blocks): Slack's feedback buttons, and the
    Refresh button."""
    feedback = {
        "type": "feedback_buttons",
        "action_id": FEEDBACK_ACTION_ID,
        "positive_button": {"text": _plain("👍"), "value": f"up:{turn_id}",
                            "accessibility_label": t(locale, "feedback_up_label")},
        "negative_button": {"text": _plain("👎"), "value": f"down:{turn_id}",
                            "accessibility_label": t(locale, "feedback_down_label")},
    }
    return [
        {"type": "context_actions", "block_id": f"{ANSWER_BLOCK_ID}_feedback", "elements": [feedback]},
        {"type": "actions", "block_id": ANSWER_BLOCK_ID, "elements": [refresh_button(turn_id, locale)]},
    ]


def feedback_modal(turn_id: str, locale: str) -> dict[str, Any]:
    """The modal a 👎 opens (``views.open``): an optional one-line reason for the answer of ``turn_id``."""
    return {
        "type": "modal",
        "callback_id": FEEDBACK_VIEW_ID,
        "private_metadata": turn_id,
        "title": _plain(t(locale, "feedback_modal_title")[:24]),
        "submit": _plain(t(locale, "feedback_modal_submit")),
        "close": _plain(t(locale, "feedback_modal_close")),
        "blocks": [
            {
                "type": "input",
                "block_id": FEEDBACK_REASON_ID,
                "optional": True,
                "label": _plain(t(locale, "feedback_modal_label")),
                "hint": _plain(t(locale, "feedback_modal_hint")),
                "element": {"type": "plain_text_input", "action_id": FEEDBACK_REASON_ID, "max_length": 300},
            }
        ],
    }


# --- native streams ----------------------------------------------------------------

_TASK_STATUS = {"running": "in_progress", "waiting": "pending", "done": "complete", "failed": "error"}


def task_chunk(line: ToolLine, locale: str = "en", allowed: frozenset[str] = NO_MENTIONS) -> dict[str, Any]:
    """A ``task_update`` chunk for one tool call."""
    title = defuse(f"{line.name} {line.args_preview}".strip(), locale, allowed)
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": line.call_id,
        "title": title[:256],
        "status": _TASK_STATUS[line.status],
    }
    output = " · ".join(part for part in (line.summary if line.status in ("done", "failed") else "", line.approval) if part)
    if output:
        chunk["output"] = defuse(output, locale, allowed)[:1000]
    return chunk


def stream_pieces(snapshot: CardSnapshot, allowed: frozenset[str] = NO_MENTIONS) -> list[tuple[str, Any]]:
    """The snapshot as an append-only sequence: ``("text", str)`` and ``("task", chunk)``, in time order.

    Narration is followed by a blank line so the next piece starts a paragraph;
    the thought and the cursor are left out (a stream cannot take text back).
    While the answer grows, a construct at its end that is not closed yet (an
    image, ``<!…``) waits until it is: once defused it would no longer start
    with the half already sent.
    """
    locale = snapshot.locale
    pieces: list[tuple[str, Any]] = []
    if snapshot.part > 1:
        pieces.append(("text", t(snapshot.locale, "continuation", part=snapshot.part) + "\n\n"))
    for block in snapshot.blocks:
        if isinstance(block, Narration):
            if block.text.strip():
                pieces.append(("text", defuse(block.text.rstrip(), locale, allowed) + "\n\n"))
        else:
            pieces.append(("task", task_chunk(block, locale, allowed)))
    answer = snapshot.answer if snapshot.final else snapshot.answer[: stable_cut(snapshot.answer)]
    if answer:
        pieces.append(("text", defuse(answer, locale, allowed)))
    return pieces


def stream_closing(snapshot: CardSnapshot, allowed: frozenset[str] = NO_MENTIONS,
                   target: CardTarget | None = None) -> tuple[str, list[dict[str, Any]]]:
    """What ``chat.stopStream`` adds: a line per chart that could not be shown and the failure/stop note as text,
    the footer as a context block, and the feedback and Refresh buttons of a final answer to the typed question of
    ``target`` (when given)."""
    # A chart's title names what a tool read (a host, an alert's labels): defused like outside data.
    note = "".join(f"\n\n{defuse(line, snapshot.locale)}" for line in artifact_failures(snapshot))
    if snapshot.error and snapshot.final:
        note += f"\n\n{defuse(snapshot.error, snapshot.locale, allowed)}"
    if snapshot.continued:
        note += "\n\n" + t(snapshot.locale, "continued")
    blocks: list[dict[str, Any]] = []
    if snapshot.footer:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape_text(snapshot.footer)}]})
    if target is not None and offers_answer_controls(snapshot, target):
        blocks += stream_answer_blocks(target.turn_id, snapshot.locale)
    return note, blocks
