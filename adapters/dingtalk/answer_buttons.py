"""A final answer's buttons on a DingTalk AI card: Refresh, 👍 and 👎, when the card template has them.

The AI card streams one markdown variable; a template built for it may also
hold three buttons (``adapters.dingtalk.answer_buttons: true``): action ids
:data:`REFRESH_ACTION`, :data:`FEEDBACK_UP_ACTION` and
:data:`FEEDBACK_DOWN_ACTION`, each sending the param :data:`TURN_PARAM`, shown
once the card is finished (its ``flowStatus``) while the card's variable
:data:`TURN_PARAM` is set. A typed question's card gets that variable in its
``createAndDeliver`` call (:func:`answer_params`): no call of its own. A failed
turn's card ends as failed and shows none; a report's or an alert's card gets
no turn id. Presses call back through Stream mode on the card callback topic,
as approval cards' do (:func:`parse_answer_press`), and :class:`AnswerPresses`
answers them. Without such a template, ``refresh`` / ``刷新`` typed in the
chat still refreshes the newest answer.

A press is from the bot's own organisation only when it says so: a press
without an organisation, or from another one, is from outside (fail closed,
for a Refresh as for a vote).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

from adapters.dingtalk.inbound import PLATFORM, card_mode, card_presser
from botgateway.answers import Answer, is_question
from botgateway.answers import Vote
from botgateway.config import SessionScope
from botgateway.messages import InboundMessage, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.strings import t
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from adapters.dingtalk.adapter import DingTalkAdapter

__all__ = [
    "FEEDBACK_DOWN_ACTION",
    "FEEDBACK_UP_ACTION",
    "REFRESH_ACTION",
    "TURN_PARAM",
    "AnswerPress",
    "AnswerPresses",
    "answer_params",
    "parse_answer_press",
    "refresh_message",
]

log = structlog.get_logger(__name__)

REFRESH_ACTION = "refresh"
"""Action id of the Refresh button."""

FEEDBACK_UP_ACTION = "feedback_up"
"""Action id of the 👍 button."""

FEEDBACK_DOWN_ACTION = "feedback_down"
"""Action id of the 👎 button."""

TURN_PARAM = "turn_id"
"""The card variable that shows the buttons once the card is finished, and the param each button sends: the
answer's turn id."""

_ACTIONS = {REFRESH_ACTION: "refresh", FEEDBACK_UP_ACTION: "up", FEEDBACK_DOWN_ACTION: "down"}


@dataclass(frozen=True)
class AnswerPress:
    """One press of a final answer's button."""

    user_id: str
    """Who pressed it (staff id)."""
    corp_id: str
    """Their organisation."""
    action: Literal["refresh", "up", "down"]
    """Refresh, 👍 or 👎."""
    turn_id: str
    """The answer's turn (the button's ``turn_id`` param)."""


def parse_answer_press(data: Mapping[str, Any]) -> AnswerPress | None:
    """The answer button pressed in a card callback's data; ``None`` for anything else (approvals, malformed)."""
    try:
        content = json.loads(str(data.get("content") or "{}"))
        private = content.get("cardPrivateData") or {}
        actions = private.get("actionIds") or []
        turn_id = str((private.get("params") or {}).get(TURN_PARAM) or "")
    except (ValueError, AttributeError, TypeError):
        return None
    action = _ACTIONS.get(str(actions[0])) if isinstance(actions, list) and actions else None
    if action is None or not turn_id or not data.get("userId"):
        return None
    return AnswerPress(user_id=str(data["userId"]), corp_id=str(data.get("corpId") or ""),
                       action=action, turn_id=turn_id)  # type: ignore[arg-type]


def answer_params(target: CardTarget) -> dict[str, str]:
    """The card variables a card for ``target`` is created with so that, once finished, it shows the buttons: the
    turn id of a typed question (:func:`~botgateway.answers.book.is_question`); none for anything else."""
    return {TURN_PARAM: target.turn_id} if is_question(target) else {}


