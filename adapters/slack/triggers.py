"""The Slack events that start a turn: an @mention, a direct message, a follow-up in a bot's thread, the assistant pane.

An @mention in a channel is answered in its thread; a direct message where it
was written; a reply in a thread the bot answers in is a question with no new
mention needed (unless it mentions someone else); a thread of the AI assistant
pane gets suggested prompts when it opens (:mod:`adapters.slack.assistant`).
Each question taken holds its place in its channel's line of new messages at
once (:mod:`adapters.slack.channel_line`), gets a reaction at once
(:mod:`adapters.slack.acks`) and goes to the gateway, which runs the turn in its
own task. A retried delivery of an event starts no second turn.

The listeners are given what they use when the adapter builds its app, as
:class:`~adapters.slack.presses.Presses` is: they never reach back into the adapter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from adapters.slack.delivery import Delivery
from adapters.slack.events import (
    HANDLED_SUBTYPES,
    event_team,
    inbound_message,
    is_from_bot,
    mentioned_users,
    strip_mention,
)
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.acks import QuestionAcks
    from adapters.slack.assistant import AssistantPane
    from adapters.slack.event_claims import EventClaims
    from adapters.slack.names import DisplayNames
    from adapters.slack.sink import SlackCardSink
    from adapters.slack.threads import BotThreads
    from botgateway.background import BackgroundTasks
    from botgateway.cards.buffer_policy import BufferPolicy
    from botgateway.config import SlackConfig
    from botgateway.messages import InboundMessage, Submission
    from botgateway.sink import CardSink

__all__ = ["QuestionGateway", "Triggers"]

log = structlog.get_logger(__name__)


class QuestionGateway(Protocol):
    """The gateway's part the triggers use: a question submitted as a turn."""

    async def submit(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """Schedule ``msg`` and return at once; the turn runs in the gateway's own task."""
        ...


class Triggers:
    """The listeners of the events that start a turn, of one Slack app (see the module docstring).

    Args:
        gateway: Where questions become turns (None: the adapter runs without one).
        config: The ``adapters.slack`` section (which bots are ignored, the language of the error note).
        client: The Web API client the error note is posted with.
        sink: Where every answer streams; its channel lines hold each question's place.
        policy: Update pacing of the answers' cards.
        names: Users' display names.
        resolve: Adds the asker's user groups the policy names to their message.
        threads: The threads the bot answers in.
        claims: Tells a retried delivery from the first.
        pane: The assistant pane's prompts and status.
        acks: The reaction on each question taken.
        tasks: Owns the work done in the background (the pane's status, a thread remembered).
        report: Reports what each delivery came to.
        bot_user_id: The bot's user (its mentions address it).
        bot_id: The bot (its own messages are never questions).
        team_id: The workspace the bot is installed in.
    """

    def __init__(self, gateway: QuestionGateway | None, *, config: SlackConfig, client: AsyncWebClient,
                 sink: SlackCardSink, policy: BufferPolicy, names: DisplayNames,
                 resolve: Callable[[InboundMessage], Awaitable[InboundMessage]], threads: BotThreads,
                 claims: EventClaims, pane: AssistantPane, acks: QuestionAcks, tasks: BackgroundTasks,
                 report: Callable[[Delivery], None], bot_user_id: str, bot_id: str, team_id: str) -> None:
        self._gateway = gateway
        self._config = config
        self._client = client
        self._sink = sink
        self._policy = policy
        self._names = names
        self._resolve = resolve
        self._bot_threads = threads
        self._claims = claims
        self._pane = pane
        self._acks = acks
        self._tasks = tasks
        self._report = report
        self._bot_user_id = bot_user_id
        self._bot_id = bot_id
        self._team_id = team_id

    def register(self, app: AsyncApp) -> None:
        """Listen to mentions, messages and the assistant pane's new threads."""
        app.event("app_mention")(self.on_mention)
        app.event("message")(self.on_message)
        app.event("assistant_thread_started")(self.on_assistant_thread_started)

    async def on_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """An @mention of the bot: a question, answered in its thread."""
        if self._from_bot(event):
            self._report(Delivery("app_mention", "ignored", "from a bot"))
            return
        self._report(await self._accept(body, event, direct=False))

    async def on_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """A message: a question when it is direct or follows up in a thread the bot answers in."""
        self._report(await self._classify_message(body, event))

    async def on_assistant_thread_started(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """A thread of the assistant pane opened: its suggested prompts."""
        outcome, reason = await self._pane.thread_started(body, event)
        self._report(Delivery("assistant_thread_started", outcome, reason))

    async def _classify_message(self, body: dict[str, Any], event: dict[str, Any]) -> Delivery:
        subtype = event.get("subtype")
        if subtype not in HANDLED_SUBTYPES:
            return Delivery("message", "ignored", f"subtype {subtype}")  # edits, deletions, joins, bot posts
        if self._from_bot(event):
            return Delivery("message", "ignored", "from a bot")
        if event.get("channel_type") == "im":
            return await self._accept(body, event, direct=True)
        thread_ts = event.get("thread_ts")
        if not thread_ts or thread_ts == event.get("ts"):
            return Delivery("message", "ignored", "channel message without a mention")
        mentioned = mentioned_users(str(event.get("text") or ""))
        if self._bot_user_id in mentioned:
            return Delivery("message", "ignored", "answered as app_mention")
        if mentioned:
            return Delivery("message", "ignored", "addressed to someone else")
        team = self._team(body, event)
        if not await self._bot_threads.contains(team, str(event.get("channel")), str(thread_ts)):
            return Delivery("message", "ignored", "not a thread the bot answers in")
        return await self._accept(body, event, direct=False)

    def _from_bot(self, event: Mapping[str, Any]) -> bool:
        return is_from_bot(event, bot_user_id=self._bot_user_id, bot_id=self._bot_id,
                           ignore_bots=self._config.ignore_bots)

    def _team(self, body: Mapping[str, Any], event: Mapping[str, Any]) -> str:
        return event_team(body, event, installed_team=self._team_id)

    async def _accept(self, body: dict[str, Any], event: dict[str, Any], *, direct: bool) -> Delivery:
        """Turn one person's message into a gateway submission (never raises)."""
        kind = str(event.get("type") or "message")
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts") or "")
        thread_ts = event.get("thread_ts") or (None if direct else ts)
        try:
            if not channel or not ts:
                return Delivery(kind, "ignored", "no channel or ts")
            if not await self._claims.first_delivery(body):
                return Delivery(kind, "duplicate", "retried delivery")
            team = self._team(body, event)
            # Its place in the channel's line is held from now on: starting the turn may take a while in a burst.
            self._sink.lines.announce(team, channel, ts)
            delivery = await self._submit(body, event, channel, thread_ts, direct=direct)
            if delivery.submission is None or delivery.submission.status not in ("started", "queued"):
                self._sink.lines.withdraw(team, channel, ts)  # no card will take the announcement over
            return delivery
        except Exception as exc:
            log.exception("slack.accept_failed", error=type(exc).__name__)
            self._sink.lines.withdraw(self._team(body, event), channel, ts)
            try:
                await self._client.chat_postMessage(channel=channel, thread_ts=thread_ts,
                                                    text=t(self._config.locale, "error_generic"))
            except Exception:
                log.warning("slack.error_note_failed", error=type(exc).__name__)
            return Delivery(kind, "failed", type(exc).__name__)

    async def _submit(self, body: dict[str, Any], event: dict[str, Any], channel: str,
                      thread_ts: str | None, *, direct: bool) -> Delivery:
        assert self._gateway is not None
        kind = str(event.get("type") or "message")
        team = self._team(body, event)
        text = strip_mention(str(event.get("text") or ""), self._bot_user_id)
        if not text:
            return Delivery(kind, "ignored", "no text")  # a bare mention or an empty file share
        user_name = await self._names.of(str(event.get("user") or ""), event.get("user_profile"))
        message = inbound_message(event, team=team, thread_ts=thread_ts, direct=direct, text=text,
                                  user_name=user_name, config=self._config)
        message = await self._resolve(message)
        if thread_ts and not direct:
            self._bot_threads.remember(team, channel, thread_ts, self._tasks)
        submission = await self._gateway.submit(message, self._sink, self._policy)
        log.info("slack.submitted", status=submission.status, turn_id=submission.turn_id, channel=channel,
                 direct=direct, event_id=body.get("event_id"))
        if submission.status == "duplicate":
            return Delivery(kind, "duplicate", "same channel and ts", submission)
        if submission.status in ("started", "queued") and submission.turn_id:
            assistant_thread = direct and bool(event.get("thread_ts"))
            if not assistant_thread:  # the pane shows its status instead
                self._acks.taken(team, channel, str(event.get("ts") or ""))
            self._tasks.spawn(self._pane.follow(submission, channel, thread_ts if assistant_thread else None),
                              name=f"slack-follow:{submission.turn_id}")
        return Delivery(kind, "submitted", submission.status, submission)
