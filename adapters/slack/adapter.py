"""The Slack adapter: slack-bolt ``AsyncApp`` wiring, triggers and the two connection modes.

Triggers: an @mention in a channel (answered in its thread), direct messages,
follow-ups in a thread the bot is answering in (no new mention needed) and the
AI assistant pane (suggested prompts when a thread opens, a status while
working). Every delivery is acknowledged at once; the turn runs in the
gateway's own task. A retried delivery (same ``event_id``, or the same channel
and ``ts`` arriving as both ``app_mention`` and ``message``) starts one turn.

Socket Mode (default) needs the bot token and an app-level token; HTTP mode
serves the Events API with aiohttp and checks the signing secret.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.render import STOP_ACTION_ID
from adapters.slack.sink import SlackCardSink, classify, slack_error_code
from botgateway.messages import InboundMessage, Submission, conversation_key
from botgateway.sink import CardTarget
from botgateway.strings import t
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from slack_sdk.socket_mode.aiohttp import SocketModeClient

    from botgateway.budget import RateBudget
    from botgateway.cards.policy import BufferPolicy
    from botgateway.config import SlackConfig
    from botgateway.gateway import Gateway
    from botgateway.stores.base import Store

log = structlog.get_logger(__name__)

_HANDLED_SUBTYPES = {None, "file_share", "thread_broadcast"}
"""Message subtypes that carry a person's new message; every other subtype (edits, deletions, joins, bot posts) is ignored."""

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")

_MAX_SUGGESTED_PROMPTS = 4
"""Slack shows at most four suggested prompts."""


@dataclass(frozen=True)
class Delivery:
    """What the adapter did with one Slack delivery (for metrics, logs and tests)."""

    event_type: str
    """``app_mention``, ``message``, ``assistant_thread_started``, ``block_actions``…"""
    outcome: Literal["submitted", "ignored", "duplicate", "failed", "handled"]
    """submitted to the gateway, ignored (and why), a retried duplicate, failed, or handled without a turn."""
    reason: str = ""
    """Why it was ignored or failed, in a few words."""
    submission: Submission | None = None
    """The gateway's answer for submitted messages (``await submission.done`` waits for the final card)."""


class SlackStartError(Exception):
    """The adapter cannot start (missing or rejected tokens); the message says what to fix."""


class _AckFirstSocketModeHandler(AsyncSocketModeHandler):
    """Acknowledge every envelope before any processing, so Slack's 3 s limit holds whatever a listener does."""

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        await run_async_bolt_app(self.app, req)


