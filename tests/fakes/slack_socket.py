"""The fake Slack's Socket Mode: the websocket ``apps.connections.open`` hands out, envelopes pushed and their acks.

:class:`SlackSocketMode` is the part of :class:`~tests.fakes.slack.FakeSlack`
that answers ``apps.connections.open`` with a ``ws://127.0.0.1:…`` URL, serves
that websocket (``hello`` first, then every acknowledgement the app sends is
kept by ``envelope_id``), and lets a test push an envelope and wait for its ack.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["SlackSocketMode"]


class SlackSocketMode:
    """Socket Mode connections and envelopes (a mixin of :class:`~tests.fakes.slack.FakeSlack`)."""

    base: str
    _call_event: asyncio.Event

    def _init_socket_mode(self) -> None:
        """Start with no connection and no ack (called from the fake's ``__init__``)."""
        self.socket_enabled = True
        """False refuses websocket connections (a proxy that blocks them)."""
        self.acks: dict[str, dict[str, Any]] = {}
        """The app's acknowledgements by ``envelope_id``."""
        self.sockets: list[web.WebSocketResponse] = []
        """Open Socket Mode connections, oldest first (envelopes go to the newest)."""
        self._ack_events: dict[str, asyncio.Event] = {}
        self._connected = asyncio.Event()

    async def wait_connected(self, timeout: float = 10.0) -> None:
        """Wait until a Socket Mode client is connected."""
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def push(self, payload: dict[str, Any], *, type: str = "events_api", retry_attempt: int = 0,
                   retry_reason: str = "", envelope_id: str | None = None) -> str:
        """Send one envelope to the connected app; returns its ``envelope_id``."""
        await self.wait_connected()
        envelope_id = envelope_id or str(uuid.uuid4())
        self._ack_events[envelope_id] = asyncio.Event()
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "type": type,
            "payload": payload,
            "accepts_response_payload": type != "events_api",
        }
        if type == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason
        await self.sockets[-1].send_str(json.dumps(envelope))
        return envelope_id

    async def wait_ack(self, envelope_id: str, timeout: float = 3.0) -> dict[str, Any]:
        """Wait for the ack of ``envelope_id`` (Slack's limit is 3 s); returns the ack message."""
        await asyncio.wait_for(self._ack_events[envelope_id].wait(), timeout)
        return self.acks[envelope_id]

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any] | str:
        return {"url": f"{self.base.replace('http://', 'ws://')}/socket?ticket=valid"}

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        if request.query.get("ticket") != "valid" or not self.socket_enabled:
            raise web.HTTPForbidden()
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.sockets.append(ws)
        self._call_event.set()  # wait_for re-checks on connections too
        await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self.sockets),
                                      "connection_info": {"app_id": "A0001"}}))
        self._connected.set()
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                envelope_id = data.get("envelope_id")
                if envelope_id:
                    self.acks[envelope_id] = data
                    event = self._ack_events.setdefault(envelope_id, asyncio.Event())
                    event.set()
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
            if not self.sockets:
                self._connected.clear()
            self._call_event.set()
        return ws
