"""Button presses on Slack cards: who pressed, a note only they see, and a live card's Stop and Approve / Deny.

Each press is acknowledged at once and handed to the gateway, which finds the
turn or the approval in whichever process of the fleet holds it. The presser
is a principal like an asker (their own team comes with the action, so a
Slack Connect guest is external here too, and the user groups the policy
names are looked up). What a press could not do is told to the presser alone,
in the card's thread (``chat.postEphemeral``). A final answer's buttons are
:mod:`adapters.slack.answer_actions`, which asks the same of its pressers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from adapters.slack.edit import post_ephemeral
from adapters.slack.events import slack_principal
from adapters.slack.render import APPROVE_ACTION_ID, DENY_ACTION_ID, STOP_ACTION_ID
from botgateway.principal import Principal
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_bolt.app.async_app import AsyncApp

    from adapters.slack.adapter import SlackAdapter

__all__ = ["Presses", "press_channel"]

log = structlog.get_logger(__name__)


def press_channel(body: Mapping[str, Any]) -> str:
    """The channel of the message whose button was pressed."""
    return str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")


class Presses:
    """Who pressed and how they are told, and the Stop and Approve / Deny handlers, for one :class:`SlackAdapter`."""

    def __init__(self, adapter: SlackAdapter) -> None:
        self._adapter = adapter

    def register(self, app: AsyncApp) -> None:
        """Listen to the Stop and Approve / Deny buttons."""
        app.action(STOP_ACTION_ID)(self.on_stop)
        app.action(APPROVE_ACTION_ID)(self.on_approval)
        app.action(DENY_ACTION_ID)(self.on_approval)

    async def presser(self, body: Mapping[str, Any]) -> Principal:
        """Whoever pressed a button (or submitted a modal), with the user groups the policy names."""
        adapter = self._adapter
        user = body.get("user") or {}
        user_id = str(user.get("id") or "")
        name = await adapter.names.of(user_id, None)
        # The presser's own team comes with the action: a Slack Connect guest is external here too.
        presser = slack_principal({"user": user_id, "user_team": user.get("team_id")}, team=adapter.team_id,
                                  user_name=name)
        return await adapter.resolve_principal(presser)

    async def tell(self, body: Mapping[str, Any], note: str) -> None:
        """An ephemeral note to whoever pressed a button, in the message's thread."""
        user = str((body.get("user") or {}).get("id") or "")
        message = body.get("message") or {}
        await post_ephemeral(self._adapter.client, channel=press_channel(body), user=user, text=note,
                             thread_ts=message.get("thread_ts") or None)

    async def on_stop(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Stop pressed: the turn is told to stop (only its asker or an admin may), else the presser is told why."""
        await ack()
        adapter = self._adapter
        assert adapter.gateway is not None
        turn_id = str(action.get("value") or "")
        user = str((body.get("user") or {}).get("id") or "")
        # The turn may run in another process of the fleet: the gateway asks it, and says why not.
        answer = await adapter.gateway.stop(turn_id, user) if turn_id else "already_done"
        if answer == "stopped":
            log.info("slack.stop_pressed", turn_id=turn_id, user=user)
            adapter.report_action("handled", "stopped")
            return
        reason = "stop_unreachable" if answer == "unreachable" else answer
        await self.tell(body, t(adapter.config.locale, reason))
        adapter.report_action("ignored", reason)

    async def on_approval(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve or Deny pressed: counted when the presser is an approver there, else they are told why, privately."""
        await ack()
        adapter = self._adapter
        assert adapter.gateway is not None
        presser = await self.presser(body)
        code, _, token = str(action.get("value") or "").partition(":")
        result = await adapter.gateway.decide_approval(
            code, presser, approved=action.get("action_id") == APPROVE_ACTION_ID, locale=adapter.config.locale,
            channel=f"slack:{press_channel(body)}", token=token)
        if result.answer != "decided":
            await self.tell(body, result.note)
        adapter.report_action("handled" if result.answer == "decided" else "ignored", result.answer)
