"""Approval cards: a DingTalk interactive card with Approve and Deny buttons for each call that waits.

The answer's AI card streams one markdown variable and carries no buttons, so
each waiting call gets a card of its own from ``adapters.dingtalk.approval_template_id``
(variables ``prompt``, ``code``, ``token``, ``status``; its buttons call back through
Stream mode, :data:`CARD_CALLBACK_TOPIC`). Once decided, the card's ``status``
says how ("✅ approved by 王老板") and the template hides the buttons. Without a
template the prompt on the answer itself tells approvers to reply ``approve 4821``.

Which approval cards a handle has shown travels in its ``data`` (``approvals``),
so :meth:`ApprovalCards.sync` is a pure function of the handle and the snapshot.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.dingtalk.card_sink import deliver_body, undelivered
from adapters.dingtalk.inert import dingtalk_inert
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.cards.render import approval_text
from botgateway.sink import CardHandle, CardTarget
from botgateway.snapshot import ApprovalPrompt, CardSnapshot, ToolLine

__all__ = ["APPROVE_ACTION", "CARD_CALLBACK_TOPIC", "DENY_ACTION", "ApprovalCards", "CardAction", "parse_card_action"]

log = structlog.get_logger(__name__)

CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
"""The Stream-mode topic of card button presses."""

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


class ApprovalCards:
    """Delivers and closes the approval cards of one app."""

    def __init__(self, api: DingTalkOpenAPI, *, template_id: str, robot_code: str) -> None:
        """Cards from ``template_id`` (``adapters.dingtalk.approval_template_id``), sent as ``robot_code``."""
        self._api = api
        self._template_id = template_id
        self._robot_code = robot_code

    async def sync(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Deliver a card for each approval new in ``snapshot``; close those no longer waiting (all, once final).

        Cards are kept per call (``handle.data["approvals"]``): a code may be handed out again, a call id not.
        """
        shown: tuple[str, ...] = tuple(handle.data.get("approvals", ()))
        waiting = {} if snapshot.final else {p.call_id: p for p in snapshot.approvals}
        kept = list(shown)
        for call_id, prompt in waiting.items():
            if call_id not in shown and await self._deliver(handle.target, prompt, approval_text(prompt, snapshot.locale)):
                kept.append(call_id)
        lines = {b.call_id: b for b in snapshot.blocks if isinstance(b, ToolLine)}
        for call_id in shown:
            if call_id not in waiting:
                line = lines.get(call_id)
                await self._close(handle.target, call_id, (line.approval or line.summary) if line else "")
                kept.remove(call_id)
        return dataclasses.replace(handle, data={**handle.data, "approvals": tuple(kept)})

    async def _deliver(self, target: CardTarget, prompt: ApprovalPrompt, text: str) -> bool:
        params = {"prompt": dingtalk_inert(text, target.locale), "code": prompt.code, "token": prompt.token, "status": ""}
        body = deliver_body(target, template_id=self._template_id, out_track_id=_track_id(target, prompt.call_id),
                            params=params, robot_code=self._robot_code, forward=False)  # a forwarded approval would mislead
        try:
            refused = undelivered(await self._api.create_and_deliver(body))
        except Exception as exc:  # the answer's own card still says how to decide by reply
            log.warning("dingtalk.approval_card_failed", code=prompt.code, error=str(exc) or type(exc).__name__)
            return False
        if refused is not None:
            log.warning("dingtalk.approval_card_undelivered", code=prompt.code, error=refused)
        return refused is None

    async def _close(self, target: CardTarget, call_id: str, outcome: str) -> None:
        body = {"outTrackId": _track_id(target, call_id),
                "cardData": {"cardParamMap": {"status": dingtalk_inert(outcome or "—", target.locale)}}}
        try:
            await self._api.update_card(body)
        except Exception as exc:  # a stale button earns its presser a "no approval waiting" note, nothing worse
            log.warning("dingtalk.approval_card_close_failed", call_id=call_id, error=str(exc) or type(exc).__name__)


def _track_id(target: CardTarget, call_id: str) -> str:
    """One approval card per call of a turn."""
    return f"bg-approval-{target.turn_id}-{call_id}"
