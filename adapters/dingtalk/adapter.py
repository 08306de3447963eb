"""The DingTalk adapter: receives bot messages (Stream mode or HTTP callback) and submits turns.

A message arrives through :class:`~adapters.dingtalk.connection.DingTalkConnection`
and is acked at once; parsing and submitting happen in a task the adapter
owns, and the turn itself runs in the gateway's task, so neither a slow
platform call nor a dropped stream socket can cancel an answer. Each turn
gets an AI card or one markdown reply (:mod:`adapters.dingtalk.inbound`).

Cards nobody asked for (an alert's, a report) go to a group as an AI card, or
as a robot group message without a template (:meth:`DingTalkAdapter.channel_target`).
A message that quotes another carries the quoted text to the gateway
(:attr:`~botgateway.messages.InboundMessage.quoted`).

Card button presses arrive on Stream mode's card callback topic: an approval
card's Approve/Deny, and a final answer's Refresh and 👍 / 👎 when the AI card
template has them (:class:`~adapters.dingtalk.answer_buttons.AnswerPresses`). A Refresh asks
the answer's question again as the presser, in the card's chat; a 👎 asks the
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

from adapters.dingtalk.answer_buttons import AnswerPresses, parse_answer_press
from adapters.dingtalk.approval_cards import parse_card_action
from adapters.dingtalk.callback import CallbackServer
from adapters.dingtalk.connection import DingTalkConnection
from adapters.dingtalk.inbound import (
    card_mode,
    card_presser,
    dingtalk_principal,
    inbound_message,
    message_target,
    note_key,
)
from adapters.dingtalk.message import BotMessage, parse_bot_message
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.sink import DingTalkSink
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.access import NO_GROUPS, GroupResolver, resolve_message, resolve_safely
from botgateway.background import BackgroundTasks
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import DingTalkConfig
from botgateway.messages import Submission
from botgateway.principal import Principal
from botgateway.sink import CallPacer, CardHandle, CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

if TYPE_CHECKING:
    from adapters.dingtalk.stream import StreamConnection
    from botgateway.gateway import Gateway

__all__ = [
    "HANDOFF_TIMEOUT_S",
    "KEPT_SUBMISSIONS",
    "DingTalkAdapter",
    "config_problems",
    "dingtalk_principal",
    "openapi_client",
]

log = structlog.get_logger(__name__)

HANDOFF_TIMEOUT_S = 10.0
"""How long :meth:`DingTalkAdapter.stop` waits for received messages to reach the gateway before cancelling them."""

KEPT_SUBMISSIONS = 200
"""Recent (msgId, submission) pairs kept for diagnostics and tests."""


def openapi_client(config: DingTalkConfig, session: aiohttp.ClientSession | None = None) -> DingTalkOpenAPI:
    """The app's OpenAPI client: cards, messages and contact lookups share it (and its access token)."""
    return DingTalkOpenAPI(
        client_id=config.client_id,
        client_secret=config.client_secret.get_secret_value(),
        base_url=config.api_base_url,
        session=session,
    )


