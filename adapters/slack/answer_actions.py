"""A final answer's buttons on Slack: Refresh, 👍 / 👎, and the modal a 👎 opens for its reason.

The buttons (:func:`~adapters.slack.render.answer_buttons`,
:func:`~adapters.slack.render.stream_answer_blocks`) carry the answer's turn
id; only a typed question's final answer has them
(:func:`~botgateway.answers.book.offers_answer_controls`). Like Stop and Approve
(:mod:`adapters.slack.presses`), each press is acknowledged at once and handed
to the gateway:

- Refresh: the press becomes the presser's message in the card's thread (as if
  they had asked there, so their own access and limits apply) and
  :meth:`~botgateway.gateway.Gateway.refresh` asks the answer's question again
  in a new card, caches bypassed;
- 👍 / 👎: :meth:`~botgateway.gateway.Gateway.vote` stores the vote (a second
  press changes it); a 👍 is thanked privately, a 👎 opens a modal
  (``views.open`` with the press's ``trigger_id``, valid for 3 s: opened first)
  whose submission (``view_submission``) stores its optional one-line reason
  through :meth:`~botgateway.gateway.Gateway.feedback_reason`.

The handlers are given what they use when the adapter builds its app, as
:class:`~adapters.slack.presses.Presses` is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from adapters.slack.errors import call_slack
from adapters.slack.events import inbound_message
from adapters.slack.render import (
    FEEDBACK_ACTION_ID,
    FEEDBACK_REASON_ID,
    FEEDBACK_VIEW_ID,
    REFRESH_ACTION_ID,
    feedback_modal,
)
from botgateway.access import GroupResolver, resolve_message
from botgateway.answers import parse_vote

if TYPE_CHECKING:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.names import DisplayNames
    from adapters.slack.presses import ActionReport, Presses
    from botgateway.answers import Vote
    from botgateway.cards.buffer_policy import BufferPolicy
    from botgateway.config import SlackConfig
    from botgateway.messages import InboundMessage, Submission
    from botgateway.principal import Principal
    from botgateway.sink import CardSink

__all__ = ["AnswerActions", "AnswerGateway", "press_place"]

log = structlog.get_logger(__name__)


def press_place(body: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """Where a button was pressed: the channel, the pressed message's ts, and the thread a new answer goes in
    (the message's thread; none in a direct message outside a thread)."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
    ts = str(message.get("ts") or container.get("message_ts") or "")
    direct = channel.startswith("D")
    thread_ts = message.get("thread_ts") or container.get("thread_ts") or (None if direct else ts or None)
    return channel, ts, str(thread_ts) if thread_ts else None


def _reason_of(view: Mapping[str, Any]) -> str:
    """The reason typed into the modal (empty when left blank)."""
    values = ((view.get("state") or {}).get("values") or {}).get(FEEDBACK_REASON_ID) or {}
    return str((values.get(FEEDBACK_REASON_ID) or {}).get("value") or "")


class AnswerGateway(Protocol):
    """The gateway's part a final answer's buttons use: Refresh, votes and a 👎's reason."""

    async def refresh(self, turn_id: str, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """The answer of ``turn_id`` asked again as ``msg``'s presser, in a new card."""
        ...

    async def vote(self, turn_id: str, voter: Principal, vote: Vote, *, locale: str, ask_reason: bool = False) -> str:
        """A 👍 or 👎 on the answer of ``turn_id``; the note for the voter."""
        ...

    async def feedback_reason(self, turn_id: str, voter: Principal, reason: str, *, locale: str) -> str:
        """The one-line reason of ``voter``'s 👎; the note for them."""
        ...


class AnswerActions:
    """The handlers of a final answer's buttons and of the 👎 modal, of one Slack app.

    Args:
        gateway: Where answers are asked again and voted on (None: the adapter runs without one).
        presses: Who pressed, and how they are told (shared with Stop and Approve / Deny).
        config: The ``adapters.slack`` section (a Refresh's message is built as an asker's is; the notes' language).
        client: The Web API client the 👎 modal is opened with.
        names: Users' display names.
        team_id: The workspace the bot is installed in.
        groups: Adds the presser's user groups the policy names.
        sink: Where a Refresh's new card streams.
        policy: Update pacing of that card.
        report: Reports what each press came to.
    """

    def __init__(self, gateway: AnswerGateway | None, presses: Presses, *, config: SlackConfig,
                 client: AsyncWebClient, names: DisplayNames, team_id: str, groups: GroupResolver, sink: CardSink,
                 policy: BufferPolicy, report: ActionReport) -> None:
        self._gateway = gateway
        self._presses = presses
        self._config = config
        self._client = client
        self._names = names
        self._team_id = team_id
        self._groups = groups
        self._sink = sink
        self._policy = policy
        self._report = report

    def register(self, app: AsyncApp) -> None:
        """Listen to Refresh, 👍 / 👎 (Slack's feedback buttons and ours) and the 👎 modal's submission."""
        app.action(REFRESH_ACTION_ID)(self.on_refresh)
        app.action(re.compile(f"^{FEEDBACK_ACTION_ID}"))(self.on_feedback)
        app.view(FEEDBACK_VIEW_ID)(self.on_reason)

    async def on_refresh(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Refresh pressed: the answer's question asked again by the presser, in the card's thread."""
        await ack()
        gateway = self._gateway
        turn_id = str(action.get("value") or "")
        channel, ts, thread_ts = press_place(body)
        user = body.get("user") or {}
        user_id, team = str(user.get("id") or ""), self._team_id or str((body.get("team") or {}).get("id") or "")
        if gateway is None or not turn_id or not channel or not user_id:
            self._report("ignored", "refresh without a turn, channel or user")
            return
        name = await self._names.of(user_id, None)
        # The presser's own team comes with the press; without it they cannot be shown to be ours (external).
        event = {"user": user_id, "user_team": str(user.get("team_id") or ""), "channel": channel, "ts": ts}
        msg = inbound_message(event, team=team, thread_ts=thread_ts, direct=channel.startswith("D"), text="",
                              user_name=name, config=self._config)
        # Each press is its own request (a second press refreshes again); a redelivered press is the same one.
        msg = dataclasses.replace(msg, message_id=f"refresh:{team}:{channel}:{action.get('action_ts') or ts}:{user_id}")
        msg = await resolve_message(msg, self._groups)
        submission = await gateway.refresh(turn_id, msg, self._sink, self._policy)
        log.info("slack.refresh_pressed", turn_id=turn_id, user=user_id, status=submission.status,
                 new_turn=submission.turn_id)
        self._report("submitted", "refresh", submission)

    async def on_feedback(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """👍 or 👎 pressed (Slack's feedback buttons or ours): stored; a 👎 opens the modal for a reason."""
        await ack()
        gateway = self._gateway
        parsed = parse_vote(str(action.get("value") or ""))
        if gateway is None or parsed is None:
            self._report("ignored", "feedback without a vote")
            return
        vote, turn_id = parsed
        locale = self._config.locale
        opened = False
        if vote == "down":  # first: the press's trigger_id opens a modal within 3 s only
            opened = await self._open_modal(str(body.get("trigger_id") or ""), turn_id, locale)
        presser = await self._presses.presser(body)
        note = await gateway.vote(turn_id, presser, vote, locale=locale)
        if not opened:
            await self._presses.tell(body, note)
        self._report("handled", f"feedback:{vote}")

    async def on_reason(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """The 👎 modal submitted: its reason (if any) is kept with the vote."""
        await ack()  # closes the modal
        gateway = self._gateway
        turn_id = str(view.get("private_metadata") or "")
        reason = _reason_of(view).strip()
        if gateway is None or not turn_id or not reason:
            self._report("ignored", "no reason given", event_type="view_submission")
            return
        presser = await self._presses.presser(body)
        await gateway.feedback_reason(turn_id, presser, reason, locale=self._config.locale)
        self._report("handled", "feedback:reason", event_type="view_submission")

    async def _open_modal(self, trigger_id: str, turn_id: str, locale: str) -> bool:
        """Open the 👎 modal; False when Slack would not (the vote still counts, and the presser is told so)."""
        if not trigger_id:
            return False
        try:
            view = feedback_modal(turn_id, locale)
            await call_slack(self._client.views_open, trigger_id=trigger_id, view=view)
        except Exception as exc:
            log.warning("slack.feedback_modal_failed", turn_id=turn_id, error=str(exc) or type(exc).__name__)
            return False
        return True
