"""The Slack adapter: slack-bolt ``AsyncApp`` wiring and the triggers that start a turn.

Triggers (:mod:`adapters.slack.triggers`): an @mention in a channel (answered in its thread), direct messages,
follow-ups in a thread the bot is answering in (no new mention needed) and the
AI assistant pane (suggested prompts when a thread opens, a status while
working). Cards nobody asked for (an alert's, a report) are posted as
top-level channel messages (:meth:`SlackAdapter.channel_target`); a reply in
such a card's thread is a question (:meth:`SlackAdapter.adopt_thread`).
A live card's Stop and Approve / Deny are :mod:`adapters.slack.presses`; a
final answer's Refresh and 👍 / 👎 buttons, and the modal a 👎 opens, are
:mod:`adapters.slack.answer_actions`; the assistant pane's prompts and status
are :mod:`adapters.slack.assistant`. Every delivery is acknowledged at once,
and every question taken gets a reaction at once (:mod:`adapters.slack.acks`):
in a busy channel its answer may wait for the channel's next message slots;
the turn runs in the gateway's own task. A retried delivery (same ``event_id``, or the same channel
and ``ts`` arriving as both ``app_mention`` and ``message``) starts one turn.

Connecting (Socket Mode or HTTP) is :mod:`adapters.slack.connection`; what an
event means is :mod:`adapters.slack.events`; answers stream through
:class:`~adapters.slack.sink.SlackCardSink`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.acks import QuestionAcks
from adapters.slack.answer_actions import AnswerActions
from adapters.slack.assistant import AssistantPane
from adapters.slack.connection import (
    AckFirstSocketModeHandler,
    SlackStartError,
    check_bot_token,
    close_socket,
    open_socket,
    serve_http,
    socket_connected,
)
from adapters.slack.delivery import Delivery
from adapters.slack.event_claims import EventClaims
from adapters.slack.names import DisplayNames
from adapters.slack.presses import Presses
from adapters.slack.sink import SlackCardSink
from adapters.slack.threads import BotThreads, ThreadStore
from adapters.slack.triggers import Triggers
from adapters.slack.web_session import attach_session, detach_session
from botgateway.access import NO_GROUPS, GroupResolver, resolve_message, resolve_safely
from botgateway.background import BackgroundTasks
from botgateway.messages import Submission, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardHandle, CardTarget, FleetLines
from botgateway.stores.base import OpenCardStore

if TYPE_CHECKING:
    from aiohttp import web

    from botgateway.cards.buffer_policy import BufferPolicy
    from botgateway.config import SlackConfig
    from botgateway.gateway import Gateway
    from botgateway.sink import CallPacer

__all__ = ["Delivery", "SlackAdapter", "SlackStartError", "SlackStore", "web_client"]

log = structlog.get_logger(__name__)


def web_client(config: SlackConfig) -> AsyncWebClient:
    """The app's Web API client (its bot token, ``config``'s base URL): the sink, display names and the group
    resolver share it."""
    return AsyncWebClient(token=config.bot_token.get_secret_value() or None, base_url=config.api_base_url, timeout=15)


class SlackStore(ThreadStore, OpenCardStore, Protocol):
    """The part of the Store the adapter uses: the threads it answers in, and the records of its Stop controls."""


class SlackAdapter:
    """Connects one Slack app to the gateway. ``await start(gateway)``, ``await stop()``.

    Also a :class:`~botgateway.sink.ChannelCards`: it posts cards nobody asked for into a channel.
    """

    name = "slack"
    edits_in_place = True
    """A Slack message is edited (``chat.update``) for as long as it exists: an alert's card changes in place."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        store: SlackStore,
        policy: BufferPolicy | None = None,
        http_port: int | None = None,
        client: AsyncWebClient | None = None,
        observer: Callable[[Delivery], None] | None = None,
        connect_timeout_s: float = 30.0,
        pacer: CallPacer | None = None,
        groups: GroupResolver | None = None,
        reuse_port: bool = False,
        lines: FleetLines | None = None,
    ) -> None:
        """``http_port`` overrides ``config.http_port`` (0 picks a free port); ``observer`` sees every :class:`Delivery`;
        ``pacer`` pays for the sink's own calls from the gateway's rate budget (Stop controls of native streams
        share its per-channel post bucket; see :class:`~botgateway.cards.caller.BudgetPacer`); ``groups`` adds the
        asker's user groups to their principal (default: none are looked up); ``reuse_port`` binds HTTP mode's
        port with ``SO_REUSEPORT`` (worker processes share it); ``lines``: the fleet's channel lines, so a channel's
        answers on every replica take its new messages in the order they were asked (None: one process)."""
        self.config = config
        self._policy = policy
        self._http_port = config.http_port if http_port is None else http_port
        self._reuse_port = reuse_port
        self.client = client or web_client(config)
        self.sink = SlackCardSink(self.client, config, pacer=pacer, lines=lines)
        """The card sink every Slack answer is streamed through."""
        self.http_url = ""
        """``http://host:port/path`` of the events endpoint once started in HTTP mode."""
        self.bot_user_id = ""
        self.bot_id = ""
        self.team_id = ""
        self._gateway: Gateway | None = None
        self._app: AsyncApp | None = None
        self._socket: AckFirstSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._tasks = BackgroundTasks()
        self._store = store
        self._bot_threads = BotThreads(store)
        self.names = DisplayNames(self.client)
        """Users' display names (cached)."""
        self._claims = EventClaims(self._claim_event)
        self._pane = AssistantPane(self.client, config, self._claims.first_delivery)
        self._acks = QuestionAcks(self.client, config, pacer=pacer, tasks=self._tasks)
        self._observer = observer
        self._connect_timeout_s = connect_timeout_s
        self._authorized: AuthorizeResult | None = None
        self._own_session = False  # the client's pooled session is ours to close
        self.groups: GroupResolver = groups or NO_GROUPS
        """Looks up the asker's user groups the policy names (given at construction: the composition root builds
        it over the ``client`` it gives too)."""

    # --- lifecycle -----------------------------------------------------------------

    async def start(self, gateway: Gateway) -> None:
        """Check the tokens, then connect (Socket Mode) or listen (HTTP mode)."""
        self._gateway = gateway
        if gateway is not None:  # Stop controls are on record like the gateway's cards, with the same owner
            self.sink.keep_controls_on_record(self._store, gateway.instance_id)
        if self._policy is None:
            from botgateway.cards.buffer_policy import BufferPolicy

            self._policy = BufferPolicy.from_config(self.config.policy)
        self._own_session = attach_session(self.client) or self._own_session
        try:
            self._authorized = await check_bot_token(self.client, self.config)
            self.bot_user_id = self._authorized.bot_user_id or ""
            self.bot_id = self._authorized.bot_id or ""
            self.team_id = self._authorized.team_id or ""
            self._app = self._build_app()
            if self.config.mode == "socket":
                self._socket = await open_socket(self._app, self.client, self.config, connect_timeout_s=self._connect_timeout_s)
            else:
                self._runner, self.http_url = await serve_http(
                    self._app, self.config, port=self._http_port, team_id=self.team_id, reuse_port=self._reuse_port,
                    claim=self._claim_before_ack)
        except BaseException:
            await self._close_session()  # nothing else will: a failed start is never stopped
            raise
        log.info("slack.started", mode=self.config.mode, team=self.team_id, bot_user=self.bot_user_id,
                 streaming=self.config.streaming)

    @property
    def connected(self) -> bool:
        """Whether Slack can deliver to us now: the Socket Mode connection is open, or the HTTP listener is up."""
        if self._socket is not None:
            return socket_connected(self._socket)
        return self._runner is not None

    async def stop_receiving(self) -> None:
        """Close the Socket Mode connection (or the HTTP listener): Slack delivers to the other connections, and
        retries what was not acknowledged; the sink keeps finishing the answers in progress. Idempotent."""
        if self._socket is not None:
            await close_socket(self._socket)
            self._socket = None
            log.info("slack.stopped_receiving", mode="socket")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            log.info("slack.stopped_receiving", mode="http")

    async def stop(self) -> None:
        """Disconnect; turns already running finish in the gateway."""
        await self.stop_receiving()
        await self._tasks.aclose()
        await self.sink.aclose()
        await self._close_session()

    async def _close_session(self) -> None:
        if self._own_session:
            self._own_session = False
            await detach_session(self.client)

    # --- bolt wiring ---------------------------------------------------------------------

    def _build_app(self) -> AsyncApp:
        http = self.config.mode == "http"
        app = AsyncApp(
            # Not "botgateway": bolt sets the level of the logger named after the app, and that one is ours.
            name="botgateway-slack",
            # bolt gives each request a copy of this client with the token from authorize()
            client=AsyncWebClient(base_url=self.config.api_base_url, timeout=15),
            # the identity learned by auth.test at start: no Web API call before an ack
            authorize=self._authorizer(),
            signing_secret=self.config.signing_secret.get_secret_value() if http else "",
            request_verification_enabled=http,
            # Our own listeners drop the bot's own messages (and report it); bolt's filter would hide them.
            ignoring_self_events_enabled=False,
            process_before_response=False,
        )
        self._triggers().register(app)
        self._button_handlers(app)
        # Everything else the app is subscribed to is acknowledged and ignored.
        app.event(re.compile(".*"))(self._ignore)
        app.error(self._on_error)
        return app

    def _triggers(self) -> Triggers:
        """The listeners of the events that start a turn, given what they use (known once started)."""
        assert self._policy is not None
        return Triggers(self._gateway, config=self.config, client=self.client, sink=self.sink, policy=self._policy,
                        names=self.names, resolve=lambda message: resolve_message(message, self.groups),
                        threads=self._bot_threads, claims=self._claims, pane=self._pane, acks=self._acks,
                        tasks=self._tasks, report=self._report, bot_user_id=self.bot_user_id, bot_id=self.bot_id,
                        team_id=self.team_id)

    def _button_handlers(self, app: AsyncApp) -> None:
        """Listen to the cards' buttons, each handler given what it uses (known once started: the gateway, the
        policy and the workspace)."""
        assert self._policy is not None
        presses = Presses(self._gateway, client=self.client, names=self.names, team_id=self.team_id,
                          groups=self.groups, locale=self.config.locale, report=self.report_action)
        presses.register(app)
        AnswerActions(self._gateway, presses, config=self.config, client=self.client, names=self.names,
                      team_id=self.team_id, groups=self.groups, sink=self.sink, policy=self._policy,
                      report=self.report_action).register(app)

    def _authorizer(self) -> Callable[..., Any]:
        # a plain function: bolt injects arguments by name and trips over a bound method's ``self``
        async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult | None:
            return self._authorized

        return authorize

    async def _ignore(self, ack: Any, body: dict[str, Any], event: dict[str, Any]) -> None:
        await ack()
        self._report(Delivery(str(event.get("type", "")), "ignored", "event not used"))

    async def _on_error(self, error: Exception, body: dict[str, Any]) -> None:
        # the body is whatever failed, so it is read without trusting its shape
        event = body.get("event") if isinstance(body, dict) else None
        log.error("slack.listener_failed", error=type(error).__name__, detail=str(error)[:300],
                  event_type=event.get("type") if isinstance(event, dict) else None)

    def _report(self, delivery: Delivery) -> None:
        if delivery.outcome in ("ignored", "duplicate"):
            log.debug("slack.delivery", event_type=delivery.event_type, outcome=delivery.outcome, reason=delivery.reason)
        if self._observer is not None:
            try:
                self._observer(delivery)
            except Exception:
                log.exception("slack.observer_failed")

    # --- how the handlers of button presses report (adapters.slack.presses, adapters.slack.answer_actions) -----

    def report_action(self, outcome: Literal["submitted", "ignored", "handled"], reason: str,
                      submission: Submission | None = None, *, event_type: str = "block_actions") -> None:
        """Report what a button press (or modal) came to (metrics, logs, tests)."""
        self._report(Delivery(event_type, outcome, reason, submission))

    # --- retried deliveries -------------------------------------------------------------------

    async def _claim_event(self, key: str) -> bool:
        assert self._gateway is not None
        return await self._gateway.first_delivery("slack", key)

    async def _claim_before_ack(self, body: Mapping[str, Any]) -> bool:
        """HTTP mode: whether this delivery goes on to bolt (see :class:`~adapters.slack.event_claims.EventClaims`)."""
        if await self._claims.claim(body):
            return True
        event = body.get("event")
        self._report(Delivery(str(event.get("type", "")) if isinstance(event, Mapping) else "", "duplicate",
                              "retried delivery"))
        return False

    # --- cards nobody asked for ---------------------------------------------------------------

    def channel_target(self, chat_id: str, *, locale: str) -> CardTarget:
        """A new top-level message in channel ``chat_id`` of the workspace the bot is installed in (known once
        started). Without a thread it is an edited message, never a native stream; it mentions nobody."""
        return CardTarget(platform=self.name, chat_id=chat_id, is_group=True, locale=locale, workspace_id=self.team_id)

    async def adopt_thread(self, handle: CardHandle) -> str | None:
        """Replies in the thread of the posted card ``handle`` are questions, no mention needed (every process of
        a fleet knows once this returns); returns the conversation such a reply continues. None when the card
        has no message yet (an answer deferred to its end) or each person's reply is their own conversation
        (``session_scope: user``)."""
        if handle.data.get("mode") == "deferred":
            return None
        ts = str(handle.data.get("ts") or handle.card_id)
        channel = str(handle.data.get("channel") or handle.target.chat_id)
        team = handle.target.workspace_id or self.team_id
        await self._bot_threads.adopt(team, channel, ts)
        if self.config.session_scope == "user":
            return None
        # What the triggers give a reply in that thread (inbound_message's conversation key).
        return conversation_key(self.name, self.config.session_scope, workspace=team, chat=channel, thread=ts)

    async def resolve_principal(self, principal: Principal) -> Principal:
        """``principal`` with the user groups the policy names that list it (never raises; unchanged on failure)."""
        return await resolve_safely(self.groups, principal)
