"""A final answer's buttons on a DingTalk AI card: Refresh, 👍 and 👎, when the card template has them.

The AI card streams one markdown variable; a template built for it may also
hold three buttons (``adapters.dingtalk.answer_buttons: true``): action ids
:data:`REFRESH_ACTION`, :data:`FEEDBACK_UP_ACTION` and
:data:`FEEDBACK_DOWN_ACTION`, each sending the param
:data:`~adapters.dingtalk.card_sink.TURN_PARAM`, shown once the card is
finished (its ``flowStatus``) while the card's variable of that name is set.
The card's owner gives a typed question's card that variable in its
``createAndDeliver`` call (:func:`~adapters.dingtalk.card_sink.answer_params`):
no call of its own. A failed turn's card ends as failed and shows none; a
report's or an alert's card gets no turn id. Presses call back through Stream
mode on the card callback topic, as approval cards' do
(:func:`parse_answer_press`), and :class:`AnswerPresses` answers them with the
collaborators it is given. Without such a template, ``refresh`` / ``刷新``
typed in the chat still refreshes the newest answer.

A press is from the bot's own organisation only when it says so: a press
without an organisation, or from another one, is from outside (fail closed,
for a Refresh as for a vote).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from adapters.dingtalk.card_sink import TURN_PARAM
from adapters.dingtalk.inbound import PLATFORM, card_mode, card_presser
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.access import GroupResolver, resolve_safely
from botgateway.answers import Answer, Vote
from botgateway.config import DingTalkConfig, SessionScope
from botgateway.messages import InboundMessage, Submission, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardSink, CardTarget
from botgateway.strings import t
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from adapters.dingtalk.sink import DingTalkSink
    from botgateway.cards.buffer_policy import BufferPolicy

__all__ = [
    "FEEDBACK_DOWN_ACTION",
    "FEEDBACK_UP_ACTION",
    "REFRESH_ACTION",
    "AnswerGateway",
    "AnswerPress",
    "AnswerPresses",
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


class AnswerGateway(Protocol):
    """The gateway's part a final answer's buttons use: the answer on record, its Refresh, and votes."""

    async def answer(self, turn_id: str) -> Answer | None:
        """The finished answer of ``turn_id`` on record, if kept."""
        ...

    async def refresh(self, turn_id: str, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """The answer of ``turn_id`` asked again as ``msg``'s presser, in a new card."""
        ...

    async def vote(self, turn_id: str, voter: Principal, vote: Vote, *, locale: str, ask_reason: bool = False) -> str:
        """A 👍 or 👎 on the answer of ``turn_id``; the note for the voter."""
        ...


class AnswerPresses:
    """Answers Refresh, 👍 and 👎 pressed on a final answer's card, with what the adapter hands it when it is built.

    Args:
        gateway: Where answers are on record, asked again and voted on.
        config: The ``adapters.dingtalk`` section (locale, session scope).
        sink: The adapter's sink: a Refresh's new card goes through it, as an AI card when it has one.
        monitor: Whether card calls are throttled now (a Refresh then answers with a markdown reply).
        policy: Update pacing of the new card.
        groups: Adds the presser's departments the policy names.
        bot_corp: The bot's own organisation as learned so far from the messages received (empty before).
        tell: Sends a 1:1 note to a presser (never raises).
        submissions: Where a Refresh's submission is kept, beside the adapter's messages'.
    """

    def __init__(
        self,
        gateway: AnswerGateway,
        *,
        config: DingTalkConfig,
        sink: DingTalkSink,
        monitor: ThrottleMonitor,
        policy: BufferPolicy,
        groups: GroupResolver,
        bot_corp: Callable[[], str],
        tell: Callable[[str, str], Awaitable[None]],
        submissions: MutableSequence[tuple[str, Submission]],
    ) -> None:
        self._gateway = gateway
        self._config = config
        self._sink = sink
        self._monitor = monitor
        self._policy = policy
        self._groups = groups
        self._bot_corp = bot_corp
        self._tell = tell
        self._submissions = submissions

    async def handle(self, press: AnswerPress) -> None:
        """A Refresh asks the answer's question again as the presser, in the card's chat; a 👍 or 👎 is stored, and
        a 👎 asks the voter, in a 1:1 message, for a ``reason <text>`` reply. Never raises on a failed note."""
        note = await self._refresh(press) if press.action == "refresh" else await self._vote(press)
        if note:
            await self._tell(press.user_id, note)

    async def _refresh(self, press: AnswerPress) -> str:
        """Refresh pressed: the note for the presser (empty when a new question was submitted, or refused there)."""
        answer = await self._gateway.answer(press.turn_id)
        if answer is None:
            return t(self._config.locale, "refresh_unknown")
        # What the bot's organisation is, learned from a message, or kept with the card (after a restart).
        bot_corp = self._bot_corp() or _stored_corp(answer)
        presser = await resolve_safely(self._groups, card_presser(press.user_id, press.corp_id, bot_corp))
        is_group = bool(answer.target.get("is_group"))
        mode = card_mode(self._sink, self._monitor, is_group=is_group, staff_id=press.user_id)
        msg = refresh_message(press, answer, presser, locale=self._config.locale,
                              session_scope=self._config.session_scope, mode=mode, bot_corp=bot_corp)
        submission = await self._gateway.refresh(press.turn_id, msg, self._sink, self._policy)
        self._submissions.append((f"refresh:{press.turn_id}:{press.user_id}", submission))
        log.info("dingtalk.refresh_pressed", turn_id=press.turn_id, status=submission.status,
                 external=presser.external)
        return ""

    async def _vote(self, press: AnswerPress) -> str:
        """👍 or 👎 pressed: stored; the note for the voter (a 👎 asks for its reason; a 👍 needs no answer)."""
        voter = await resolve_safely(self._groups, card_presser(press.user_id, press.corp_id, self._bot_corp()))
        vote: Vote = "down" if press.action == "down" else "up"
        reply = await self._gateway.vote(press.turn_id, voter, vote, locale=self._config.locale,
                                         ask_reason=vote == "down")
        return reply if vote == "down" else ""
