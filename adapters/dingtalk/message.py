"""What a DingTalk bot-message payload says: who asked, where, and the question.

One parse of the payload's fields (Stream mode and HTTP callbacks deliver the
same JSON), so the adapter reads typed fields instead of dictionary keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MEDIA_HINT", "MEDIA_TYPES", "BotMessage", "ParsedText", "message_text", "parse_bot_message"]

MEDIA_TYPES = {"picture", "file", "video", "audio"}
"""Rich-text item types that carry media rather than text."""

MEDIA_HINT = "(The user also attached an image or file, which you cannot see.)"
"""Added to a question that came with media, so the model does not pretend to have seen it."""


@dataclass(frozen=True)
class ParsedText:
    """The text of a bot message and whether media was dropped."""

    text: str
    """The question, trimmed; empty when the message carried none."""
    had_media: bool
    """The message carried an image, file or video that was ignored."""


def message_text(data: dict[str, Any]) -> ParsedText:
    """The question in a bot-message payload: text, rich text (text parts joined) or audio recognition."""
    msgtype = data.get("msgtype", "text")
    content = data.get("content") if isinstance(data.get("content"), dict) else {}
    if msgtype == "text":
        text = (data.get("text") or {}).get("content", "")
        return ParsedText(str(text).strip(), False)
    if msgtype == "richText":
        pieces, media = [], False
        for item in content.get("richText") or []:
            if not isinstance(item, dict):
                continue
            if "text" in item:
                pieces.append(str(item["text"]))
            elif item.get("downloadCode") or item.get("pictureDownloadCode") or item.get("type") in MEDIA_TYPES:
                media = True
        return ParsedText("\n".join(p.strip() for p in pieces if p.strip()), media)
    if msgtype == "audio" and content.get("recognition"):
        return ParsedText(str(content["recognition"]).strip(), False)
    return ParsedText("", True)


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


def parse_bot_message(data: dict[str, Any]) -> BotMessage:
    """Read a bot-message payload (missing fields become empty values)."""
    staff_id = str(data.get("senderStaffId") or "")
    return BotMessage(
        msg_id=str(data.get("msgId") or ""),
        conversation=str(data.get("conversationId") or ""),
        is_group=str(data.get("conversationType")) == "2",
        addressed=data.get("isInAtList") is not False,
        staff_id=staff_id,
        user_id=staff_id or str(data.get("senderId") or ""),
        user_name=str(data.get("senderNick") or ""),
        webhook=str(data.get("sessionWebhook") or ""),
        webhook_expires_ms=int(data.get("sessionWebhookExpiredTime") or 0),
        robot_code=str(data.get("robotCode") or ""),
        corp_id=str(data.get("chatbotCorpId") or ""),
        text=message_text(data),
    )
