"""The DingTalk adapter: receives bot messages (Stream mode or HTTP callback) and submits turns.

A message is acked at once; parsing and submitting happen in a task the
adapter owns, and the turn itself runs in the gateway's task, so neither a
slow platform call nor a dropped stream socket can cancel an answer. Each turn
gets an AI card when a template is configured and the app is not degraded by
throttling, else one markdown reply. A 1:1 sender without a staff id (external
users) always gets the markdown reply: the robot's 1:1 card space is addressed
by staff id.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from adapters.dingtalk.callback import CallbackServer
from adapters.dingtalk.card_sink import DingTalkCardSink
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.sink import DingTalkSink
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.cards.policy import BufferPolicy
from botgateway.config import DingTalkConfig
from botgateway.messages import InboundMessage, Submission, conversation_key
from botgateway.sink import CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from adapters.dingtalk.stream import StreamConnection
    from botgateway.gateway import Gateway

log = structlog.get_logger(__name__)

MEDIA_TYPES = {"picture", "file", "video", "audio"}
MEDIA_HINT = "(The user also attached an image or file, which you cannot see.)"
"""Added to a question that came with media, so the model does not pretend to have seen it."""


@dataclass(frozen=True)
class ParsedText:
    """The text of a bot message and whether media was dropped."""

    text: str
    """The question, trimmed; empty when the message carried none."""
    had_media: bool
    """The message carried an image, file or video that was ignored."""


def message_text(data: dict[str, Any]) -> ParsedText:
    """The question in a bot-message payload: text, rich text (text parts joined) or audio recognition."""
    msgtype = data.get("msgtype", "text")
    content = data.get("content") if isinstance(data.get("content"), dict) else {}
    if msgtype == "text":
        text = (data.get("text") or {}).get("content", "")
        return ParsedText(str(text).strip(), False)
    if msgtype == "richText":
        pieces, media = [], False
        for item in content.get("richText") or []:
            if not isinstance(item, dict):
                continue
            if "text" in item:
                pieces.append(str(item["text"]))
            elif item.get("downloadCode") or item.get("pictureDownloadCode") or item.get("type") in MEDIA_TYPES:
                media = True
        return ParsedText("\n".join(p.strip() for p in pieces if p.strip()), media)
    if msgtype == "audio" and content.get("recognition"):
        return ParsedText(str(content["recognition"]).strip(), False)
    return ParsedText("", True)


class DingTalkAdapter:
    """Receives DingTalk bot messages and answers each with an AI card (or one markdown reply)."""

    name = "dingtalk"

    def __init__(
        self,
        config: DingTalkConfig,
        *,
        gateway: Gateway | None = None,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.robot_code = config.robot_code or config.client_id
        """The robot code cards and messages are sent as."""
        self._gateway = gateway
        self._clock = clock
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
        sender = MarkdownSender(self.api, robot_code=self.robot_code, clock=clock)
        markdown = DingTalkMarkdownSink(sender, robot_code=self.robot_code, max_chars=config.max_card_chars)
        card = None
        if config.card_template_id:
            card = DingTalkCardSink(
                self.api,
                template_id=config.card_template_id,
                robot_code=self.robot_code,
                content_key=config.card_content_key,
                qps=config.qps,
                max_chars=config.max_card_chars,
                sender=sender,
                monitor=self.monitor,
            )
        self.sink = DingTalkSink(markdown, card)
        """The adapter's card sink (AI card or markdown reply per turn)."""
        self.policy = BufferPolicy.from_config(config.policy)
        """Update pacing of this adapter's cards."""
        self.submissions: list[tuple[str, Submission]] = []
        """Recent (msgId, submission) pairs, oldest first (bounded; for diagnostics and tests)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stream: StreamConnection | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._callback: CallbackServer | None = None
        self._api_closer: asyncio.Future[None] | None = None

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
            self._callback = CallbackServer(
                secret=self.config.client_secret.get_secret_value(),
                on_message=self._on_callback,
                host=self.config.http_host,
                port=self.config.http_port,
                path=self.config.http_path,
                clock=self._clock,
            )
            await self._callback.start()
        else:
            from dingtalk_stream import (
                Credential,  # the SDK is only needed in Stream mode
            )

            from adapters.dingtalk.stream import StreamConnection

            self._stream = StreamConnection(
                Credential(self.config.client_id, self.config.client_secret.get_secret_value()),
                self.receive,
                api_base_url=self.config.api_base_url,
                session=self.api.session(),
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
            self._stream_task = asyncio.create_task(self._stream.run(first), name="dingtalk-stream")
        log.info("dingtalk.started", mode=self.config.mode, cards=self.sink.card is not None)

    def _config_problems(self) -> list[str]:
        problems = []
        if not self.config.client_id:
            problems.append("client_id is empty (the robot app's AppKey)")
        if not self.config.client_secret.get_secret_value():
            problems.append("client_secret is empty (the robot app's AppSecret; use ${DINGTALK_CLIENT_SECRET})")
        return problems

    async def stop(self) -> None:
        """Stop receiving; turns already submitted are the gateway's to finish."""
        if self._stream is not None:
            await self._stream.stop()
        if self._stream_task is not None:
            self._stream_task.cancel()
            await asyncio.gather(self._stream_task, return_exceptions=True)
        if self._callback is not None:
            await self._callback.stop()
        if self._tasks:
            # Handing a message to the gateway is quick; one stuck longer (a hung store) must not outlive the adapter.
            _, stuck = await asyncio.wait(list(self._tasks), timeout=10)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        # Cards of running turns are finished by the gateway after we stop receiving;
        # they still need the OpenAPI session, so it closes once they are done.
        pending = [s.done for _, s in self.submissions if s.done is not None and not s.done.done()]
        if not pending:
            await self.api.aclose()
            return
        if self._api_closer is None:
            self._api_closer = asyncio.ensure_future(self._close_api_after(pending))

    async def _close_api_after(self, pending: list[asyncio.Future[Any]]) -> None:
        await asyncio.wait(pending)
        await self.api.aclose()

    # --- receiving ---------------------------------------------------------------------

    def receive(self, data: dict[str, Any]) -> None:
        """Handle a bot-message payload in the adapter's own task (returns at once)."""
        task = asyncio.create_task(self._handle_safely(data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        conversation = str(data.get("conversationId") or "")
        is_group = str(data.get("conversationType")) == "2"
        if not conversation:
            log.warning("dingtalk.message_without_conversation", msg_id=data.get("msgId"))
            return None
        if is_group and data.get("isInAtList") is False:
            return None  # group chatter that does not address the bot
        staff_id = str(data.get("senderStaffId") or "")
        # External users (and some org setups) come without a staff id; senderId still tells askers apart.
        user_id = staff_id or str(data.get("senderId") or "")
        user_name = str(data.get("senderNick") or "")
        parsed = message_text(data)
        webhook = str(data.get("sessionWebhook") or "")
        if webhook and not webhook.startswith(self.config.oapi_base_url.rstrip("/") + "/"):
            # Never post answers to a host that is not DingTalk's (a forged payload could try).
            log.warning("dingtalk.webhook_ignored", reason="not under oapi_base_url")
            webhook = ""
        mode = "card" if self.sink.card is not None and not self.monitor.degraded else "markdown"
        if mode == "card" and not is_group and not staff_id:
            # A 1:1 card goes to dtv1.card//IM_ROBOT.{staffId}, which a senderId cannot fill;
            # this turn replies in markdown through the session webhook instead.
            mode = "markdown"
            log.info("dingtalk.card_needs_staff_id", msg_id=data.get("msgId"), conversation=conversation,
                     note="1:1 sender has no senderStaffId; answering with a markdown reply")
        target = CardTarget(
            platform=self.name,
            chat_id=conversation,
            user_id=user_id,
            user_name=user_name,
            is_group=is_group,
            locale=self.config.locale,
            workspace_id=str(data.get("robotCode") or self.robot_code),
            extra={
                "mode": mode,
                "session_webhook": webhook,
                "session_webhook_expires_ms": int(data.get("sessionWebhookExpiredTime") or 0),
                "msg_id": str(data.get("msgId") or ""),
            },
        )
        if not parsed.text:
            if await self._gateway.first_delivery(self.name, str(data.get("msgId") or "")):
                await self._note(target, t(self.config.locale, "images_ignored" if parsed.had_media else "empty_question"))
            return None
        text = parsed.text
        if parsed.had_media:
            # Tell the model, so it does not pretend to have seen the picture.
            text += "\n\n" + MEDIA_HINT
        key = conversation_key(
            self.name,
            self.config.session_scope,
            workspace=str(data.get("chatbotCorpId") or ""),
            chat=conversation,
            user=user_id,
        )
        msg = InboundMessage(
            platform=self.name,
            message_id=str(data.get("msgId") or ""),
            conversation_id=key,
            text=text,
            target=target,
            ctx=ToolContext(
                user_id=user_id,
                user_name=user_name,
                platform=self.name,
                conversation_id=key,
                chat_id=conversation,
                is_group=is_group,
            ),
        )
        submission = await self._gateway.submit(msg, self.sink, self.policy)
        self._remember(msg.message_id or f"anon-{id(msg):x}", submission)
        log.info("dingtalk.submitted", status=submission.status, turn_id=submission.turn_id, mode=mode, group=is_group)
        return submission

    def _remember(self, msg_id: str, submission: Submission) -> None:
        self.submissions.append((msg_id, submission))
        del self.submissions[:-200]

    def submission(self, msg_id: str) -> Submission | None:
        """The first submission of DingTalk message ``msg_id`` (redeliveries come after it)."""
        return next((s for m, s in self.submissions if m == msg_id), None)

    async def drain(self) -> None:
        """Wait until every message received so far has been handed to the gateway."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _note(self, target: CardTarget, text: str) -> None:
        """Answer a message that is not a question with a short markdown note."""
        snapshot = CardSnapshot(status="done", answer=text, locale=target.locale, asker=target.user_name)
        try:
            await self.sink.markdown.sender.send(target, snapshot)
        except Exception as exc:
            log.warning("dingtalk.note_failed", error=type(exc).__name__, detail=str(exc)[:200])