def refresh_message(press: AnswerPress, answer: Answer, presser: Principal, *, locale: str, session_scope: SessionScope,
                    mode: str, bot_corp: str) -> InboundMessage:
    """A Refresh press as ``presser``'s message in the chat of ``answer``'s card (its text is the gateway's to
    fill): their access and limits apply there, and the new card goes there."""
    chat = answer.target
    conversation, is_group = str(chat.get("chat_id") or ""), bool(chat.get("is_group"))
    target = CardTarget(
        platform=PLATFORM, chat_id=conversation, user_id=press.user_id, is_group=is_group, locale=locale,
        workspace_id=str(chat.get("workspace_id") or ""), extra={"mode": mode, "corp_id": bot_corp},
    )
    key = conversation_key(PLATFORM, session_scope, workspace=bot_corp, chat=conversation, user=press.user_id)
    ctx = ToolContext(user_id=press.user_id, platform=PLATFORM, conversation_id=key, chat_id=conversation,
                      is_group=is_group, principal=presser)
    return InboundMessage(platform=PLATFORM, message_id="", conversation_id=key, text="", target=target, ctx=ctx,
                          principal=presser)


def _stored_corp(answer: Answer) -> str:
    """The bot's organisation as the answer's card target kept it (empty for an answer of an older release)."""
    extra = answer.target.get("extra")
    return str(extra.get("corp_id") or "") if isinstance(extra, Mapping) else ""


class AnswerPresses:
    """Answers Refresh, 👍 and 👎 pressed on a final answer's card, for one :class:`DingTalkAdapter`."""

    def __init__(self, adapter: DingTalkAdapter) -> None:
        self._adapter = adapter

    async def handle(self, press: AnswerPress) -> None:
        """A Refresh asks the answer's question again as the presser, in the card's chat; a 👍 or 👎 is stored, and
        a 👎 asks the voter, in a 1:1 message, for a ``reason <text>`` reply. Never raises on a failed note."""
        note = await self._refresh(press) if press.action == "refresh" else await self._vote(press)
        if note:
            await self._adapter.tell_privately(press.user_id, note)

    async def _refresh(self, press: AnswerPress) -> str:
        """Refresh pressed: the note for the presser (empty when a new question was submitted, or refused there)."""
        adapter = self._adapter
        gateway = adapter.gateway
        assert gateway is not None
        answer = await gateway.answer(press.turn_id)
        if answer is None:
            return t(adapter.config.locale, "refresh_unknown")
        # What the bot's organisation is, learned from a message, or kept with the card (after a restart).
        bot_corp = adapter.corp_id or _stored_corp(answer)
        presser = await adapter.resolve_principal(card_presser(press.user_id, press.corp_id, bot_corp))
        is_group = bool(answer.target.get("is_group"))
        mode = card_mode(adapter.sink, adapter.monitor, is_group=is_group, staff_id=press.user_id)
        msg = refresh_message(press, answer, presser, locale=adapter.config.locale,
                              session_scope=adapter.config.session_scope, mode=mode, bot_corp=bot_corp)
        submission = await gateway.refresh(press.turn_id, msg, adapter.sink, adapter.policy)
        adapter.submissions.append((f"refresh:{press.turn_id}:{press.user_id}", submission))
        log.info("dingtalk.refresh_pressed", turn_id=press.turn_id, status=submission.status,
                 external=presser.external)
        return ""

    async def _vote(self, press: AnswerPress) -> str:
        """👍 or 👎 pressed: stored; the note for the voter (a 👎 asks for its reason; a 👍 needs no answer)."""
        adapter = self._adapter
        assert adapter.gateway is not None
        voter = await adapter.resolve_principal(card_presser(press.user_id, press.corp_id, adapter.corp_id))
        vote: Vote = "down" if press.action == "down" else "up"
        reply = await adapter.gateway.vote(press.turn_id, voter, vote, locale=adapter.config.locale,
                                           ask_reason=vote == "down")
        return reply if vote == "down" else ""