class SlackAdapter:
    """Connects one Slack app to the gateway. ``await start(gateway)``, ``await stop()``."""

    name = "slack"

    def __init__(
        self,
        config: SlackConfig,
        *,
        store: Store,
        policy: BufferPolicy | None = None,
        http_port: int | None = None,
        client: AsyncWebClient | None = None,
        observer: Callable[[Delivery], None] | None = None,
        connect_timeout_s: float = 30.0,
        budget: RateBudget | None = None,
    ) -> None:
        """``http_port`` overrides ``config.http_port`` (0 picks a free port); ``observer`` sees every :class:`Delivery`;
        ``budget`` is the gateway's rate budget (Stop controls of native streams share its per-channel post bucket)."""
        self.config = config
        self._store = store
        self._policy = policy
        self._http_port = config.http_port if http_port is None else http_port
        self.client = client or AsyncWebClient(
            token=config.bot_token.get_secret_value() or None,
            base_url=config.api_base_url,
            timeout=15,
        )
        self.sink = SlackCardSink(self.client, config, budget=budget)
        """The card sink every Slack answer is streamed through."""
        self.http_url = ""
        """``http://host:port/path`` of the events endpoint once started in HTTP mode."""
        self.bot_user_id = ""
        self.bot_id = ""
        self.team_id = ""
        self._gateway: Gateway | None = None
        self._app: AsyncApp | None = None
        self._socket: _AckFirstSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bot_threads: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._live_turns: dict[str, Submission] = {}
        self._names: OrderedDict[str, str] = OrderedDict()
        self._observer = observer
        self._connect_timeout_s = connect_timeout_s
        self._authorized: AuthorizeResult | None = None

    # --- lifecycle -----------------------------------------------------------------

    async def start(self, gateway: Gateway) -> None:
        """Check the tokens, then connect (Socket Mode) or listen (HTTP mode)."""
        self._gateway = gateway
        if self._policy is None:
            from botgateway.cards.policy import BufferPolicy

            self._policy = BufferPolicy.from_config(self.config.policy)
        if not self.config.bot_token.get_secret_value():
            raise SlackStartError("adapters.slack.bot_token is empty: set it to the app's xoxb-… bot token (for example ${SLACK_BOT_TOKEN})")
        try:
            auth = await self.client.auth_test()
        except Exception as exc:
            code = slack_error_code(exc)
            hint = "the bot token was rejected; reinstall the app and copy the Bot User OAuth Token" if code in {"invalid_auth", "not_authed", "token_revoked", "account_inactive"} else str(classify(exc))
            raise SlackStartError(f"Slack auth.test failed: {hint}") from None
        self.bot_user_id = str(auth.get("user_id") or "")
        self.bot_id = str(auth.get("bot_id") or "")
        self.team_id = str(auth.get("team_id") or "")
        self._authorized = AuthorizeResult(
            enterprise_id=auth.get("enterprise_id"),
            team_id=self.team_id,
            bot_user_id=self.bot_user_id,
            bot_id=self.bot_id,
            bot_token=self.config.bot_token.get_secret_value(),
        )
        self._app = self._build_app()
        if self.config.mode == "socket":
            await self._start_socket()
        else:
            await self._start_http()
        log.info("slack.started", mode=self.config.mode, team=self.team_id, bot_user=self.bot_user_id,
                 streaming=self.config.streaming)

    async def stop(self) -> None:
        """Disconnect; turns already running finish in the gateway."""
        if self._socket is not None:
            try:
                await self._socket.close_async()
            except Exception as exc:
                log.debug("slack.socket_close_failed", error=type(exc).__name__)
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.sink.aclose()

    async def _start_socket(self) -> None:
        app_token = self.config.app_token.get_secret_value()
        if not app_token.startswith("xapp-"):
            raise SlackStartError("adapters.slack.app_token must be the app-level token (xapp-…) with the connections:write scope; "
                                  "create it under Basic Information → App-Level Tokens, or set mode: http")
        assert self._app is not None
        try:
            opened = await self.client.apps_connections_open(app_token=app_token)
        except Exception as exc:
            code = slack_error_code(exc)
            hint = "the app-level token was rejected" if code in {"invalid_auth", "not_authed", "token_revoked"} else str(classify(exc))
            raise SlackStartError(f"Slack apps.connections.open failed: {hint}; is Socket Mode enabled for the app?") from None
        self._socket = _AckFirstSocketModeHandler(self._app, app_token=app_token, web_client=self.client)
        self._socket.client.wss_uri = str(opened["url"])
        try:
            # the SDK retries a failing connection forever; start-up must fail instead
            await asyncio.wait_for(self._socket.connect_async(), self._connect_timeout_s)
        except asyncio.TimeoutError:
            await self.stop()
            raise SlackStartError(f"could not open the Socket Mode connection within {self._connect_timeout_s:g} s; "
                                  "check that outbound websockets to Slack are allowed (proxy, firewall)") from None

    async def _start_http(self) -> None:
        if not self.config.signing_secret.get_secret_value():
            raise SlackStartError("adapters.slack.signing_secret is empty: HTTP mode needs the app's Signing Secret "
                                  "(Basic Information → App Credentials), for example ${SLACK_SIGNING_SECRET}")
        web_app = web.Application()
        web_app.router.add_post(self.config.http_path, self._http_events)
        web_app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http_host, self._http_port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise SlackStartError(f"cannot listen on {self.config.http_host}:{self._http_port} for Slack events "
                                  f"({exc.strerror or exc}); change adapters.slack.http_port") from None
        host, port = self._runner.addresses[0][:2]
        self.http_url = f"http://{host}:{port}{self.config.http_path}"

    async def _http_events(self, request: web.Request) -> web.Response:
        assert self._app is not None
        bolt_response = await self._app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "team": self.team_id})

    # --- bolt wiring ---------------------------------------------------------------------

    def _build_app(self) -> AsyncApp:
        http = self.config.mode == "http"
        app = AsyncApp(
            name="botgateway",
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
        app.event("app_mention")(self._on_mention)
        app.event("message")(self._on_message)
        app.event("assistant_thread_started")(self._on_assistant_thread_started)
        app.action(STOP_ACTION_ID)(self._on_stop)
        # Everything else the app is subscribed to is acknowledged and ignored.
        app.event(re.compile(".*"))(self._ignore)
        app.error(self._on_error)
        return app

    def _authorizer(self) -> Callable[..., Any]:
        # a plain function: bolt injects arguments by name and trips over a bound method's ``self``
        async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult | None:
            return self._authorized

        return authorize

    async def _ignore(self, ack: Any, body: dict[str, Any], event: dict[str, Any]) -> None:
        await ack()
        self._report(Delivery(str(event.get("type", "")), "ignored", "event not used"))

    async def _on_error(self, error: Exception, body: dict[str, Any]) -> None:
        log.error("slack.listener_failed", error=type(error).__name__, detail=str(error)[:300],
                  event_type=(body.get("event") or {}).get("type"))

    def _report(self, delivery: Delivery) -> None:
        if delivery.outcome in ("ignored", "duplicate"):
            log.debug("slack.delivery", event_type=delivery.event_type, outcome=delivery.outcome, reason=delivery.reason)
        if self._observer is not None:
            try:
                self._observer(delivery)
            except Exception:
                log.exception("slack.observer_failed")

    # --- triggers -----------------------------------------------------------------------

    async def _on_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        if self._from_bot(event):
            self._report(Delivery("app_mention", "ignored", "from a bot"))
            return
        self._report(await self._accept(body, event, direct=False))

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        self._report(await self._classify_message(body, event))

    async def _classify_message(self, body: dict[str, Any], event: dict[str, Any]) -> Delivery:
        subtype = event.get("subtype")
        if subtype not in _HANDLED_SUBTYPES:
            return Delivery("message", "ignored", f"subtype {subtype}")  # edits, deletions, joins, bot posts
        if self._from_bot(event):
            return Delivery("message", "ignored", "from a bot")
        if event.get("channel_type") == "im":
            return await self._accept(body, event, direct=True)
        thread_ts = event.get("thread_ts")
        if not thread_ts or thread_ts == event.get("ts"):
            return Delivery("message", "ignored", "channel message without a mention")
        mentioned = set(_MENTION.findall(str(event.get("text") or "")))
        if self.bot_user_id in mentioned:
            return Delivery("message", "ignored", "answered as app_mention")
        if mentioned:
            return Delivery("message", "ignored", "addressed to someone else")
        team = self._team(body, event)
        if not await self._is_bot_thread(team, str(event.get("channel")), str(thread_ts)):
            return Delivery("message", "ignored", "not a thread the bot answers in")
        return await self._accept(body, event, direct=False)

    async def _on_assistant_thread_started(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        prompts = [
            {"title": str(p["title"])[:75], "message": str(p["message"])}
            for p in self.config.suggested_prompts
            if isinstance(p, Mapping) and p.get("title") and p.get("message")
        ][:_MAX_SUGGESTED_PROMPTS]
        kind = "assistant_thread_started"
        if not channel or not thread_ts or not prompts:
            self._report(Delivery(kind, "ignored", "no thread or no prompts configured"))
            return
        if not await self._first_delivery(body):
            self._report(Delivery(kind, "duplicate", "retried delivery"))
            return
        try:
            await self.client.assistant_threads_setSuggestedPrompts(channel_id=channel, thread_ts=thread_ts, prompts=prompts)
        except Exception as exc:
            code = slack_error_code(exc) or type(exc).__name__
            log.warning("slack.suggested_prompts_failed", error=code)
            self._report(Delivery(kind, "failed", code))
            return
        self._report(Delivery(kind, "handled"))

    async def _on_stop(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        assert self._gateway is not None
        turn_id = str(action.get("value") or "")
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")
        if turn_id and await self._gateway.stop_turn(turn_id, user):
            log.info("slack.stop_pressed", turn_id=turn_id, user=user)
            self._report(Delivery("block_actions", "handled", "stopped"))
            return
        live = self._live_turns.get(turn_id)
        running = live is not None and live.done is not None and not live.done.done()
        reason = "not_yours" if running else "already_done"
        note = t(self.config.locale, reason)
        if channel and user:
            message = body.get("message") or {}
            try:
                await self.client.chat_postEphemeral(channel=channel, user=user, text=note,
                                                     thread_ts=message.get("thread_ts") or None)
            except Exception as exc:
                log.warning("slack.ephemeral_failed", error=slack_error_code(exc) or type(exc).__name__)
        self._report(Delivery("block_actions", "ignored", reason))

    # --- from an event to a turn -------------------------------------------------------------

    def _from_bot(self, event: Mapping[str, Any]) -> bool:
        """Our own messages always; other bots unless ``ignore_bots`` is off."""
        own = (self.bot_user_id and event.get("user") == self.bot_user_id) or (self.bot_id and event.get("bot_id") == self.bot_id)
        if own:
            return True
        other_bot = bool(event.get("bot_id")) or event.get("subtype") == "bot_message" or bool(event.get("bot_profile"))
        return other_bot and self.config.ignore_bots

    def _team(self, body: Mapping[str, Any], event: Mapping[str, Any]) -> str:
        # The workspace the app is installed in (rate limits, conversation keys); in a shared
        # channel ``event.team`` is the sender's own workspace, which must not split a thread.
        return str(body.get("team_id") or self.team_id or event.get("team") or "")

    async def _first_delivery(self, body: Mapping[str, Any]) -> bool:
        """False for a retried delivery of an event already seen (``event_id`` dedupe)."""
        assert self._gateway is not None
        event_id = body.get("event_id")
        if not event_id:
            return True
        return await self._gateway.first_delivery("slack", f"event:{body.get('team_id', '')}:{event_id}")

    async def _is_bot_thread(self, team: str, channel: str, thread_ts: str) -> bool:
        """A thread the bot answered in: remembered in memory, or with history in the Store (after a restart)."""
        if (team, channel, thread_ts) in self._bot_threads:
            return True
        key = conversation_key("slack", "thread", workspace=team, chat=channel, thread=thread_ts)
        try:
            return bool(await self._store.load_turns(key))
        except Exception as exc:
            log.warning("slack.thread_lookup_failed", error=type(exc).__name__)
            return False

    async def _display_name(self, user: str, profile: Any) -> str:
        """The asker's display name: from the event, else ``users.info`` (cached), else the user id."""
        if isinstance(profile, Mapping):
            name = str(profile.get("display_name") or profile.get("real_name") or "")
            if name:
                self._names[user] = name
                return name
        if not user:
            return ""
        if user in self._names:
            return self._names[user]
        name = user
        try:
            info = await asyncio.wait_for(self.client.users_info(user=user), 2.0)
            data = info.get("user") or {}
            found = (data.get("profile") or {}).get("display_name") or data.get("real_name") or data.get("name")
            name = str(found or user)
        except Exception as exc:  # a missing users:read scope only costs the nicer name
            log.debug("slack.users_info_failed", error=slack_error_code(exc) or type(exc).__name__)
        self._names[user] = name
        while len(self._names) > 10_000:
            self._names.popitem(last=False)
        return name

    def _remember_thread(self, team: str, channel: str, thread_ts: str) -> None:
        key = (team, channel, thread_ts)
        self._bot_threads[key] = None
        self._bot_threads.move_to_end(key)
        while len(self._bot_threads) > 50_000:
            self._bot_threads.popitem(last=False)

    def _strip_mention(self, text: str) -> str:
        if self.bot_user_id:
            text = re.sub(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>", " ", text)
        return re.sub(r"[ \t]+", " ", text).strip()

    async def _accept(self, body: dict[str, Any], event: dict[str, Any], *, direct: bool) -> Delivery:
        """Turn one person's message into a gateway submission (never raises)."""
        kind = str(event.get("type") or "message")
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts") or "")
        thread_ts = event.get("thread_ts") or (None if direct else ts)
        try:
            if not channel or not ts:
                return Delivery(kind, "ignored", "no channel or ts")
            if not await self._first_delivery(body):
                return Delivery(kind, "duplicate", "retried delivery")
            return await self._submit(body, event, channel, ts, thread_ts, direct=direct)
        except Exception as exc:
            log.exception("slack.accept_failed", error=type(exc).__name__)
            try:
                await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts,
                                                   text=t(self.config.locale, "error_generic"))
            except Exception:
                log.warning("slack.error_note_failed", error=type(exc).__name__)
            return Delivery(kind, "failed", type(exc).__name__)

    async def _submit(self, body: dict[str, Any], event: dict[str, Any], channel: str, ts: str,
                      thread_ts: str | None, *, direct: bool) -> Delivery:
        assert self._gateway is not None and self._policy is not None
        kind = str(event.get("type") or "message")
        team = self._team(body, event)
        user = str(event.get("user") or "")
        text = self._strip_mention(str(event.get("text") or ""))
        if not text:
            return Delivery(kind, "ignored", "no text")  # a bare mention or an empty file share
        user_name = await self._display_name(user, event.get("user_profile"))
        locale = self.config.locale
        conversation = conversation_key("slack", self.config.session_scope, workspace=team, chat=channel,
                                        thread=thread_ts, user=user)
        target = CardTarget(
            platform="slack",
            chat_id=channel,
            thread_id=thread_ts,
            user_id=user,
            user_name=user_name,
            is_group=not direct,
            locale=locale,
            workspace_id=team,
            extra={"ts": ts, "user_team": str(event.get("user_team") or event.get("team") or team)},
        )
        ctx = ToolContext(user_id=user, user_name=user_name, platform="slack", conversation_id=conversation,
                          chat_id=channel, is_group=not direct)
        message = InboundMessage(platform="slack", message_id=f"{team}:{channel}:{ts}", conversation_id=conversation,
                                 text=text, target=target, ctx=ctx)
        if thread_ts and not direct:
            self._remember_thread(team, channel, thread_ts)
        submission = await self._gateway.submit(message, self.sink, self._policy)
        log.info("slack.submitted", status=submission.status, turn_id=submission.turn_id, channel=channel,
                 direct=direct, event_id=body.get("event_id"))
        if submission.status == "duplicate":
            return Delivery(kind, "duplicate", "same channel and ts", submission)
        if submission.status in ("started", "queued") and submission.turn_id:
            self._live_turns[submission.turn_id] = submission
            assistant_thread = direct and bool(event.get("thread_ts"))
            self._spawn(self._follow(submission, channel, thread_ts if assistant_thread else None))
        return Delivery(kind, "submitted", submission.status, submission)

    async def _follow(self, submission: Submission, channel: str, status_thread: str | None) -> None:
        """Show the assistant-pane status while the turn works; forget the turn when its card is final."""
        try:
            if status_thread:
                await self._set_status(channel, status_thread, self.config.status_text or t(self.config.locale, "thinking_status"))
            if submission.done is not None:
                await asyncio.shield(submission.done)
        finally:
            self._live_turns.pop(submission.turn_id, None)
            if status_thread:
                await self._set_status(channel, status_thread, "")

    async def _set_status(self, channel: str, thread_ts: str, status: str) -> None:
        try:
            await self.client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status=status)
        except Exception as exc:  # the pane status is a nicety; the answer still streams
            log.info("slack.set_status_failed", error=slack_error_code(exc) or type(exc).__name__)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
