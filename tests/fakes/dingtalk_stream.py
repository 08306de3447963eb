"""The fake DingTalk's Stream gateway: opening a connection, its websocket, the frames pushed and their acks.

:class:`DingTalkStream` is the part of :class:`~tests.fakes.dingtalk.FakeDingTalk`
that answers ``POST /v1.0/gateway/connections/open`` (credentials and
subscriptions checked, an endpoint and a one-time ticket answered), serves the
websocket at that endpoint, pushes ``CALLBACK`` and ``SYSTEM`` frames in the
SDK's wire format (several connections take callbacks in turn, like DingTalk's
balancing) and keeps the acks the client sends back.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.dingtalk_calls import Call

__all__ = ["BOT_TOPIC", "CARD_CALLBACK_TOPIC", "DingTalkStream"]

BOT_TOPIC = "/v1.0/im/bot/messages/get"
"""The callback topic of messages to the bot (a client must subscribe to it)."""
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
"""The callback topic of card button presses."""


class DingTalkStream:
    """Stream connections, frames and acks (a mixin of :class:`~tests.fakes.dingtalk.FakeDingTalk`)."""

    client_id: str
    client_secret: str
    calls: list[Call]
    subscriptions: set[str]
    acks: dict[str, dict[str, Any]]
    connections_opened: int
    sockets: list[web.WebSocketResponse]
    _ws: web.WebSocketResponse | None
    _ws_connected: asyncio.Event
    _tickets: set[str]
    _next_socket: itertools.count[int]
    _ids: itertools.count[int]
    _notify: Callable[[], Awaitable[None]]
    wait_for: Callable[..., Awaitable[None]]

    async def wait_connected(self, timeout: float = 10.0) -> None:
        """Wait until a stream client has a websocket open."""
        await asyncio.wait_for(self._ws_connected.wait(), timeout)

    async def push_bot_message(self, data: dict[str, Any], *, frame_id: str | None = None,
                               connection: int | None = None) -> str:
        """Push one bot-message ``CALLBACK`` frame; returns the frame's ``messageId``.

        ``connection`` picks one of :attr:`sockets` (by index); by default they take turns.
        """
        return await self._push_callback(BOT_TOPIC, data, frame_id=frame_id, connection=connection)

    async def _socket_for(self, connection: int | None) -> web.WebSocketResponse:
        await self.wait_connected()
        open_sockets = [ws for ws in self.sockets if not ws.closed]
        if connection is not None:
            return open_sockets[connection]
        if not open_sockets:
            assert self._ws is not None
            return self._ws
        return open_sockets[next(self._next_socket) % len(open_sockets)]

    async def _push_callback(self, topic: str, data: dict[str, Any], *, frame_id: str | None = None,
                             connection: int | None = None) -> str:
        """Push one ``CALLBACK`` frame of ``topic``; returns its ``messageId``."""
        ws = await self._socket_for(connection)
        frame_id = frame_id or f"frame-{next(self._ids)}-{secrets.token_hex(4)}"
        frame = {
            "specVersion": "1.0",
            "type": "CALLBACK",
            "headers": {
                "appId": "fake-app",
                "connectionId": "conn-1",
                "contentType": "application/json",
                "messageId": frame_id,
                "time": str(int(time.time() * 1000)),
                "topic": topic,
            },
            "data": json.dumps(data, ensure_ascii=False),
        }
        await ws.send_str(json.dumps(frame, ensure_ascii=False))
        return frame_id

    async def push_card_action(self, out_track_id: str, *, user_id: str, action: str, params: dict[str, str],
                               corp_id: str = "dingcorp") -> str:
        """A button press on card ``out_track_id``, as DingTalk's Stream-mode card callback sends it (if subscribed)."""
        assert CARD_CALLBACK_TOPIC in self.subscriptions, "the client did not subscribe to card callbacks"
        content = {"cardPrivateData": {"actionIds": [action], "params": params}}
        data = {"outTrackId": out_track_id, "userId": user_id, "corpId": corp_id, "type": "actionCallback",
                "content": json.dumps(content), "extension": "{}"}
        return await self._push_callback(CARD_CALLBACK_TOPIC, data)

    async def push_system(self, topic: str, data: dict[str, Any] | None = None) -> str:
        """Push a ``SYSTEM`` frame (``ping`` expects its data echoed in the ack; ``disconnect`` asks the client to reconnect)."""
        await self.wait_connected()
        assert self._ws is not None
        frame_id = f"sys-{next(self._ids)}"
        frame = {
            "specVersion": "1.0",
            "type": "SYSTEM",
            "headers": {"contentType": "application/json", "messageId": frame_id, "time": str(int(time.time() * 1000)), "topic": topic},
            "data": json.dumps(data or {}),
        }
        await self._ws.send_str(json.dumps(frame))
        return frame_id

    async def wait_ack(self, frame_id: str, timeout: float = 5.0) -> dict[str, Any]:
        """The ack the client sent for ``frame_id``."""
        await self.wait_for(lambda: frame_id in self.acks, timeout)
        return self.acks[frame_id]

    async def drop_socket(self) -> None:
        """Close the websocket from the server side, as a gateway restart would."""
        ws = self._ws
        self._ws_connected.clear()
        if ws is not None:
            await ws.close(code=1011, message=b"gateway restarting")

    async def _open_connection(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, body, time.monotonic(), 200))
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            return web.json_response({"code": "InvalidAuthentication", "message": "clientId or clientSecret is invalid"}, status=401)
        topics = {(s.get("type"), s.get("topic")) for s in body.get("subscriptions", [])}
        self.subscriptions = {topic for kind, topic in topics if kind == "CALLBACK"}
        if ("CALLBACK", BOT_TOPIC) not in topics:
            return web.json_response({"code": "invalidParameter", "message": "no subscription"}, status=400)
        self.connections_opened += 1
        ticket = secrets.token_urlsafe(12)
        self._tickets.add(ticket)
        await self._notify()
        host = request.host
        return web.json_response({"endpoint": f"ws://{host}/connect", "ticket": ticket})

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.json_response({"code": "invalidTicket"}, status=403)
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        self.sockets.append(ws)
        self._ws_connected.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                ack = json.loads(msg.data)
                frame_id = ack.get("headers", {}).get("messageId", "")
                self.acks[frame_id] = ack
                await self._notify()
        self.sockets.remove(ws)
        if self._ws is ws:
            if self.sockets:
                self._ws = self.sockets[-1]  # another process is still connected
            else:
                self._ws_connected.clear()
        return ws
