"""DingTalk: group @-messages and 1:1 chats, answered in a streamed AI card.

The composition root (``botgateway.cli.run``) builds :class:`DingTalkAdapter`
with the gateway; tests build it the same way, with the fake platform's URLs.
"""

from __future__ import annotations

from adapters.dingtalk.adapter import DingTalkAdapter
from adapters.dingtalk.callback import SignatureError, sign, verify_signature
from adapters.dingtalk.card_sink import DingTalkCardSink
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.message import message_text
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.sink import DingTalkSink

__all__ = [
    "DingTalkAdapter",
    "DingTalkCardSink",
    "DingTalkMarkdownSink",
    "DingTalkOpenAPI",
    "DingTalkSink",
    "MarkdownSender",
    "SignatureError",
    "message_text",
    "sign",
    "verify_signature",
]