def config_problems(config: DingTalkConfig, dedupe_ttl_s: float) -> list[str]:
    """What in ``config`` stops the adapter from starting (``dedupe_ttl_s``: how long a used signature is kept)."""
    problems = []
    if not config.client_id:
        problems.append("client_id is empty (the robot app's AppKey)")
    if not config.client_secret.get_secret_value():
        problems.append("client_secret is empty (the robot app's AppSecret; use ${DINGTALK_CLIENT_SECRET})")
    skew = config.callback_max_skew_s
    if config.mode == "http" and dedupe_ttl_s < 2 * skew:
        problems.append(f"callback_max_skew_s ({skew:g} s) must be at most half of memory.dedupe_ttl_s "
                        f"({dedupe_ttl_s:g} s): a used signature is remembered that long, and is valid for twice "
                        "the skew")
    return problems


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
        api: DingTalkOpenAPI | None = None,
        pacer: CallPacer | None = None,
    ) -> None:
        """``groups`` adds the asker's departments to their principal (default: none are looked up; the
        composition root builds it over ``api``, see :func:`openapi_client`); ``reuse_port`` binds the HTTP
        callback's port with ``SO_REUSEPORT`` (worker processes share it); ``api``: the OpenAPI client (default:
        :func:`openapi_client` over ``session``); ``pacer`` pays for the calls the sink makes on its own (a chart's
        upload and image message) from the gateway's rate budget (None: they are made unpaced)."""
        self.config = config
        self.robot_code = config.robot_code or config.client_id
        """The robot code cards and messages are sent as."""
        self._gateway = gateway
        self.api = api or openapi_client(config, session)
        """The shared OpenAPI client."""
        self.monitor = ThrottleMonitor(
            window_s=config.throttle_window_s,
            threshold=config.throttle_degrade_after,
            degrade_for_s=config.degrade_for_s,
            clock=monotonic,
        )
        """Decides when new turns degrade to markdown replies."""
        self.sink = DingTalkSink.from_config(
            config, self.api, robot_code=self.robot_code, monitor=self.monitor, clock=clock, pacer=pacer
        )
        """The adapter's card sink (AI card or markdown reply per turn)."""
        self.policy = BufferPolicy.from_config(config.policy)
        """Update pacing of this adapter's cards."""
        self.submissions: collections.deque[tuple[str, Submission]] = collections.deque(maxlen=KEPT_SUBMISSIONS)
        """Recent (msgId, submission) pairs, oldest first (for diagnostics and tests)."""
        self._handoffs = BackgroundTasks()
        self._corp_id = ""
        self._connection = DingTalkConnection(
            config, self.api, on_message=self.receive, on_card_action=self.receive_card_action,
            first_use=self._first_use_of_signature, clock=clock, reuse_port=reuse_port,
        )
        self._api_closer: asyncio.Future[None] | None = None
        self.groups: GroupResolver = groups or NO_GROUPS
        """Looks up the asker's departments the policy names (given at construction: the composition root builds
        it over the ``api`` it gives too)."""
        self.edits_in_place = self.sink.card is not None
        """With a card template an AI card is changed in place; without one, each change is a new robot message."""
        self._presses = self._answer_presses(gateway) if gateway is not None else None

    def _answer_presses(self, gateway: Gateway) -> AnswerPresses:
        """The handler of a final answer's buttons, given what it uses (built once the gateway is known)."""
        return AnswerPresses(gateway, config=self.config, sink=self.sink, monitor=self.monitor, policy=self.policy,
                             groups=self.groups, bot_corp=lambda: self._corp_id, tell=self.tell_privately,
                             submissions=self.submissions)

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def stream(self) -> StreamConnection | None:
        """The stream connection (Stream mode, once started)."""
        return self._connection.stream

    @property
    def callback_server(self) -> CallbackServer | None:
        """The callback server (HTTP mode, once started)."""
        return self._connection.callback_server

    @property
    def gateway(self) -> Gateway | None:
        """The gateway turns are submitted to (once given)."""
        return self._gateway

    @property
    def corp_id(self) -> str:
        """The bot's own organisation, as learned from the messages received (empty until the first one)."""
        return self._corp_id

    async def start(self, gateway: Gateway | None = None) -> None:
        """Start receiving (Stream mode or the HTTP callback server).

        Cards a previous process left open are finalized by the runner through
        ``gateway.recover_open_cards({"dingtalk": adapter.sink})`` once every
        adapter is up (with a grace period when replicas share Redis).
        """
        if gateway is not None:
            self._gateway = gateway
            self._presses = self._answer_presses(gateway)
        if self._gateway is None:
            raise RuntimeError("DingTalkAdapter.start needs the gateway")
        problems = config_problems(self.config, self._gateway.config.memory.dedupe_ttl_s)
        if problems:
            raise ValueError("adapters.dingtalk: " + "; ".join(problems))
        await self._connection.start()
        log.info("dingtalk.started", mode=self.config.mode, cards=self.sink.card is not None)

    async def _first_use_of_signature(self, key: str) -> bool:
        # the gateway's dedupe claims it in the Store, so every replica sees a pair used anywhere
        assert self._gateway is not None
        return await self._gateway.first_delivery(self.name, key)

    @property
    def connected(self) -> bool:
        """Whether DingTalk can deliver to us now: the stream is connected, or the callback server listens."""
        return self._connection.connected

    async def stop_receiving(self) -> None:
        """Close the stream connection (or stop listening for callbacks), then hand the messages already acked to
        the gateway; the sink keeps finishing the answers in progress. Idempotent."""
        await self._connection.stop()
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
        A final answer's button goes to :class:`~adapters.dingtalk.answer_buttons.AnswerPresses`."""
        press = parse_answer_press(data)
        if press is not None and self._presses is not None:
            await self._presses.handle(press)
            return
        action = parse_card_action(data)
        if action is None or self._gateway is None:
            log.info("dingtalk.card_action_ignored", out_track_id=data.get("outTrackId"))
            return
        presser = await self.resolve_principal(card_presser(action.user_id, action.corp_id, self._corp_id))
        result = await self._gateway.decide_approval(action.code, presser, approved=action.approved,
                                                     locale=self.config.locale, token=action.token)
        if result.answer != "decided":
            await self.tell_privately(action.user_id, result.note)

    async def tell_privately(self, user_id: str, note: str) -> None:
        """A 1:1 robot message to ``user_id`` (a presser), seen by them alone; a failure is logged, never raised."""
        try:
            await self.sink.markdown.sender.send_private(user_id, t(self.config.locale, "reply_title"), note)
        except Exception as exc:
            log.warning("dingtalk.private_note_failed", error=str(exc) or type(exc).__name__)

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
                await self._note(target, t(self.config.locale, note_key(message)))
            return None
        inbound = await resolve_message(inbound_message(message, target, self.config), self.groups)
        submission = await self._gateway.submit(inbound, self.sink, self.policy)
        self.submissions.append((inbound.message_id or f"anon-{id(inbound):x}", submission))
        log.info(
            "dingtalk.submitted", status=submission.status, turn_id=submission.turn_id,
            mode=target.extra["mode"], group=message.is_group,
        )
        return submission

    def _target(self, message: BotMessage) -> CardTarget:
        mode = card_mode(self.sink, self.monitor, is_group=message.is_group, staff_id=message.staff_id,
                         msg_id=message.msg_id, conversation=message.conversation)
        return message_target(message, self.config, mode=mode, robot_code=self.robot_code)

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

