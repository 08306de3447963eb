"""From a DingTalk bot message to what the gateway is handed: the card's target, the asker and the question.

A turn's card is an AI card when a template is configured and the app is not
degraded by throttling, else one markdown reply (:func:`card_mode`). A 1:1
sender without a staff id (external users) always gets the markdown reply: the
robot's 1:1 card space is addressed by staff id. The target keeps the bot's
organisation (``corp_id``), so a card's button pressed after a restart still
knows it (:mod:`adapters.dingtalk.answer_buttons`).
"""

from __future__ import annotations

from typing import Literal, Protocol

import structlog

from adapters.dingtalk.message import MEDIA_HINT, BotMessage
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.config import DingTalkConfig
from botgateway.messages import InboundMessage, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext

__all__ = [
    "PLATFORM", "CardSinks", "card_mode", "card_presser", "dingtalk_principal", "inbound_message", "message_target",
    "note_key",
]

log = structlog.get_logger(__name__)

PLATFORM = "dingtalk"
"""The adapter's name: the platform of its principals, conversations and cards."""


class CardSinks(Protocol):
    """What :func:`card_mode` reads of the adapter's sink (:class:`~adapters.dingtalk.sink.DingTalkSink`)."""

    @property
    def card(self) -> object | None:
        """The AI card sink, or None without a card template."""
        ...


def _sender_corp(message: BotMessage) -> str:
    """The asker's own organisation: ``senderCorpId``, else the bot's when a ``senderStaffId`` came (DingTalk gives
    staff ids only of the bot's own organisation), else unknown (empty)."""
    if message.sender_corp_id:
        return message.sender_corp_id
    return message.corp_id if message.staff_id else ""


def dingtalk_principal(message: BotMessage) -> Principal:
    """The asker as ``dingtalk:<staffId>`` (else the opaque sender id); external when of another organisation.

    Fail closed: an asker whose organisation cannot be established (neither ``senderCorpId`` nor
    ``senderStaffId``), or a message that does not name the bot's (``chatbotCorpId``), is from outside.
    """
    # A missing staff id alone also happens inside one org: senderCorpId then says whose member the asker is.
    corp = _sender_corp(message)
    external = not corp or not message.corp_id or corp != message.corp_id
    return Principal.of(PLATFORM, message.user_id, team=corp, external=external, name=message.user_name)


def card_presser(user_id: str, corp_id: str, bot_corp: str) -> Principal:
    """Who pressed a card's button, as ``dingtalk:<staffId>`` of organisation ``corp_id``: external unless that is
    the bot's own ``bot_corp``. Fail closed: a press without an organisation, or while the bot's is unknown, is
    from outside."""
    external = not corp_id or corp_id != bot_corp
    return Principal.of(PLATFORM, user_id, team=corp_id, external=external)


def card_mode(sink: CardSinks, monitor: ThrottleMonitor, *, is_group: bool, staff_id: str, msg_id: str = "",
              conversation: str = "") -> Literal["card", "markdown"]:
    """``card`` or ``markdown`` for a turn in a group (or a 1:1 chat with ``staff_id``'s sender)."""
    if sink.card is None or monitor.degraded:
        return "markdown"
    if not is_group and not staff_id:
        # A 1:1 card goes to dtv1.card//IM_ROBOT.{staffId}, which a senderId cannot fill;
        # this turn replies in markdown through the session webhook instead.
        log.info("dingtalk.card_needs_staff_id", msg_id=msg_id, conversation=conversation,
                 note="1:1 sender has no senderStaffId; answering with a markdown reply")
        return "markdown"
    return "card"


def _webhook(message: BotMessage, oapi_base_url: str) -> str:
    """The session webhook, if it is DingTalk's: a forged payload must not make us post answers elsewhere."""
    if message.webhook and not message.webhook.startswith(oapi_base_url.rstrip("/") + "/"):
        log.warning("dingtalk.webhook_ignored", reason="not under oapi_base_url")
        return ""
    return message.webhook


def message_target(message: BotMessage, config: DingTalkConfig, *, mode: str, robot_code: str) -> CardTarget:
    """Where the answer to ``message`` goes: its chat, as ``mode`` (``card`` or ``markdown``)."""
    return CardTarget(
        platform=PLATFORM,
        chat_id=message.conversation,
        user_id=message.user_id,
        user_name=message.user_name,
        is_group=message.is_group,
        locale=config.locale,
        workspace_id=message.robot_code or robot_code,
        extra={
            "mode": mode,
            "session_webhook": _webhook(message, config.oapi_base_url),
            "session_webhook_expires_ms": message.webhook_expires_ms,
            "msg_id": message.msg_id,
            "corp_id": message.corp_id,
        },
    )


def inbound_message(message: BotMessage, target: CardTarget, config: DingTalkConfig) -> InboundMessage:
    """``message`` as the gateway's question, answered at ``target``."""
    text = message.text.text
    if message.text.had_media:
        # Tell the model, so it does not pretend to have seen the picture.
        text += "\n\n" + MEDIA_HINT
    key = conversation_key(
        PLATFORM, config.session_scope, workspace=message.corp_id, chat=message.conversation, user=message.user_id,
    )
    ctx = ToolContext(
        user_id=message.user_id,
        user_name=message.user_name,
        platform=PLATFORM,
        conversation_id=key,
        chat_id=message.conversation,
        is_group=message.is_group,
        principal=dingtalk_principal(message),
    )
    return InboundMessage(
        platform=PLATFORM, message_id=message.msg_id, conversation_id=key, text=text, target=target, ctx=ctx,
        principal=ctx.principal, quoted=message.quote.text if message.quote is not None else "",
        # What a quoted card is known by (its delivery's carrierId): its text does not come with the quote.
        quoted_key=message.quote.process_query_key if message.quote is not None else "",
    )


def note_key(message: BotMessage) -> str:
    """What to tell the asker of a message without a question (logged when it could not be read)."""
    if message.text.unreadable:
        log.warning("dingtalk.message_unreadable", msg_id=message.msg_id, reason=message.text.unreadable)
        return "message_unreadable"
    return "images_ignored" if message.text.had_media else "empty_question"
