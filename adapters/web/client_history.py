"""The earlier messages an OpenAI client sent, as the history of a conversation it did not name.

Open WebUI, LibreChat and most chat clients keep the conversation themselves
and send all of it with each question, naming none (no ``user``, no
``X-Conversation``). Such a question opens a new conversation, and what came
before it in ``messages`` becomes that conversation's history, so a follow-up
keeps its context.

What the client sent is data, never configuration: only the plain text of its
``user`` and ``assistant`` messages is kept. Its ``system`` (and ``developer``)
messages are dropped: the system prompt stays the gateway's, and a client's
prompt (a generic "You are a helpful assistant", or text written to steer the
model off its rules) is neither made ours nor slipped in as if the asker had
said it; what an asker wants the model to know they can say in the chat. Tool
calls and tool results of the client's own tools are dropped too: the gateway
did not run them, so they are no results it could vouch for, and a
``tool`` message without the call that asked for it breaks every provider's
request. Image parts are dropped (the model is asked in text).

The turns are then as memory keeps them (:mod:`botgateway.history.memory`): one
begins at a ``user`` message; consecutive messages of one role are joined (what
was dropped between them leaves no gap); an unanswered ``user`` message at the
end is dropped, as a failed turn leaves history as it was. The newest whole
turns within ``memory.max_history_tokens`` are kept, the newest cut to fit when
it alone is over, by memory's own trimming (:func:`~botgateway.history.trim_history`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botgateway.history import trim_history
from botgateway.stores.base import Message

__all__ = ["client_turns", "message_text"]

_KEPT_ROLES = frozenset({"user", "assistant"})


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` parts of a list of parts ("" if none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only the text ones are read
        texts = [part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        return "\n".join(text for text in texts if isinstance(text, str))
    return ""


def client_turns(earlier: Sequence[Any], max_tokens: int) -> list[list[Message]]:
    """The turns of ``earlier`` (the messages before the question, as the client sent them) to keep as history,
    oldest first, within ``max_tokens``; [] when nothing is left to keep."""
    plain = _alternating(_plain(earlier))
    while plain and plain[0]["role"] != "user":
        plain.pop(0)  # a turn begins with a question
    if plain and plain[-1]["role"] == "user":
        plain.pop()  # unanswered: no half turn
    if not plain:
        return []
    turns: list[list[Message]] = []
    for message in trim_history(plain, max_tokens):
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _plain(messages: Sequence[Any]) -> list[Message]:
    """The text of each ``user`` and ``assistant`` message with any (nothing else of them)."""
    kept: list[Message] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in _KEPT_ROLES:
            continue
        text = message_text(message.get("content"))
        if text.strip():
            kept.append({"role": message["role"], "content": text})
    return kept


def _alternating(messages: list[Message]) -> list[Message]:
    """``messages`` with each run of one role joined into one message."""
    joined: list[Message] = []
    for message in messages:
        if joined and joined[-1]["role"] == message["role"]:
            joined[-1] = {"role": message["role"], "content": f"{joined[-1]['content']}\n\n{message['content']}"}
        else:
            joined.append(message)
    return joined
