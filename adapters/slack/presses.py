"""Button presses on Slack cards: who pressed, a note only they see, and a live card's Stop and Approve / Deny.

Each press is acknowledged at once and handed to the gateway, which finds the
turn or the approval in whichever process of the fleet holds it. The presser
is a principal like an asker (their own team comes with the action, so a
Slack Connect guest is external here too, and the user groups the policy
names are looked up). What a press could not do is told to the presser alone,
in the card's thread (``chat.postEphemeral``). A final answer's buttons are
:mod:`adapters.slack.answer_actions`, which asks the same of its pressers.
The handlers are given what they use when the adapter builds its app (the
gateway's few methods they call, the group resolver, how a press is
reported): they never reach back into the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from adapters.slack.edit import post_ephemeral
from adapters.slack.events import slack_principal
from adapters.slack.render import APPROVE_ACTION_ID, DENY_ACTION_ID, STOP_ACTION_ID
from botgateway.access import GroupResolver, resolve_safely
from botgateway.principal import Principal
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.names import DisplayNames
    from botgateway.approvals import VoteResult
    from botgateway.fleet import StopAnswer
    from botgateway.messages import Submission

__all__ = ["ActionReport", "PressGateway", "Presses", "press_channel"]

log = structlog.get_logger(__name__)


def press_channel(body: Mapping[str, Any]) -> str:
    """The channel of the message whose button was pressed."""
    return str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")


class PressGateway(Protocol):
    """The gateway's part a live card's buttons use: Stop, and Approve / Deny."""

    async def stop(self, turn_id: str, user_id: str) -> StopAnswer:
        """Stop a running or queued turn, in whichever process it runs; why not, for the presser."""
        ...

    async def decide_approval(
        self, code: str, principal: Principal, *, approved: bool, locale: str, channel: str | None = None,
        token: str | None = None,
    ) -> VoteResult:
        """An Approve/Deny press, counted when ``principal`` may decide it there."""
        ...


class ActionReport(Protocol):
    """Reports what a button press (or modal) came to (:meth:`~adapters.slack.SlackAdapter.report_action`)."""

    def __call__(self, outcome: Literal["submitted", "ignored", "handled"], reason: str,
                 submission: Submission | None = None, *, event_type: str = "block_actions") -> None:
        """Report one press (metrics, logs, tests)."""
        ...


class Presses:
    """Who pressed and how they are told, and the Stop and Approve / Deny handlers, of one Slack app.

    Args:
        gateway: Where turns are stopped and approvals decided (None: the adapter runs without one).
        client: The Web API client a note to the presser is posted with.
        names: Users' display names.
        team_id: The workspace the bot is installed in.
        groups: Adds the presser's user groups the policy names.
        locale: The language of the notes.
        report: Reports what each press came to.
    """

    def __init__(self, gateway: PressGateway | None, *, client: AsyncWebClient, names: DisplayNames, team_id: str,
                 groups: GroupResolver, locale: str, report: ActionReport) -> None:
        self._gateway = gateway
        self._client = client
        self._names = names
        self._team_id = team_id
        self._groups = groups
        self._locale = locale
        self._report = report

    def register(self, app: AsyncApp) -> None:
        """Listen to the Stop and Approve / Deny buttons."""
        app.action(STOP_ACTION_ID)(self.on_stop)
        app.action(APPROVE_ACTION_ID)(self.on_approval)
        app.action(DENY_ACTION_ID)(self.on_approval)

    async def presser(self, body: Mapping[str, Any]) -> Principal:
        """Whoever pressed a button (or submitted a modal), with the user groups the policy names."""
        user = body.get("user") or {}
        user_id = str(user.get("id") or "")
        name = await self._names.of(user_id, None)
        # The presser's own team comes with the action: a Slack Connect guest is external here too.
        presser = slack_principal({"user": user_id, "user_team": user.get("team_id")}, team=self._team_id,
                                  user_name=name)
        return await resolve_safely(self._groups, presser)

    async def tell(self, body: Mapping[str, Any], note: str) -> None:
        """An ephemeral note to whoever pressed a button, in the message's thread."""
        user = str((body.get("user") or {}).get("id") or "")
        message = body.get("message") or {}
        await post_ephemeral(self._client, channel=press_channel(body), user=user, text=note,
                             thread_ts=message.get("thread_ts") or None)

    async def on_stop(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Stop pressed: the turn is told to stop (only its asker or an admin may), else the presser is told why."""
        await ack()
        gateway = self._gateway
        assert gateway is not None
        turn_id = str(action.get("value") or "")
        user = str((body.get("user") or {}).get("id") or "")
        # The turn may run in another process of the fleet: the gateway asks it, and says why not.
        answer = await gateway.stop(turn_id, user) if turn_id else "already_done"
        if answer == "stopped":
            log.info("slack.stop_pressed", turn_id=turn_id, user=user)
            self._report("handled", "stopped")
            return
        reason = "stop_unreachable" if answer == "unreachable" else answer
        await self.tell(body, t(self._locale, reason))
        self._report("ignored", reason)

    async def on_approval(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve or Deny pressed: counted when the presser is an approver there, else they are told why, privately."""
        await ack()
        gateway = self._gateway
        assert gateway is not None
        presser = await self.presser(body)
        code, _, token = str(action.get("value") or "").partition(":")
        result = await gateway.decide_approval(
            code, presser, approved=action.get("action_id") == APPROVE_ACTION_ID, locale=self._locale,
            channel=f"slack:{press_channel(body)}", token=token)
        if result.answer != "decided":
            await self.tell(body, result.note)
        self._report("handled" if result.answer == "decided" else "ignored", result.answer)
