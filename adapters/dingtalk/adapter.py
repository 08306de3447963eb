"""The DingTalk adapter: receives bot messages (Stream mode or HTTP callback) and submits turns.

A message is acked at once; parsing and submitting happen in a task the
adapter owns, and the turn itself runs in the gateway's task, so neither a
slow platform call nor a dropped stream socket can cancel an answer. Each turn
gets an AI card when a template is configured and the app is not degraded by
throttling, else one markdown reply. A 1:1 sender without a staff id (external
users) always gets the markdown reply: the robot's 1:1 card space is addressed
by staff id.

Cards nobody asked for (an alert's, a report) go to a group as an AI card, or
as a robot group message without a template (:meth:`DingTalkAdapter.channel_target`).
A message that quotes another carries the quoted text to the gateway
(:attr:`~botgateway.messages.InboundMessage.quoted`).

Card button presses arrive on Stream mode's card callback topic: an approval
card's Approve/Deny, and a final answer's Refresh and 👍 / 👎 when the AI card
template has them (:mod:`adapters.dingtalk.answer_buttons`). A Refresh asks the
answer's question again as the presser, in the card's chat; a 👎 asks the
voter, in a 1:1 message, for a ``reason <text>`` reply.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from adapters.dingtalk.answer_buttons import AnswerPress, parse_answer_press
from adapters.dingtalk.approval_cards import parse_card_action
from adapters.dingtalk.callback import CallbackServer
from adapters.dingtalk.message import MEDIA_HINT, BotMessage, ParsedText, parse_bot_message
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.sink import DingTalkSink
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.background import BackgroundTasks
from botgateway.cards.policy import BufferPolicy
from botgateway.config import DingTalkConfig
from botgateway.groups import NO_GROUPS, GroupResolver, resolve_message, resolve_safely
from botgateway.messages import InboundMessage, Submission, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardHandle, CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from adapters.dingtalk.stream import StreamConnection
    from botgateway.gateway import Gateway

__all__ = ["HANDOFF_TIMEOUT_S", "KEPT_SUBMISSIONS", "DingTalkAdapter", "dingtalk_principal"]

log = structlog.get_logger(__name__)

HANDOFF_TIMEOUT_S = 10.0
"""How long :meth:`DingTalkAdapter.stop` waits for received messages to reach the gateway before cancelling them."""

KEPT_SUBMISSIONS = 200
"""Recent (msgId, submission) pairs kept for diagnostics and tests."""


class DingTalkAdapter:
    """Receives DingTalk bot messages and answers each with an AI card (or one markdown reply).

    Also a :class:`~botgateway.sink.ChannelCards`: it posts cards nobody asked for into a group.
    """

    name = "dingtalk"

    def __init__(
        self,
        config: DingTalkConfig,
        *,
        gateway: Gateway | None = None,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        groups: GroupResolver | None = None,
        reuse_port: bool = False,
    ) -> None:
        """``groups`` adds the asker's departments to their principal (default: none are looked up);
        ``reuse_port`` binds the HTTP callback's port with ``SO_REUSEPORT`` (worker processes share it)."""
        self.config = config
        self.robot_code = config.robot_code or config.client_id
        """The robot code cards and messages are sent as."""
        self._gateway = gateway
        self._clock = clock
        self._reuse_port = reuse_port
        self.api = DingTalkOpenAPI(
            client_id=config.client_id,
            client_secret=config.client_secret.get_secret_value(),
            base_url=config.api_base_url,
            session=session,
        )
        """The shared OpenAPI client."""
        self.monitor = ThrottleMonitor(
            window_s=config.throttle_window_s,
            threshold=config.throttle_degrade_after,
            degrade_for_s=config.degrade_for_s,
            clock=monotonic,
        )
        """Decides when new turns degrade to markdown replies."""
        self.sink = DingTalkSink.from_config(
            config, self.api, robot_code=self.robot_code, monitor=self.monitor, clock=clock
        )
        """The adapter's card sink (AI card or markdown reply per turn)."""
        self.policy = BufferPolicy.from_config(config.policy)
        """Update pacing of this adapter's cards."""
        self.submissions: collections.deque[tuple[str, Submission]] = collections.deque(maxlen=KEPT_SUBMISSIONS)
        """Recent (msgId, submission) pairs, oldest first (for diagnostics and tests)."""
        self._handoffs = BackgroundTasks()
        self._corp_id = ""
        self._stream: StreamConnection | None = None
        self._callback: CallbackServer | None = None
        self._api_closer: asyncio.Future[None] | None = None
        self.groups: GroupResolver = groups or NO_GROUPS
        """Looks up the asker's departments the policy names (set after construction when it needs :attr:`api`)."""
        self.edits_in_place = self.sink.card is not None
        """With a card template an AI card is changed in place; without one, each change is a new robot message."""

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def stream(self) -> StreamConnection | None:
        """The stream connection (Stream mode, once started)."""
        return self._stream

    @property
    def callback_server(self) -> CallbackServer | None:
        """The callback server (HTTP mode, once started)."""
        return self._callback

    async def start(self, gateway: Gateway | None = None) -> None:
        """Start receiving (Stream mode or the HTTP callback server).

        Cards a previous process left open are finalized by the runner through
        ``gateway.recover_open_cards({"dingtalk": adapter.sink})`` once every
        adapter is up (with a grace period when replicas share Redis).
        """
        if gateway is not None:
            self._gateway = gateway
        if self._gateway is None:
            raise RuntimeError("DingTalkAdapter.start needs the gateway")
        problems = self._config_problems()
        if problems:
            raise ValueError("adapters.dingtalk: " + "; ".join(problems))
        if self.config.mode == "http":
            await self._start_callback()
        else:
            await self._start_stream()
        log.info("dingtalk.started", mode=self.config.mode, cards=self.sink.card is not None)

    async def _start_callback(self) -> None:
        self._callback = CallbackServer(
            secret=self.config.client_secret.get_secret_value(),
            on_message=self._on_callback,
            first_use=self._first_use_of_signature,
            max_skew_s=self.config.callback_max_skew_s,
            host=self.config.http_host,
            port=self.config.http_port,
            path=self.config.http_path,
            clock=self._clock,
            reuse_port=self._reuse_port,
        )
        await self._callback.start()

    async def _start_stream(self) -> None:
        from dingtalk_stream import Credential  # the SDK is only needed in Stream mode

        from adapters.dingtalk.stream import StreamConnection

        self._stream = StreamConnection(
            Credential(self.config.client_id, self.config.client_secret.get_secret_value()),
            self.receive,
            api_base_url=self.config.api_base_url,
            session=self.api.session(),
            on_card_action=self.receive_card_action if self._card_buttons() else None,
        )
        # A refused app id/secret fails the start with a plain reason; a network
        # problem does not (the connection keeps retrying in the background).
        first: dict[str, Any] | None = None
        try:
            first = await self._stream.open_connection_async()
        except PermissionError as exc:
            await self.api.aclose()
            raise ValueError(str(exc)) from None
        except ConnectionError as exc:
            log.warning("dingtalk.stream_unreachable", detail=str(exc))
        self._stream.run_in_background(first)

    def _card_buttons(self) -> bool:
        """Whether cards carry buttons that call back (approval cards, a final answer's buttons)."""
        return bool(self.config.approval_template_id or (self.config.answer_buttons and self.config.card_template_id))

    async def _first_use_of_signature(self, key: str) -> bool:
        # the gateway's dedupe claims it in the Store, so every replica sees a pair used anywhere
        assert self._gateway is not None
        return await self._gateway.first_delivery(self.name, key)

    def _config_problems(self) -> list[str]:
        problems = []
        if not self.config.client_id:
            problems.append("client_id is empty (the robot app's AppKey)")
        if not self.config.client_secret.get_secret_value():
            problems.append("client_secret is empty (the robot app's AppSecret; use ${DINGTALK_CLIENT_SECRET})")
        remembered = self._gateway.config.memory.dedupe_ttl_s if self._gateway is not None else None
        skew = self.config.callback_max_skew_s
        if self.config.mode == "http" and remembered is not None and remembered < 2 * skew:
            problems.append(f"callback_max_skew_s ({skew:g} s) must be at most half of memory.dedupe_ttl_s "
                            f"({remembered:g} s): a used signature is remembered that long, and is valid for twice the skew")
        return problems

    @property
    def connected(self) -> bool:
        """Whether DingTalk can deliver to us now: the stream is connected, or the callback server listens."""
        if self._stream is not None:
            return self._stream.connected.is_set()
        return self._callback is not None and self._callback.listening

    async def stop_receiving(self) -> None:
        """Close the stream connection (or stop listening for callbacks), then hand the messages already acked to
        the gateway; the sink keeps finishing the answers in progress. Idempotent."""
        if self._stream is not None:
            await self._stream.stop()
        if self._callback is not None:
            await self._callback.stop()
        # Handing a message to the gateway is quick; one stuck longer (a hung store) must not outlive the adapter.
        await self._handoffs.wait(timeout=HANDOFF_TIMEOUT_S)
        log.info("dingtalk.stopped_receiving", mode=self.config.mode)

    async def stop(self) -> None:
        """Stop receiving; turns already submitted are the gateway's to finish."""
        await self.stop_receiving()
        await self._handoffs.aclose()
        # Cards of running turns are finished by the gateway after we stop receiving;
        # they still need the OpenAPI session, so it closes once they are done.
        pending = [s.done for _, s in self.submissions if s.done is not None and not s.done.done()]
        if not pending:
            await self.api.aclose()
            return
        if self._api_closer is None:
            # Outlives stop() on purpose: the gateway finishes these cards later, and nothing owns us then.
            self._api_closer = asyncio.ensure_future(self._close_api_after(pending))

    async def _close_api_after(self, pending: list[asyncio.Future[Any]]) -> None:
        await asyncio.wait(pending)
        await self.api.aclose()

    # --- receiving ---------------------------------------------------------------------

    def receive(self, data: dict[str, Any]) -> None:
        """Handle a bot-message payload in a task the adapter owns (returns at once)."""
        self._handoffs.spawn(self._handle_safely(data), name="dingtalk-message")

    def receive_card_action(self, data: dict[str, Any]) -> None:
        """Handle a card's button press (an approval's, an answer's) in a task the adapter owns (returns at once)."""
        self._handoffs.spawn(self._card_action(data), name="dingtalk-card-action")

    async def _card_action(self, data: dict[str, Any]) -> None:
        """Approve or Deny pressed: counted when the presser is an approver there, else a private 1:1 note says why.
        A final answer's button goes to :meth:`_answer_press`."""
        press = parse_answer_press(data)
        if press is not None and self._gateway is not None:
            await self._answer_press(press)
            return
        action = parse_card_action(data)
        if action is None or self._gateway is None:
            log.info("dingtalk.card_action_ignored", out_track_id=data.get("outTrackId"))
            return
        # Fail closed: a press whose organisation is unknown, or not the bot's, counts as from outside.
        external = not action.corp_id or action.corp_id != self._corp_id
        presser = await self.resolve_principal(
            Principal.of(self.name, action.user_id, team=action.corp_id, external=external))
        locale = self.config.locale
        result = await self._gateway.decide_approval(action.code, presser, approved=action.approved, locale=locale,
                                                     token=action.token)
        if result.answer == "decided":
            return
        try:
            await self.sink.markdown.sender.send_private(action.user_id, t(locale, "reply_title"), result.note)
        except Exception as exc:
            log.warning("dingtalk.private_note_failed", error=str(exc) or type(exc).__name__)

    async def _answer_press(self, press: AnswerPress) -> None:
        """Refresh, 👍 or 👎 pressed on a final answer's card."""
        assert self._gateway is not None
        locale = self.config.locale
        note = ""
        if press.action == "refresh":
            answer = await self._gateway.answer(press.turn_id)
            if answer is None:
                note = t(locale, "refresh_unknown")
            else:
                # The press as the presser's message in the card's chat: their access and limits apply there.
                chat = answer.target
                message = BotMessage(
                    msg_id="", conversation=str(chat.get("chat_id") or ""), is_group=bool(chat.get("is_group")),
                    addressed=True, staff_id=press.user_id, user_id=press.user_id, user_name="", webhook="",
                    webhook_expires_ms=0, robot_code=str(chat.get("workspace_id") or ""),
                    corp_id=self._corp_id or press.corp_id, text=ParsedText("", False), sender_corp_id=press.corp_id,
                )
                inbound = await resolve_message(self._inbound_message(message, self._target(message)), self.groups)
                submission = await self._gateway.refresh(press.turn_id, inbound, self.sink, self.policy)
                self.submissions.append((f"refresh:{press.turn_id}:{press.user_id}", submission))
                log.info("dingtalk.refresh_pressed", turn_id=press.turn_id, status=submission.status)
        else:
            # Fail closed, as for approvals: a press from an unknown organisation, or not the bot's, is from outside.
            external = not press.corp_id or press.corp_id != self._corp_id
            voter = await self.resolve_principal(
                Principal.of(self.name, press.user_id, team=press.corp_id, external=external))
            reply = await self._gateway.vote(press.turn_id, voter, press.action, locale=locale,
                                             ask_reason=press.action == "down")
            note = reply if press.action == "down" else ""  # the 👎 asks for its reason; a 👍 needs no answer
        if note:
            try:
                await self.sink.markdown.sender.send_private(press.user_id, t(locale, "reply_title"), note)
            except Exception as exc:
                log.warning("dingtalk.private_note_failed", error=str(exc) or type(exc).__name__)

    async def _on_callback(self, data: dict[str, Any]) -> None:
        self.receive(data)

    async def _handle_safely(self, data: dict[str, Any]) -> None:
        try:
            await self.handle(data)
        except Exception as exc:
            log.exception("dingtalk.handle_failed", error=type(exc).__name__, msg_id=data.get("msgId"))

    async def handle(self, data: dict[str, Any]) -> Submission | None:
        """Parse one bot-message payload and submit it; None when it is not a question."""
        if self._gateway is None:
            raise RuntimeError("the adapter is not started")
        message = parse_bot_message(data)
        self._corp_id = message.corp_id or self._corp_id  # the bot's own organisation, for card presses
        if not message.conversation:
            log.warning("dingtalk.message_without_conversation", msg_id=message.msg_id)
            return None
        if message.is_group and not message.addressed:
            return None  # group chatter that does not address the bot
        target = self._target(message)
        if not message.text.text:
            if await self._gateway.first_delivery(self.name, message.msg_id):
                await self._note(target, t(self.config.locale, self._note_key(message)))
            return None
        inbound = await resolve_message(self._inbound_message(message, target), self.groups)
        submission = await self._gateway.submit(inbound, self.sink, self.policy)
        self.submissions.append((inbound.message_id or f"anon-{id(inbound):x}", submission))
        log.info(
            "dingtalk.submitted", status=submission.status, turn_id=submission.turn_id,
            mode=target.extra["mode"], group=message.is_group,
        )
        return submission

    @staticmethod
    def _note_key(message: BotMessage) -> str:
        """What to tell the asker of a message without a question (logged when it could not be read)."""
        if message.text.unreadable:
            log.warning("dingtalk.message_unreadable", msg_id=message.msg_id, reason=message.text.unreadable)
            return "message_unreadable"
        return "images_ignored" if message.text.had_media else "empty_question"

    def _mode(self, message: BotMessage) -> str:
        """``card`` or ``markdown`` for this turn."""
        if self.sink.card is None or self.monitor.degraded:
            return "markdown"
        if not message.is_group and not message.staff_id:
            # A 1:1 card goes to dtv1.card//IM_ROBOT.{staffId}, which a senderId cannot fill;
            # this turn replies in markdown through the session webhook instead.
            log.info("dingtalk.card_needs_staff_id", msg_id=message.msg_id, conversation=message.conversation,
                     note="1:1 sender has no senderStaffId; answering with a markdown reply")
            return "markdown"
        return "card"

    def _webhook(self, message: BotMessage) -> str:
        """The session webhook, if it is DingTalk's: a forged payload must not make us post answers elsewhere."""
        if message.webhook and not message.webhook.startswith(self.config.oapi_base_url.rstrip("/") + "/"):
            log.warning("dingtalk.webhook_ignored", reason="not under oapi_base_url")
            return ""
        return message.webhook

    def _target(self, message: BotMessage) -> CardTarget:
        return CardTarget(
            platform=self.name,
            chat_id=message.conversation,
            user_id=message.user_id,
            user_name=message.user_name,
            is_group=message.is_group,
            locale=self.config.locale,
            workspace_id=message.robot_code or self.robot_code,
            extra={
                "mode": self._mode(message),
                "session_webhook": self._webhook(message),
                "session_webhook_expires_ms": message.webhook_expires_ms,
                "msg_id": message.msg_id,
            },
        )

    def _inbound_message(self, message: BotMessage, target: CardTarget) -> InboundMessage:
        text = message.text.text
        if message.text.had_media:
            # Tell the model, so it does not pretend to have seen the picture.
            text += "\n\n" + MEDIA_HINT
        key = conversation_key(
            self.name,
            self.config.session_scope,
            workspace=message.corp_id,
            chat=message.conversation,
            user=message.user_id,
        )
        ctx = ToolContext(
            user_id=message.user_id,
            user_name=message.user_name,
            platform=self.name,
            conversation_id=key,
            chat_id=message.conversation,
            is_group=message.is_group,
            principal=dingtalk_principal(message),
        )
        return InboundMessage(
            platform=self.name, message_id=message.msg_id, conversation_id=key, text=text, target=target, ctx=ctx,
            principal=ctx.principal, quoted=message.quote.text if message.quote is not None else "",
            # What a quoted card is known by (its delivery's carrierId): its text does not come with the quote.
            quoted_key=message.quote.process_query_key if message.quote is not None else "",
        )

    # --- cards nobody asked for ---------------------------------------------------------------

    def channel_target(self, chat_id: str, *, locale: str) -> CardTarget:
        """A new card in group ``chat_id`` (a ``cid…`` conversation id): an AI card with a template, else a robot
        group message. Unlike a turn's mode it does not degrade while the card API is throttled: the card lives
        on and is changed later, which only an AI card can be; its calls wait for the budget instead."""
        mode = "card" if self.edits_in_place else "markdown"
        return CardTarget(platform=self.name, chat_id=chat_id, is_group=True, locale=locale,
                          workspace_id=self.robot_code, extra={"mode": mode})

    async def adopt_thread(self, handle: CardHandle) -> str | None:
        """None: a DingTalk group has no threads; a message quoting the card comes with the quoted text
        (:attr:`~botgateway.messages.InboundMessage.quoted`) instead."""
        return None

    async def resolve_principal(self, principal: Principal) -> Principal:
        """``principal`` with the departments the policy names that it is in (never raises; unchanged on failure)."""
        return await resolve_safely(self.groups, principal)

    def submission(self, msg_id: str) -> Submission | None:
        """The first submission of DingTalk message ``msg_id`` (redeliveries come after it)."""
        return next((s for m, s in self.submissions if m == msg_id), None)

    async def drain(self) -> None:
        """Wait until every message received so far has been handed to the gateway."""
        while len(self._handoffs):
            await self._handoffs.wait()

    async def _note(self, target: CardTarget, text: str) -> None:
        """Answer a message that is not a question with a short markdown note."""
        snapshot = CardSnapshot(status="done", answer=text, locale=target.locale, asker=target.user_name)
        try:
            await self.sink.markdown.sender.send(target, snapshot)
        except Exception as exc:
            log.warning("dingtalk.note_failed", error=type(exc).__name__, detail=str(exc)[:200])


def dingtalk_principal(message: BotMessage) -> Principal:
    """The asker as ``dingtalk:<staffId>`` (else the opaque sender id); external when of another organisation."""
    # senderCorpId is the asker's own organisation; a missing staff id alone also happens inside one org.
    sender_corp = message.sender_corp_id or message.corp_id
    external = bool(message.corp_id) and sender_corp != message.corp_id
    return Principal.of(DingTalkAdapter.name, message.user_id, team=sender_corp, external=external,
                        name=message.user_name)
