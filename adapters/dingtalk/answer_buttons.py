"""A final answer's buttons on a DingTalk AI card: Refresh, 👍 and 👎, when the card template has them.

The AI card streams one markdown variable; a template built for it may also
hold three buttons (``adapters.dingtalk.answer_buttons: true``): action ids
:data:`REFRESH_ACTION`, :data:`FEEDBACK_UP_ACTION` and
:data:`FEEDBACK_DOWN_ACTION`, each sending the param :data:`TURN_PARAM`, shown
while the card's variable :data:`TURN_PARAM` is set. Once a final answer's
stream ended, :func:`show_answer_buttons` sets that variable (one
``PUT /v1.0/card/instances``), and presses call back through Stream mode on
the card callback topic, as approval cards' do (:func:`parse_answer_press`).
Without such a template, ``refresh`` / ``刷新`` typed in the chat still
refreshes the newest answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.answers import offers_answer_controls
from botgateway.sink import CardHandle
from botgateway.snapshot import CardSnapshot

__all__ = [
    "FEEDBACK_DOWN_ACTION",
    "FEEDBACK_UP_ACTION",
    "REFRESH_ACTION",
    "TURN_PARAM",
    "AnswerPress",
    "parse_answer_press",
    "show_answer_buttons",
]

log = structlog.get_logger(__name__)

REFRESH_ACTION = "refresh"
"""Action id of the Refresh button."""

FEEDBACK_UP_ACTION = "feedback_up"
"""Action id of the 👍 button."""

FEEDBACK_DOWN_ACTION = "feedback_down"
"""Action id of the 👎 button."""

TURN_PARAM = "turn_id"
"""The card variable that shows the buttons once set, and the param each button sends: the answer's turn id."""

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


async def show_answer_buttons(api: DingTalkOpenAPI, handle: CardHandle, snapshot: CardSnapshot) -> None:
    """Show the buttons on ``handle``'s card when ``snapshot`` is a final answer that offers them; never raises.

    The answer is delivered already: a failure (logged) only leaves the card without buttons, and ``refresh``
    typed in the chat still works.
    """
    turn_id = handle.target.turn_id
    if not offers_answer_controls(snapshot, turn_id):
        return
    body = {"outTrackId": handle.card_id, "cardData": {"cardParamMap": {TURN_PARAM: turn_id}},
            "cardUpdateOptions": {"updateCardDataByKey": True}}
    try:
        await api.update_card(body)
    except Exception as exc:
        log.warning("dingtalk.answer_buttons_failed", turn_id=turn_id, error=str(exc) or type(exc).__name__)
