"""A message quoting an alert card continues the card's conversation.

Slack threads carry the card's conversation by themselves (a reply in the
card's thread). DingTalk has no threads: a person quotes the card when they
@-mention the bot. The quoted text carries the card's reference
(``A-3F9C2B``) when the platform sends it (a robot message); a quoted AI card
comes as a placeholder with the card's key instead. The desk recorded both
with the card's conversation. The
question then runs in that conversation, whose history holds the alert and
its investigation.
"""

from __future__ import annotations

import dataclasses
import re

import structlog

from botgateway.messages import InboundMessage
from botgateway.stores.base import DocumentStore

__all__ = ["quote_key_key", "quoted_conversation", "ref_key"]

log = structlog.get_logger(__name__)

_REF = re.compile(r"\bA-[0-9A-F]{6}\b")
"""A card reference as :func:`botgateway.alerts.group.group_ref` writes it."""


def ref_key(destination: str, ref: str) -> str:
    """The Store key under which a card reference names the conversation of its card in ``destination``
    (``dingtalk:cid…``): one group has a card, and a conversation, per destination."""
    return f"alertref:{destination}:{ref.upper()}"


def quote_key_key(quote_key: str) -> str:
    """The Store key under which a card's quote key (a DingTalk card's carrier id) names its conversation."""
    return f"alertquote:{quote_key}"


async def quoted_conversation(store: DocumentStore, msg: InboundMessage) -> InboundMessage:
    """``msg`` moved into the conversation of the alert card it quotes, when it quotes one posted in the same chat."""
    if not msg.quoted and not msg.quoted_key:
        return msg
    # A quoted card's text may not come with the quote (a DingTalk AI card's does not): its key then names it.
    here = f"{msg.platform}:{msg.ctx.chat_id}"
    keys = [ref_key(here, ref) for ref in dict.fromkeys(_REF.findall(msg.quoted))]
    if msg.quoted_key:
        keys.append(quote_key_key(msg.quoted_key))
    for key in keys:
        try:
            doc = await store.get_document(key)
        except Exception as exc:  # the question is still answered, without the alert's context
            log.warning("alerts.context_unavailable", key=key, error=type(exc).__name__)
            return msg
        if not doc or doc.get("destination") != here:
            continue
        conversation = str(doc.get("conversation_id") or "")
        if conversation:
            log.info("alerts.quoted", key=key, conversation=conversation)
            return dataclasses.replace(msg, conversation_id=conversation,
                                       ctx=dataclasses.replace(msg.ctx, conversation_id=conversation))
    return msg
