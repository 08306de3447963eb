"""How the Slack sink names a card and its messages.

A *card* is one answer (one turn) in one thread, across all its parts; a
*message* is one Slack message of it (a stream, or an edited message). Both
names are keys of the sink's bounded maps.
"""

from __future__ import annotations

from typing import TypeAlias

from botgateway.sink import CardHandle, CardTarget

__all__ = ["CardKey", "MessageKey", "as_edit", "card_key", "message_key"]

CardKey: TypeAlias = tuple[str, str, str, str]
"""Workspace, channel, thread and turn of a card."""

MessageKey: TypeAlias = tuple[str, str]
"""Channel and ts of the message a handle was created for."""


def card_key(target: CardTarget) -> CardKey:
    """The card ``target`` belongs to (the same for every part of one answer)."""
    return (target.workspace_id, target.chat_id, target.thread_id or "", target.turn_id)


def message_key(handle: CardHandle) -> MessageKey:
    """The message ``handle`` was created for (a rolled-over stream keeps its first message's key)."""
    return (handle.target.chat_id, handle.card_id)


def as_edit(handle: CardHandle) -> CardHandle:
    """The same message as an edit-mode handle."""
    if handle.data.get("mode") == "edit":
        return handle
    channel = str(handle.data.get("channel") or handle.target.chat_id)
    ts = str(handle.data.get("ts") or handle.card_id)
    return CardHandle(card_id=ts, target=handle.target, data={"mode": "edit", "channel": channel, "ts": ts})
