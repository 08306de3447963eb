"""What a DingTalk bot-message payload says: who asked, where, and the question.

One parse of the payload's fields (Stream mode and HTTP callbacks deliver the
same JSON), so the adapter reads typed fields instead of dictionary keys.

A message that quotes (replies to) another one carries it in ``text``:
``isReplyMsg`` true and ``repliedMsg`` with ``msgType``, ``msgId``,
``senderId`` and ``content`` (``{"text": …}``, rich text, or for a quoted card
a placeholder or nothing); the payload's ``originalProcessQueryKey`` names the
quoted robot message or card (the ``processQueryKey`` its send returned, the
``carrierId`` of a delivered card). DingTalk does not document these fields;
they are read as real callbacks send them, and never trusted to be well formed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MEDIA_HINT", "MEDIA_TYPES", "BotMessage", "ParsedText", "Quote", "message_text", "parse_bot_message", "quote_of",
]

MEDIA_TYPES = {"picture", "file", "video", "audio"}
"""Rich-text item types that carry media rather than text."""

MEDIA_HINT = "(The user also attached an image or file, which you cannot see.)"
"""Added to a question that came with media, so the model does not pretend to have seen it."""


@dataclass(frozen=True)
class ParsedText:
    """The text of a bot message, whether media was dropped, and whether it could be read at all."""

    text: str
    """The question, trimmed; empty when the message carried none."""
    had_media: bool
    """The message carried an image, file or video that was ignored."""
    unreadable: str = ""
    """Why the content could not be read (a field of an unexpected type); empty when it could."""


class _Unreadable(Exception):
    """A field of the payload has a type no documented message shape uses."""


def _string(value: Any, field: str) -> str:
    """A text field: a string, or absent; anything else makes the message unreadable."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise _Unreadable(f"{field} is a {type(value).__name__}")


def _text_field(value: Any, field: str) -> str:
    """A text field DingTalk sends as an object (``{"content": …}``, ``{"text": …}``) or, in some payloads, a plain string."""
    if isinstance(value, dict):
        inner = value.get("content", value.get("text"))
        return _string(inner, f"{field}.content")
    return _string(value, field)


def _rich_text(content: dict[str, Any]) -> ParsedText:
    items = content.get("richText")
    if items is None:
        return ParsedText("", False)
    if not isinstance(items, list):
        raise _Unreadable(f"content.richText is a {type(items).__name__}")
    pieces, media = [], False
    for item in items:
        if not isinstance(item, dict):
            continue  # one odd piece does not hide the text around it
        if item.get("text") is not None:
            pieces.append(_string(item["text"], "content.richText[].text"))
        elif item.get("downloadCode") or item.get("pictureDownloadCode") or item.get("type") in MEDIA_TYPES:
            media = True
    return ParsedText("\n".join(p.strip() for p in pieces if p.strip()), media)


def _read_text(data: dict[str, Any]) -> ParsedText:
    msgtype = data.get("msgtype") or "text"
    if not isinstance(msgtype, str):
        raise _Unreadable(f"msgtype is a {type(msgtype).__name__}")
    raw_content = data.get("content")
    content: dict[str, Any] = raw_content if isinstance(raw_content, dict) else {}
    if msgtype == "text":
        return ParsedText(_text_field(data.get("text"), "text").strip(), False)
    if msgtype == "richText":
        return _rich_text(content)
    if msgtype == "markdown":
        text = _text_field(content, "content") if content else _text_field(data.get("markdown"), "markdown")
        return ParsedText(text.strip(), False)
    if msgtype == "audio":
        recognition = _string(content.get("recognition"), "content.recognition").strip()
        return ParsedText(recognition, not recognition)
    # picture, video, file and types we do not know: nothing to read as text
    return ParsedText("", True)


def message_text(data: dict[str, Any]) -> ParsedText:
    """The question in a bot-message payload: text, rich text (text parts joined), markdown or audio recognition.

    Every documented shape is read, with missing or null fields as empty; a
    field of a type no shape uses gives ``unreadable`` with the reason instead
    of an exception.
    """
    try:
        return _read_text(data)
    except _Unreadable as exc:
        return ParsedText("", False, unreadable=str(exc))


