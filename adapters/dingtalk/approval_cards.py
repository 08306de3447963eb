"""Presses on approval cards: which Approve or Deny a card callback carries.

Each call waiting for an approval gets a DingTalk interactive card of its own
with Approve and Deny buttons, delivered and closed by
:class:`~adapters.dingtalk.card_sink.ApprovalCards` (the owner of the app's
cards). Its buttons call back through Stream mode
(:data:`~adapters.dingtalk.card_sink.CARD_CALLBACK_TOPIC`) with the
approval's ``code`` and ``token``; this module reads such a callback
(:func:`parse_card_action`). Once decided, the card's ``status`` says how
("✅ approved by 王老板") and the template hides the buttons. Without a
template the prompt on the answer itself tells approvers to reply
``approve 4821``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["APPROVE_ACTION", "DENY_ACTION", "CardAction", "parse_card_action"]

APPROVE_ACTION = "approve"
"""Action id of the Approve button."""

DENY_ACTION = "deny"
"""Action id of the Deny button."""


@dataclass(frozen=True)
class CardAction:
    """One button press on an approval card."""

    user_id: str
    """Who pressed it (staff id)."""
    corp_id: str
    """Their organisation."""
    code: str
    """The approval's code (the button's ``code`` param)."""
    token: str
    """The request's token (the button's ``token`` param): a press decides this request alone."""
    approved: bool
    """Approve (True) or Deny."""


def parse_card_action(data: Mapping[str, Any]) -> CardAction | None:
    """The approval decision in a card callback's data; ``None`` for anything else (other cards, malformed)."""
    try:
        content = json.loads(str(data.get("content") or "{}"))
        private = content.get("cardPrivateData") or {}
        actions = private.get("actionIds") or []
        params = private.get("params") or {}
        code, token = str(params.get("code") or ""), str(params.get("token") or "")
    except (ValueError, AttributeError, TypeError):
        return None
    action = str(actions[0]) if isinstance(actions, list) and actions else ""
    if action not in (APPROVE_ACTION, DENY_ACTION) or not code or not data.get("userId"):
        return None
    return CardAction(user_id=str(data["userId"]), corp_id=str(data.get("corpId") or ""), code=code, token=token,
                      approved=action == APPROVE_ACTION)
