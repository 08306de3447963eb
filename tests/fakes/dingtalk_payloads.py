"""What the fake DingTalk pushes to the bot: the bot-message payload (a ``CALLBACK`` frame's ``data``).

:func:`bot_message` builds it as DingTalk sends it: a group or 1:1 text (or
other ``msgtype``) message, its sender, session webhook and, for a quote, the
quoted message; :meth:`FakeDingTalk.push_bot_message
<tests.fakes.dingtalk.FakeDingTalk.push_bot_message>` sends it.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

__all__ = ["bot_message"]


def bot_message(
    text: str,
    *,
    msg_id: str | None = None,
    conversation_id: str = "cidGroup001==",
    group: bool = True,
    staff_id: str | None = "staff001",
    nick: str = "张三",
    webhook: str = "",
    webhook_expires_ms: int | None = None,
    msgtype: str = "text",
    content: dict[str, Any] | None = None,
    robot_code: str = "dingfakeappkey",
    quoted: str | dict[str, Any] | None = None,
    quoted_key: str | None = None,
) -> dict[str, Any]:
    """A bot-message payload as DingTalk sends it (the ``data`` of a CALLBACK frame).

    ``staff_id=None`` leaves ``senderStaffId`` out, as for external users: only the opaque ``senderId`` is sent.
    ``quoted`` makes the (text) message quote another one: a string quotes a text message saying it, a dict is
    the ``repliedMsg`` as sent (a quoted card: ``{"msgType": "interactiveCard", "content": {"text": "[…]"}}``);
    ``quoted_key`` is the ``originalProcessQueryKey`` naming the quoted robot message or card.
    """
    now_ms = int(time.time() * 1000)
    data: dict[str, Any] = {
        "conversationId": conversation_id,
        "chatbotCorpId": "dingcorp",
        "chatbotUserId": "$:LWCP_v1:$bot",
        "msgId": msg_id or f"msg{secrets.token_hex(8)}",
        "senderNick": nick,
        "isAdmin": False,
        "sessionWebhookExpiredTime": webhook_expires_ms if webhook_expires_ms is not None else now_ms + 90 * 60 * 1000,
        "createAt": now_ms,
        "senderCorpId": "dingcorp",
        "conversationType": "2" if group else "1",
        "senderId": f"$:LWCP_v1:${staff_id or 'external-' + secrets.token_hex(4)}",
        "sessionWebhook": webhook,
        "robotCode": robot_code,
        "msgtype": msgtype,
    }
    if staff_id is not None:
        data["senderStaffId"] = staff_id
    if group:
        data["conversationTitle"] = "运维群"
        data["isInAtList"] = True
        data["atUsers"] = [{"dingtalkId": "$:LWCP_v1:$bot"}]
    if msgtype == "text":
        data["text"] = {"content": text}
    else:
        data["content"] = content or {}
    if quoted is not None:
        assert msgtype == "text", "quotes are sent with text messages"
        replied = quoted if isinstance(quoted, dict) else {
            "msgType": "text", "msgId": f"msg{secrets.token_hex(8)}", "senderId": "$:LWCP_v1:$staff002",
            "senderNick": "王五", "createdAt": now_ms - 60_000, "content": {"text": quoted}}
        data["text"].update({"isReplyMsg": True, "repliedMsg": replied})
        if quoted_key is not None:
            data["originalProcessQueryKey"] = quoted_key
    return data
