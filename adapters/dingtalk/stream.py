"""Stream mode: the ``dingtalk-stream`` client, connected through our own reconnect loop.

We keep the SDK's frame parsing, topic routing and ack format
(``DingTalkStreamClient.route_message`` and ``ChatbotHandler.raw_process``) and
replace two things in a small subclass:

- opening the connection: the SDK posts to a module-level URL with blocking
  ``requests`` from inside the event loop; we post with the adapter's aiohttp
  session to a configurable URL (tests point it at a fake gateway);
- the reconnect loop: the SDK sleeps 10 s after every drop and cannot be
  stopped; ours backs off from 1 s (:data:`RECONNECT_BACKOFF`), resets after a
  good connection and stops cleanly. The loop and the frame tasks are
  :class:`~botgateway.background.BackgroundTasks` the connection owns, ended
  by :meth:`StreamConnection.stop`.

The handler acks every bot message at once and hands it to the adapter, which
runs the turn in tasks it (and the gateway) own, so a dropped socket never
cancels a turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

import aiohttp
import structlog
import websockets
from dingtalk_stream import (
    AckMessage,
    CallbackMessage,
    ChatbotHandler,
    ChatbotMessage,
    Credential,
    DingTalkStreamClient,
)
from dingtalk_stream.version import VERSION_STRING

from adapters.dingtalk.card_sink import CARD_CALLBACK_TOPIC
from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff

__all__ = ["OPEN_PATH", "RECONNECT_BACKOFF", "BotMessageHandler", "CardActionHandler", "StreamConnection"]

log = structlog.get_logger(__name__)

OPEN_PATH = "/v1.0/gateway/connections/open"
"""The gateway endpoint that hands out a websocket endpoint and a one-time ticket."""

RECONNECT_BACKOFF = Backoff(base_s=1.0, max_s=30.0, jitter=(1.0, 1.0))
"""1 s after a drop, doubling up to 30 s; one connection per app, so there is no crowd to spread with jitter."""

_AT_CAP = 64
"""A failure count whose back-off is the longest (:meth:`Backoff.delay` caps the exponent there)."""


class BotMessageHandler(ChatbotHandler):
    """Acks each bot message at once and passes its payload to ``receive`` (which must not block)."""

    def __init__(self, receive: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self.logger = logging.getLogger("adapters.dingtalk.sdk")
        self._receive = receive

    async def process(self, callback: CallbackMessage) -> tuple[int, str]:
        """Hand the payload over and ack OK (a payload ``receive`` cannot take is acked as a system error)."""
        data = callback.data if isinstance(callback.data, dict) else {}
        try:
            self._receive(data)
        except Exception as exc:  # a bad message must not break the connection
            log.exception("dingtalk.receive_failed", error=type(exc).__name__)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "error"
        return AckMessage.STATUS_OK, "OK"


class CardActionHandler(BotMessageHandler):
    """Acks each card button press at once and passes its payload to ``receive`` (approval cards)."""


class StreamConnection(DingTalkStreamClient):
    """The SDK client with a non-blocking, configurable connection opener and a stoppable reconnect loop."""

    def __init__(
        self,
        credential: Credential,
        receive: Callable[[dict[str, Any]], None],
        *,
        api_base_url: str,
        session: aiohttp.ClientSession,
        backoff: Backoff = RECONNECT_BACKOFF,
        on_card_action: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``on_card_action`` receives card button presses (:data:`CARD_CALLBACK_TOPIC`); None: not subscribed."""
        super().__init__(credential, logger=logging.getLogger("adapters.dingtalk.sdk"))
        self.open_url = api_base_url.rstrip("/") + OPEN_PATH
        """The gateway's ``connections/open`` endpoint."""
        self.connected = asyncio.Event()
        """Set while a websocket is open."""
        self.connections = 0
        """Websockets opened so far."""
        self._session = session
        self._backoff = backoff
        self._tasks = BackgroundTasks()
        self._stopping = False
        self.register_callback_handler(ChatbotMessage.TOPIC, BotMessageHandler(receive))
        if on_card_action is not None:
            self.register_callback_handler(CARD_CALLBACK_TOPIC, CardActionHandler(on_card_action))

    def open_connection(self) -> dict[str, Any] | None:
        """Refused: the SDK's opener blocks the event loop with ``requests``; use :meth:`open_connection_async`."""
        raise RuntimeError("use await StreamConnection.open_connection_async()")

    async def open_connection_async(self) -> dict[str, Any]:
        """Ask the gateway for an endpoint and a ticket; raises ConnectionError with a plain reason."""
        topics = [{"type": "CALLBACK", "topic": topic} for topic in self.callback_handler_map]
        body = {
            "clientId": self.credential.client_id,
            "clientSecret": self.credential.client_secret,
            "subscriptions": topics,
            "ua": f"botgateway dingtalk-sdk-python/v{VERSION_STRING}",
            "localIp": "",
        }
        try:
            async with self._session.post(self.open_url, json=body, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                text = await resp.text()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ConnectionError(f"cannot reach the DingTalk stream gateway: {type(exc).__name__}") from None
        if status in (400, 401, 403):
            raise PermissionError(
                f"the DingTalk stream gateway refused the app (HTTP {status}); check adapters.dingtalk.client_id / "
                "client_secret and that the robot uses Stream mode"
            )
        try:
            connection = json.loads(text)
        except json.JSONDecodeError:
            connection = None
        if status != 200 or not isinstance(connection, dict) or not connection.get("endpoint") or not connection.get("ticket"):
            raise ConnectionError(f"the DingTalk stream gateway answered HTTP {status} without an endpoint")
        return connection

    def run_in_background(self, first: dict[str, Any] | None = None) -> None:
        """:meth:`run` in a task this connection owns; :meth:`stop` ends it."""
        self._tasks.spawn(self.run(first), name="dingtalk-stream")

    async def run(self, first: dict[str, Any] | None = None) -> None:
        """Connect (with ``first``, an endpoint already obtained, if given), route frames, reconnect until :meth:`stop`."""
        self.pre_start()
        failures = 0
        while not self._stopping:
            ticket = ""
            try:
                connection = first or await self.open_connection_async()
                first = None
                ticket = str(connection["ticket"])
                uri = f'{connection["endpoint"]}?ticket={quote_plus(ticket)}'
                async with websockets.connect(uri, max_size=None) as websocket:
                    self.websocket = websocket
                    self.connections += 1
                    self.connected.set()
                    failures = 0
                    log.info("dingtalk.stream_connected", connections=self.connections)
                    async for raw in websocket:
                        self._route(raw)
                log.info("dingtalk.stream_closed")
            except asyncio.CancelledError:
                raise
            except PermissionError as exc:
                log.error("dingtalk.stream_refused", reason=str(exc))
                failures = _AT_CAP  # a refused app waits the longest until it connects again
            except Exception as exc:
                # websockets puts the URI (with its one-time ticket) into some messages.
                detail = str(exc).replace(quote_plus(ticket), "***").replace(ticket, "***") if ticket else str(exc)
                log.warning("dingtalk.stream_dropped", error=type(exc).__name__, detail=detail[:200])
            finally:
                self.connected.clear()
            if self._stopping:
                break
            await asyncio.sleep(self._backoff.delay(failures))
            failures = min(failures + 1, _AT_CAP)

    def _route(self, raw: str | bytes) -> None:
        try:
            frame = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("dingtalk.bad_frame")
            return
        # The SDK routes and acks; handlers only schedule work, so these tasks are short.
        self._tasks.spawn(self.background_task(frame), name="dingtalk-frame")

    async def stop(self) -> None:
        """Stop reconnecting, close the socket, and end the loop and the frame tasks."""
        self._stopping = True
        websocket = self.websocket
        if websocket is not None:
            await websocket.close()
        # Awaited so no task outlives the adapter (frame tasks only ack and hand over, so this is quick).
        await self._tasks.aclose()
