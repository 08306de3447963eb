"""The fake Slack's message store: the bot's messages, the ``chat.*`` methods that change them, and their readers.

:class:`Message` is one message as the fake shows it (its text, blocks, stream
chunks and every version it showed). :class:`SlackChatMethods` is the part of
:class:`~tests.fakes.slack.FakeSlack` that keeps them: ``chat.postMessage``,
``chat.update``, ``chat.delete``, ``chat.postEphemeral`` and the stream methods
(``chat.startStream`` / ``appendStream`` / ``stopStream``) with Slack's error
codes and size limits, the queries tests read back (:meth:`~SlackChatMethods.thread`,
:meth:`~SlackChatMethods.channel_messages`) and the watchers told of every change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANSWER_BLOCK", "Message", "SlackChatMethods", "blocks_too_long"]

ANSWER_BLOCK = "botgateway_answer"
"""The ``block_id`` botgateway gives a final answer's Refresh and feedback buttons (its live buttons are others)."""


@dataclass
class Message:
    """A message the bot posted (or a stream it started)."""

    channel: str
    """Channel id."""
    ts: str
    """Message ts."""
    thread_ts: str | None
    """Thread it was posted in."""
    text: str = ""
    """Current ``text`` (for streams: the markdown streamed so far)."""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    """Current blocks."""
    streaming: bool = False
    """True while a ``chat.startStream`` stream is open."""
    stream: bool = False
    """True if the message was created by ``chat.startStream``."""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Latest task update per task id (streams)."""
    chunks: list[dict[str, Any]] = field(default_factory=list)
    """Every chunk appended, in order (streams)."""
    versions: list[str] = field(default_factory=list)
    """Every text the message showed, oldest first."""
    stop_blocks: list[dict[str, Any]] = field(default_factory=list)
    """Blocks given to ``chat.stopStream``."""

    def markdown(self) -> str:
        """The text of the message's first markdown/section block (or ``text``)."""
        for block in self.blocks:
            if block.get("type") == "markdown":
                return str(block.get("text", ""))
            if block.get("type") == "section" and isinstance(block.get("text"), dict):
                return str(block["text"].get("text", ""))
        return self.text

    def buttons(self) -> list[dict[str, Any]]:
        """Button elements of the message's action blocks while it is live (Stop, Approve, Deny): a final answer's
        Refresh and feedback buttons are :meth:`answer_buttons`."""
        found: list[dict[str, Any]] = []
        for block in [*self.blocks, *self.stop_blocks]:
            if block.get("type") == "actions" and not str(block.get("block_id", "")).startswith(ANSWER_BLOCK):
                found.extend(e for e in block.get("elements", []) if e.get("type") == "button")
        return found

    def answer_buttons(self) -> dict[str, dict[str, Any]]:
        """A final answer's Refresh and feedback elements by ``action_id`` (buttons, Slack's ``feedback_buttons``)."""
        found: dict[str, dict[str, Any]] = {}
        for block in [*self.blocks, *self.stop_blocks]:
            if str(block.get("block_id", "")).startswith(ANSWER_BLOCK):
                found.update((str(e.get("action_id")), e) for e in block.get("elements", []))
        return found


def blocks_too_long(blocks: Any) -> bool:
    """Slack rejects markdown blocks over 12,000 characters (a message's together) and section text over 3,000."""
    if not isinstance(blocks, list):
        return True
    if sum(len(str(b.get("text", ""))) for b in blocks if b.get("type") == "markdown") > 12000:
        return True
    for block in blocks:
        if block.get("type") == "markdown" and len(str(block.get("text", ""))) > 12000:
            return True
        if block.get("type") == "section" and len(str((block.get("text") or {}).get("text", ""))) > 3000:
            return True
    return False


