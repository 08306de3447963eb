"""DingTalk: group @-messages and 1:1 chats, answered in a streamed AI card.

``create_adapter(config, runtime)`` is what ``botgateway run`` calls; tests build
:class:`DingTalkAdapter` directly with a gateway and the fake platform's URLs.
"""

from __future__ import annotations

from typing import Any

from adapters.dingtalk.adapter import DingTalkAdapter, message_text
from adapters.dingtalk.callback import SignatureError, sign, verify_signature
from adapters.dingtalk.card_sink import DingTalkCardSink
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.sink import DingTalkSink
from botgateway.config import DingTalkConfig


def create_adapter(config: DingTalkConfig, runtime: Any) -> DingTalkAdapter:
    """The adapter for ``botgateway run``; ``start(runtime.gateway)`` begins receiving."""
    return DingTalkAdapter(config, gateway=getattr(runtime, "gateway", None))


__all__ = [
    "DingTalkAdapter",
    "DingTalkCardSink",
    "DingTalkMarkdownSink",
    "DingTalkOpenAPI",
    "DingTalkSink",
    "MarkdownSender",
    "SignatureError",
    "create_adapter",
    "message_text",
    "sign",
    "verify_signature",
]