@dataclass(frozen=True, kw_only=True)
class Quote:
    """The message a bot message quotes."""

    text: str
    """The quoted text (rich text's text parts joined), trimmed; empty when it carried none (a picture)."""
    msg_id: str = ""
    """``repliedMsg.msgId``."""
    msg_type: str = ""
    """``repliedMsg.msgType``: ``text``, ``richText``, ``markdown``, ``interactiveCard`` (a card)…"""
    sender_id: str = ""
    """``repliedMsg.senderId``: who wrote it (the robot's ``chatbotUserId`` for its own messages and cards)."""
    process_query_key: str = ""
    """``originalProcessQueryKey``: the quoted robot message's ``processQueryKey``, or the ``carrierId`` a
    card's delivery returned; empty when the payload has none."""


def _quoted_text(content: Any) -> str:
    """The text of ``repliedMsg.content``: a string, ``{"text": …}``, or rich text (its text parts joined)."""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, dict):
        return ""
    if isinstance(content.get("text"), str):
        return content["text"].strip()
    items = content.get("richText")
    pieces = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("text"), str):
            pieces.append(item["text"])
        elif "text" in (item.get("msgType"), item.get("type")) and isinstance(item.get("content"), str):
            pieces.append(item["content"])  # another shape of a text part seen in quotes
    return "\n".join(p.strip() for p in pieces if p.strip())


def quote_of(data: dict[str, Any]) -> Quote | None:
    """The message ``data`` quotes, or None when it quotes none; never raises (odd fields become empty)."""
    text = data.get("text")
    if not isinstance(text, dict):
        return None
    replied = text.get("repliedMsg")
    if text.get("isReplyMsg") is not True and not isinstance(replied, dict):
        return None
    replied = replied if isinstance(replied, dict) else {}
    return Quote(
        text=_quoted_text(replied.get("content")),
        msg_id=_plain(replied.get("msgId")),
        msg_type=_plain(replied.get("msgType")),
        sender_id=_plain(replied.get("senderId")),
        process_query_key=_plain(data.get("originalProcessQueryKey")),
    )


@dataclass(frozen=True, kw_only=True)
class BotMessage:
    """The fields of a bot-message payload the adapter acts on."""

    msg_id: str
    """``msgId``: the same for a redelivery, so it dedupes."""
    conversation: str
    """``conversationId``; empty in a malformed payload."""
    is_group: bool
    """A group chat (``conversationType`` 2), else a 1:1 chat."""
    addressed: bool
    """Not explicitly left out of ``isInAtList``: group chatter that does not @ the bot is False."""
    staff_id: str
    """``senderStaffId``; empty for external users (and some org setups)."""
    user_id: str
    """The staff id, else ``senderId``: tells askers apart even without a staff id."""
    user_name: str
    """``senderNick``."""
    webhook: str
    """``sessionWebhook`` as sent (not yet checked against the OpenAPI host)."""
    webhook_expires_ms: int
    """``sessionWebhookExpiredTime`` in epoch milliseconds (0 when absent)."""
    robot_code: str
    """``robotCode`` of the robot that was addressed (empty when absent)."""
    corp_id: str
    """``chatbotCorpId``: the organisation, for conversation keys."""
    text: ParsedText
    """The question and whether media was dropped."""
    sender_corp_id: str = ""
    """``senderCorpId``: the asker's own organisation; another than :attr:`corp_id` makes them external, and so does
    its absence without a :attr:`staff_id` (:func:`adapters.dingtalk.inbound.dingtalk_principal`)."""
    quote: Quote | None = None
    """The message it quotes (replies to), if any."""


def _plain(value: Any) -> str:
    """An id or name field as text; a number is kept, anything else (objects, lists) is empty."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _millis(value: Any) -> int:
    """An epoch-milliseconds field; 0 when absent or not a number."""
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def parse_bot_message(data: dict[str, Any]) -> BotMessage:
    """Read a bot-message payload; never raises (missing or odd fields become empty values)."""
    staff_id = _plain(data.get("senderStaffId"))
    return BotMessage(
        msg_id=_plain(data.get("msgId")),
        conversation=_plain(data.get("conversationId")),
        is_group=_plain(data.get("conversationType")) == "2",
        addressed=data.get("isInAtList") is not False,
        staff_id=staff_id,
        user_id=staff_id or _plain(data.get("senderId")),
        user_name=_plain(data.get("senderNick")),
        webhook=_plain(data.get("sessionWebhook")),
        webhook_expires_ms=_millis(data.get("sessionWebhookExpiredTime")),
        robot_code=_plain(data.get("robotCode")),
        corp_id=_plain(data.get("chatbotCorpId")),
        text=message_text(data),
        sender_corp_id=_plain(data.get("senderCorpId")),
        quote=quote_of(data),
    )