class SlackChatMethods:
    """The fake Slack's messages and its ``chat.*`` methods (a mixin of :class:`~tests.fakes.slack.FakeSlack`).

    Each ``_m_<method>`` returns a body dict (ok) or an error code string, as the fake's dispatcher expects.
    """

    streaming_enabled: bool
    new_ts: Callable[[], str]

    def _init_messages(self) -> None:
        """Start with no messages and no watchers (called from the fake's ``__init__``)."""
        self.messages: dict[tuple[str, str], Message] = {}
        """The bot's messages by (channel, ts)."""
        self.deleted: list[Message] = []
        """Messages removed with ``chat.delete``, in order."""
        self.ephemerals: list[dict[str, Any]] = []
        """``chat.postEphemeral`` arguments, in order."""
        self._watchers: list[Callable[[Message, str, float], None]] = []

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """Bot messages in a thread, oldest first."""
        found = [m for m in self.messages.values() if m.channel == channel and m.thread_ts == thread_ts]
        return sorted(found, key=lambda m: float(m.ts))

    def channel_messages(self, channel: str) -> list[Message]:
        """Bot messages in a channel, oldest first."""
        return sorted((m for m in self.messages.values() if m.channel == channel), key=lambda m: float(m.ts))

    def watch(self, callback: Callable[[Message, str, float], None]) -> None:
        """Call ``callback(message, change, at)`` after every accepted change of a bot message.

        ``change`` is the method's verb (``postMessage``, ``update``, ``delete``,
        ``startStream``, ``appendStream``, ``stopStream``); ``at`` is the
        ``time.monotonic()`` moment the change became visible (after the
        simulated latency). A deleted message is passed as it was.
        """
        self._watchers.append(callback)

    def _tell_watchers(self, msg: Message, change: str) -> None:
        at = time.monotonic()
        for callback in self._watchers:
            callback(msg, change, at)

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any] | str:
        channel = args.get("channel")
        if not channel:
            return "channel_not_found"
        text = str(args.get("text") or "")
        blocks = args.get("blocks") or []
        if not text and not blocks:
            return "no_text"
        if len(text) > 40000:
            return "msg_too_long"
        if blocks_too_long(blocks):
            return "invalid_blocks"
        ts = self.new_ts()
        msg = Message(channel, ts, args.get("thread_ts") or None, text, list(blocks))
        msg.versions.append(msg.markdown())
        self.messages[(channel, ts)] = msg
        self._tell_watchers(msg, "postMessage")
        return {"channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self.messages.get((str(args.get("channel")), str(args.get("ts"))))
        if msg is None:
            return "message_not_found"
        if msg.streaming:
            return "cant_update_message"
        text = str(args.get("text") or "")
        blocks = args.get("blocks")
        if len(text) > 40000:
            return "msg_too_long"
        if blocks is not None and blocks_too_long(blocks):
            return "invalid_blocks"
        msg.text = text
        if blocks is not None:
            msg.blocks = list(blocks)
        msg.versions.append(msg.markdown())
        self._tell_watchers(msg, "update")
        return {"channel": msg.channel, "ts": msg.ts, "text": text}

    def _m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self.messages.pop((str(args.get("channel")), str(args.get("ts"))), None)
        if msg is None:
            return "message_not_found"
        self.deleted.append(msg)
        self._tell_watchers(msg, "delete")
        return {"channel": msg.channel, "ts": msg.ts}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any] | str:
        self.ephemerals.append(args)
        return {"message_ts": self.new_ts()}

    def _m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        if not self.streaming_enabled:
            return "not_allowed_token_type"
        channel = str(args.get("channel") or "")
        if not channel:
            return "channel_not_found"
        if not args.get("thread_ts"):
            return "invalid_arguments"
        if channel.startswith("C") and not (args.get("recipient_user_id") and args.get("recipient_team_id")):
            return "missing_recipient_user_id"
        ts = self.new_ts()
        msg = Message(channel, ts, str(args["thread_ts"]), streaming=True, stream=True)
        self.messages[(channel, ts)] = msg
        error = self._append(msg, args)
        if error:
            return error
        self._tell_watchers(msg, "startStream")
        return {"channel": channel, "ts": ts}

    def _m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self._append_to_live_stream(args)
        if isinstance(msg, str):
            return msg
        self._tell_watchers(msg, "appendStream")
        return {"channel": msg.channel, "ts": msg.ts}

    def _m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self._append_to_live_stream(args)
        if isinstance(msg, str):
            return msg
        msg.streaming = False
        msg.stop_blocks = list(args.get("blocks") or [])
        self._tell_watchers(msg, "stopStream")
        return {"channel": msg.channel, "ts": msg.ts, "message": {"text": msg.text}}

    def _append_to_live_stream(self, args: dict[str, Any]) -> Message | str:
        """The streaming message ``args`` names, after appending its chunks; else Slack's error code."""
        msg = self.messages.get((str(args.get("channel")), str(args.get("ts"))))
        if msg is None:
            return "message_not_found"
        if not msg.streaming:
            return "message_not_in_streaming_state"
        return self._append(msg, args) or msg

    def _append(self, msg: Message, args: dict[str, Any]) -> str:
        text = args.get("markdown_text")
        if text is not None and len(str(text)) > 12000:
            return "msg_too_long"
        if text:
            msg.text += str(text)
            msg.chunks.append({"type": "markdown_text", "text": str(text)})
        for chunk in args.get("chunks") or []:
            msg.chunks.append(chunk)
            if chunk.get("type") == "markdown_text":
                msg.text += str(chunk.get("text", ""))
            elif chunk.get("type") == "task_update":
                msg.tasks[str(chunk.get("id"))] = chunk
        msg.versions.append(msg.text)
        return ""
