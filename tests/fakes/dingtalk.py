"""A fake DingTalk on loopback: stream gateway, OAuth, card OpenAPI, robot and session webhooks.

It behaves like the real platform where our code depends on it:

- ``POST /v1.0/gateway/connections/open`` checks the credentials and the
  subscriptions and answers an endpoint + ticket; the websocket at that
  endpoint pushes ``CALLBACK`` frames in the SDK's wire format and records the
  acks the client sends back.
- ``POST /v1.0/oauth2/accessToken`` issues tokens; every other OpenAPI call
  checks ``x-acs-dingtalk-access-token`` and answers 401 for an unknown or
  expired token.
- The card APIs (``createAndDeliver``, ``PUT /v1.0/card/streaming``) validate
  their bodies, keep per-card state and enforce a QPS limit per sliding second
  with the real throttle body (HTTP 403 ``Forbidden.AccessDenied.QpsLimitForAppkeyAndApi``).
- The old contact API ``POST /topapi/v2/user/get?access_token=…`` answers the
  departments of :attr:`FakeDingTalk.departments` (errcode 88 / sub_code 60011
  while :attr:`FakeDingTalk.contact_permission` is off).
- Robot sends (``groupMessages/send``, ``oToMessages/batchSend``) and session
  webhooks (``/robot/sendBySession``) record markdown messages; an image
  message (``sampleImageMsg``) must name an uploaded ``media_id`` (or a URL).
- The old media upload ``POST /media/upload?access_token=…&type=image`` checks
  the token (errcode 40014 otherwise), wants a PNG in the multipart field
  ``media`` (errcode 40005 otherwise), keeps its bytes (:attr:`FakeDingTalk.media`)
  and answers a fresh ``media_id``; :meth:`FakeDingTalk.media_ids_in` lists the
  media ids a markdown text shows as images.

Failures can be scripted (``fail_next``) and every call is recorded with its
arrival time, so tests assert on what the platform actually saw. For the
benchmark, :meth:`FakeDingTalk.watch` calls back on every accepted change of a
card or message (with the moment it became visible) and
:meth:`FakeDingTalk.call_counts` splits the calls of each API into accepted,
throttled and failed.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import WSMsgType, web

BOT_TOPIC = "/v1.0/im/bot/messages/get"
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
CARD_PATHS = ("/v1.0/card/instances/createAndDeliver", "/v1.0/card/streaming", "/v1.0/card/instances")
QPS_LIMIT_CODE = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
MEDIA_PATH = "/media/upload"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IMAGE_REF = re.compile(r"!\[[^\]\n]*\]\((@[A-Za-z0-9_\-]+)\)")

FailureKind = Literal["qps", "429", "401", "500"]


@dataclass
class Call:
    """One HTTP call the fake received."""

    method: str
    """HTTP method."""
    path: str
    """Request path (no query)."""
    body: Any
    """Decoded JSON body (``None`` when it was not JSON)."""
    at: float
    """``time.monotonic()`` at arrival."""
    status: int = 0
    """The status the fake answered."""
    token: str | None = None
    """The ``x-acs-dingtalk-access-token`` it carried."""


@dataclass
class FakeCard:
    """One card instance as the fake knows it."""

    out_track_id: str
    create_body: dict[str, Any]
    content: str
    """Current value of the streaming key (cardParamMap value at create)."""
    updates: list[dict[str, Any]] = field(default_factory=list)
    """Accepted streaming bodies, in order."""
    finalized: bool = False
    """An ``isFinalize`` update was accepted."""
    error: bool = False
    """The final update carried ``isError``."""
    delivered: bool = True
    """False when ``createAndDeliver`` reported the delivery as failed (nobody sees the card)."""
    params: dict[str, str] = field(default_factory=dict)
    """The card's variables: ``cardParamMap`` at create, changed by ``PUT /v1.0/card/instances``."""

    @property
    def space_id(self) -> str:
        """The ``openSpaceId`` the card was delivered to."""
        return str(self.create_body.get("openSpaceId", ""))


@dataclass
class SentMessage:
    """A markdown (or text, or image) message the robot sent."""

    via: Literal["webhook", "group", "oto"]
    chat: str
    """Conversation id (webhook/group) or the comma-joined user ids (oto)."""
    msg_key: str
    title: str
    text: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when it was accepted."""

    @property
    def photo_url(self) -> str:
        """The ``photoURL`` of an image message (``sampleImageMsg``): a ``media_id`` or a URL; empty for others."""
        if self.msg_key != "sampleImageMsg":
            return ""
        return str(json.loads(self.body.get("msgParam") or "{}").get("photoURL", ""))


@dataclass(frozen=True)
class UploadedMedia:
    """A file the media upload accepted."""

    media_id: str
    """The id it answered (``@lADP…``)."""
    media_type: str
    """The ``type`` query parameter (``image``)."""
    file_name: str
    """The multipart part's file name."""
    content_type: str
    """The multipart part's content type."""
    data: bytes = field(repr=False)
    """The bytes uploaded."""
    at: float
    """``time.monotonic()`` when it was accepted."""


class FakeDingTalk:
    """The fake platform. ``await start()`` returns the base URL; ``await stop()``."""

    def __init__(
        self,
        *,
        client_id: str = "dingfakeappkey",
        client_secret: str = "fake-app-secret",
        qps_limit: int | None = 20,
        token_ttl_s: int = 7200,
        latency_s: float = 0.0,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.qps_limit = qps_limit
        """Card API calls accepted per sliding second (both card APIs together); None disables."""
        self.token_ttl_s = token_ttl_s
        self.latency_s = latency_s
        """Simulated processing time of every card call."""
        self.held = 0
        """Card calls held on their way by :meth:`hold_arrivals` now."""
        self._arrivals_open: asyncio.Event | None = None
        self.calls: list[Call] = []
        self.cards: dict[str, FakeCard] = {}
        self.subscriptions: set[str] = set()
        """Callback topics the client subscribed to when it opened its connection."""
        self.messages: list[SentMessage] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.tokens_issued: list[str] = []
        self.connections_opened = 0
        self.expired_sessions: set[str] = set()
        self.undeliverable_spaces: set[str] = set()
        """``openSpaceId``s where ``createAndDeliver`` creates the card but cannot deliver it (robot not in the group)."""
        self.invalid_staff: set[str] = set()
        """Staff ids ``oToMessages/batchSend`` skips as invalid (HTTP 200, nothing sent), like users outside the app's range."""
        """``openSpaceId``s where ``createAndDeliver`` creates the card but cannot deliver it (robot not in the group)."""
        self.departments: dict[str, list[int]] = {}
        """Direct department ids of each staff id, as ``topapi/v2/user/get`` answers them; others: no such user."""
        self.contact_permission = True
        """False answers ``topapi/v2/user/get`` like an app without 成员信息读权限 (qyapi_get_member)."""
        self.media: dict[str, UploadedMedia] = {}
        """Files the media upload accepted, by ``media_id``, in upload order."""
        self._media_arrivals: list[float] = []
        self._valid_tokens: set[str] = set()
        self._tickets: set[str] = set()
        self._failures: dict[str, collections.deque[FailureKind]] = collections.defaultdict(collections.deque)
        self._card_arrivals: list[float] = []
        self._ws: web.WebSocketResponse | None = None
        self.sockets: list[web.WebSocketResponse] = []
        """Open Stream connections (one per client process); callbacks go to them in turn, like DingTalk's balancing."""
        self._next_socket = itertools.count()
        self._ws_connected = asyncio.Event()
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._watchers: list[Callable[[FakeCard | SentMessage, str, float], None]] = []
        self.base_url = ""

    # --- lifecycle -----------------------------------------------------------------

    async def start(self) -> str:
        """Serve on an ephemeral loopback port; returns the base URL (OpenAPI and stream gateway alike)."""
        app = web.Application()
        app.router.add_post("/v1.0/gateway/connections/open", self._open_connection)
        app.router.add_get("/connect", self._websocket)
        app.router.add_post("/v1.0/oauth2/accessToken", self._access_token)
        app.router.add_post("/v1.0/card/instances/createAndDeliver", self._create_and_deliver)
        app.router.add_put("/v1.0/card/streaming", self._streaming)
        app.router.add_put("/v1.0/card/instances", self._update_card)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._group_send)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._oto_send)
        app.router.add_post("/robot/sendBySession", self._session_webhook)
        app.router.add_post("/topapi/v2/user/get", self._user_get)
        app.router.add_post(MEDIA_PATH, self._media_upload)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Close the websocket and the server."""
        for ws in [*self.sockets, *([self._ws] if self._ws is not None else [])]:
            if not ws.closed:
                await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeDingTalk:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- scripting -------------------------------------------------------------------

    def fail_next(self, path: str, kind: FailureKind, times: int = 1) -> None:
        """Answer the next ``times`` calls to ``path`` with ``kind`` (QpsLimit, 429, 401, 500)."""
        self._failures[path].extend([kind] * times)

    def expire_tokens(self) -> None:
        """Every token issued so far becomes invalid (the next OpenAPI call answers 401)."""
        self._valid_tokens.clear()

    def session_webhook(self, conversation_id: str) -> str:
        """The session webhook URL the fake hands out for ``conversation_id``."""
        return f"{self.base_url}/robot/sendBySession?session={conversation_id}"

    # --- inspection ------------------------------------------------------------------

    def card_calls(self) -> list[Call]:
        """Every call that reached a card API (accepted or throttled)."""
        return [c for c in self.calls if c.path in CARD_PATHS]

    def max_card_calls_per_second(self) -> int:
        """Most card API calls that arrived within any sliding 1-second window."""
        times = sorted(c.at for c in self.card_calls())
        best, start = 0, 0
        for end, t in enumerate(times):
            while t - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    def throttled(self) -> int:
        """Card calls answered with a throttle (403 QpsLimit or 429)."""
        return sum(1 for c in self.card_calls() if c.status in (403, 429))

    def uploads(self) -> list[Call]:
        """Every call that reached the media upload (accepted or not), in arrival order."""
        return [c for c in self.calls if c.path == MEDIA_PATH]

    @staticmethod
    def media_ids_in(text: str) -> list[str]:
        """The media ids ``text`` shows as images (``![title](@media_id)``), in order."""
        return _IMAGE_REF.findall(text)

    def image_messages(self) -> list[SentMessage]:
        """The robot's image messages (``sampleImageMsg``), in order."""
        return [m for m in self.messages if m.msg_key == "sampleImageMsg"]

    def cards_in(self, space_id: str) -> list[FakeCard]:
        """Cards delivered to ``space_id`` (``dtv1.card//IM_GROUP.cid…``), in creation order."""
        return [c for c in self.cards.values() if c.space_id == space_id]

    def watch(self, callback: Callable[[FakeCard | SentMessage, str, float], None]) -> None:
        """Call ``callback(card_or_message, change, at)`` after every accepted change people would see.

        ``change`` is ``create`` (``createAndDeliver``), ``stream`` (``PUT /v1.0/card/streaming``),
        ``update`` (``PUT /v1.0/card/instances``) or ``message`` (a robot or session-webhook
        message); ``at`` is the ``time.monotonic()`` moment it became visible.
        """
        self._watchers.append(callback)

    def _tell_watchers(self, obj: FakeCard | SentMessage, change: str) -> None:
        at = time.monotonic()
        for callback in self._watchers:
            callback(obj, change, at)

    def call_counts(self) -> dict[str, dict[str, int]]:
        """Per ``METHOD path``: calls ``accepted`` (2xx), ``throttled`` (403 QpsLimit / 429) and ``failed`` (other)."""
        counts: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"accepted": 0, "throttled": 0, "failed": 0})
        for call in self.calls:
            key = f"{call.method} {call.path}"
            if call.status in (403, 429):
                counts[key]["throttled"] += 1
            elif 200 <= call.status < 300:
                counts[key]["accepted"] += 1
            else:
                counts[key]["failed"] += 1
        return dict(counts)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds (re-checked after every recorded change)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- stream gateway --------------------------------------------------------------

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

    # --- OpenAPI -----------------------------------------------------------------------

    async def _access_token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, {"appKey": body.get("appKey")}, time.monotonic(), 200))
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            self.calls[-1].status = 400
            return web.json_response({"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret"}, status=400)
        token = f"tok-{next(self._ids)}-{secrets.token_hex(6)}"
        self._valid_tokens.add(token)
        self.tokens_issued.append(token)
        return web.json_response({"accessToken": token, "expireIn": self.token_ttl_s})

    def hold_arrivals(self) -> None:
        """Hold card calls on their way, as a stalled network does, until :meth:`release_arrivals`: they arrive
        (and count against the QPS limit) together then."""
        self._arrivals_open = asyncio.Event()

    async def release_arrivals(self) -> None:
        """Let the held card calls arrive, all at once."""
        if self._arrivals_open is not None:
            self._arrivals_open.set()
            self._arrivals_open = None

    async def _begin(self, request: web.Request, *, card: bool) -> tuple[Call, web.Response | None]:
        """Record the call and apply auth, scripted failures and the QPS limit."""
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        gate = self._arrivals_open
        if card and gate is not None:
            self.held += 1
            await self._notify()
            await gate.wait()
            self.held -= 1
        token = request.headers.get("x-acs-dingtalk-access-token")
        call = Call(request.method, request.path, body, time.monotonic(), token=token)
        self.calls.append(call)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        failure = self._failures[request.path].popleft() if self._failures[request.path] else None
        response: web.Response | None = None
        if failure == "401" or token not in self._valid_tokens:
            response = web.json_response({"code": "InvalidAuthentication", "message": "不合法的access_token"}, status=401)
        elif failure == "qps":
            response = web.json_response({"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r1"}, status=403)
        elif failure == "429":
            response = web.json_response({"code": "Throttling", "message": "too many requests"}, status=429, headers={"Retry-After": "2"})
        elif failure == "500":
            response = web.json_response({"code": "ServiceUnavailable", "message": "internal error"}, status=503)
        elif body is None:
            response = web.json_response({"code": "invalidParameter", "message": "body is not JSON"}, status=400)
        elif card and self.qps_limit is not None:
            now = call.at
            self._card_arrivals = [t for t in self._card_arrivals if now - t < 1.0]
            if len(self._card_arrivals) >= self.qps_limit:
                response = web.json_response({"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r2"}, status=403)
            self._card_arrivals.append(now)
        call.status = response.status if response is not None else 200
        return call, response

    async def _create_and_deliver(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        problems = [k for k in ("cardTemplateId", "outTrackId", "openSpaceId") if not body.get(k)]
        space = str(body.get("openSpaceId", ""))
        param_map = (body.get("cardData") or {}).get("cardParamMap")
        if not isinstance(param_map, dict) or not all(isinstance(v, str) for v in param_map.values()):
            problems.append("cardData.cardParamMap (string values)")
        if space.startswith("dtv1.card//IM_GROUP."):
            if not (body.get("imGroupOpenDeliverModel") or {}).get("robotCode"):
                problems.append("imGroupOpenDeliverModel.robotCode")
        elif space.startswith("dtv1.card//IM_ROBOT."):
            if (body.get("imRobotOpenDeliverModel") or {}).get("spaceType") != "IM_ROBOT":
                problems.append("imRobotOpenDeliverModel.spaceType")
        else:
            problems.append("openSpaceId")
        if body.get("outTrackId") in self.cards:
            return await self._bad_request(call, {"code": "param.outTrackIdExists", "message": "outTrackId already used"})
        if problems:
            return await self._bad_request(call, {"code": "invalidParameter", "message": "missing " + ", ".join(problems)})
        card = FakeCard(body["outTrackId"], body, content=next(iter(param_map.values()), ""), params=dict(param_map))
        self.cards[card.out_track_id] = card
        self._tell_watchers(card, "create")
        await self._notify()
        if space in self.undeliverable_spaces:
            # Like DingTalk: HTTP 200, the instance exists, only the delivery result says it failed.
            card.delivered = False
            delivery = {"spaceId": space, "spaceType": "IM_GROUP", "success": False, "errorMsg": "机器人不在群内"}
        else:
            delivery = {"spaceId": space, "success": True, "carrierId": f"c{len(self.cards)}"}
        return web.json_response({"success": True, "result": {"outTrackId": card.out_track_id, "deliverResults": [delivery]}})

    async def _bad_request(self, call: Call, body: dict[str, Any]) -> web.Response:
        """Refuse ``call`` with HTTP 400 and DingTalk's error ``body``, as a card API call it cannot take."""
        call.status = 400
        await self._notify()
        return web.json_response(body, status=400)

    async def _update_card(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        card = self.cards.get(body.get("outTrackId", ""))
        params = (body.get("cardData") or {}).get("cardParamMap")
        if card is None or not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            return await self._bad_request(call, {"code": "invalidParameter", "message": "unknown card or bad cardParamMap"})
        card.params.update(params)
        key = str(card.updates[-1].get("key")) if card.updates else "content"
        if key in params:
            card.content = params[key]  # the streamed variable, changed after its stream ended
        self._tell_watchers(card, "update")
        await self._notify()
        return web.json_response({"success": True, "result": True})

    async def _streaming(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        card = self.cards.get(body.get("outTrackId", ""))
        if card is None:
            return await self._bad_request(call, {"code": "param.cardNotExist", "message": "card instance does not exist"})
        missing = [k for k in ("guid", "key") if not body.get(k)] + [k for k in ("isFull", "isFinalize", "isError") if not isinstance(body.get(k), bool)]
        if missing or not isinstance(body.get("content"), str):
            return await self._bad_request(call, {"code": "invalidParameter", "message": "bad " + ", ".join(missing or ["content"])})
        if card.finalized:
            return await self._bad_request(call, {"code": "card.streamingFinished", "message": "streaming already finalized"})
        card.updates.append(body)
        card.content = body["content"] if body["isFull"] else card.content + body["content"]
        card.finalized = body["isFinalize"]
        card.error = body["isError"]
        self._tell_watchers(card, "stream")
        await self._notify()
        return web.json_response({"success": True, "result": True})

    @staticmethod
    def _markdown(msg_key: str, params: dict[str, Any]) -> tuple[str, str]:
        if msg_key == "sampleMarkdown":
            return str(params.get("title", "")), str(params.get("text", ""))
        return "", str(params.get("content", ""))

    def _bad_image(self, msg_key: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Why an image message cannot be shown (its ``photoURL`` is no uploaded media id nor a URL), else None."""
        if msg_key != "sampleImageMsg":
            return None
        photo = str(params.get("photoURL") or "")
        if photo in self.media or photo.startswith(("http://", "https://")):
            return None
        return {"code": "invalidParameter", "message": f"photoURL is not a known mediaId or URL: {photo[:40]!r}"}

    async def _media_upload(self, request: web.Request) -> web.Response:
        """The old media upload: token in the query, the file in the multipart field ``media``, HTTP 200 with an
        ``errcode`` unless a scripted or QPS throttle answers first."""
        token = request.query.get("access_token")
        media_type = request.query.get("type", "")
        try:
            form = await request.post()
        except ValueError:
            form = None
        part = form.get("media") if form is not None else None
        data = part.file.read() if isinstance(part, web.FileField) else b""
        call = Call("POST", request.path, {"type": media_type, "bytes": len(data)}, time.monotonic(), token=token)
        self.calls.append(call)
        answer, status = self._media_answer(call, token, media_type, part, data)
        call.status = status
        await self._notify()
        if status != 200:
            headers = {"Retry-After": "2"} if status == 429 else None
            return web.json_response(answer, status=status, headers=headers)
        return web.json_response(answer)

    def _media_answer(self, call: Call, token: str | None, media_type: str, part: Any,
                      data: bytes) -> tuple[dict[str, Any], int]:
        failure = self._failures[MEDIA_PATH].popleft() if self._failures[MEDIA_PATH] else None
        if failure == "qps":
            return {"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r7"}, 403
        if failure == "429":
            return {"code": "Throttling", "message": "too many requests"}, 429
        if failure == "500":
            return {"code": "ServiceUnavailable", "message": "internal error"}, 503
        if failure == "401" or token not in self._valid_tokens:
            return {"errcode": 40014, "errmsg": "不合法的access_token"}, 200
        if self.qps_limit is not None:
            self._media_arrivals = [t for t in self._media_arrivals if call.at - t < 1.0]
            self._media_arrivals.append(call.at)
            if len(self._media_arrivals) > self.qps_limit:
                return {"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r8"}, 403
        if media_type != "image":
            return {"errcode": 40004, "errmsg": "不合法的媒体文件类型"}, 200
        if not isinstance(part, web.FileField) or not data.startswith(PNG_SIGNATURE):
            return {"errcode": 40005, "errmsg": "不合法的文件类型"}, 200
        media_id = f"@lADP{secrets.token_hex(10)}"
        self.media[media_id] = UploadedMedia(media_id, media_type, part.filename, part.content_type, data, call.at)
        return {"errcode": 0, "errmsg": "ok", "media_id": media_id, "created_at": int(time.time() * 1000),
                "type": media_type}, 200

    async def _group_send(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=False)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        if not body.get("robotCode") or not body.get("openConversationId") or not body.get("msgKey"):
            call.status = 400
            return web.json_response({"code": "invalidParameter", "message": "robotCode, openConversationId and msgKey are required"}, status=400)
        params = json.loads(body.get("msgParam") or "{}")
        refused = self._bad_image(body["msgKey"], params)
        if refused is not None:
            return await self._bad_request(call, refused)
        title, text = self._markdown(body["msgKey"], params)
        self.messages.append(SentMessage("group", body["openConversationId"], body["msgKey"], title, text, body))
        self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"processQueryKey": f"q{len(self.messages)}"})

    async def _oto_send(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=False)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        if not body.get("robotCode") or not body.get("userIds") or not body.get("msgKey"):
            call.status = 400
            return web.json_response({"code": "invalidParameter", "message": "robotCode, userIds and msgKey are required"}, status=400)
        params = json.loads(body.get("msgParam") or "{}")
        refused = self._bad_image(body["msgKey"], params)
        if refused is not None:
            return await self._bad_request(call, refused)
        title, text = self._markdown(body["msgKey"], params)
        invalid = [u for u in body["userIds"] if u in self.invalid_staff]
        valid = [u for u in body["userIds"] if u not in self.invalid_staff]
        if valid:
            self.messages.append(SentMessage("oto", ",".join(valid), body["msgKey"], title, text, body))
            self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"processQueryKey": f"q{len(self.messages)}", "invalidStaffIdList": invalid, "flowControlledStaffIdList": []})

    async def _session_webhook(self, request: web.Request) -> web.Response:
        body = await request.json()
        session = request.query.get("session", "")
        call = Call("POST", request.path, body, time.monotonic(), 200)
        self.calls.append(call)
        if session in self.expired_sessions:
            await self._notify()
            return web.json_response({"errcode": 300001, "errmsg": "session webhook expired"})
        msgtype = body.get("msgtype")
        if msgtype == "markdown":
            title, text = body["markdown"].get("title", ""), body["markdown"].get("text", "")
        elif msgtype == "text":
            title, text = "", body["text"].get("content", "")
        else:
            return web.json_response({"errcode": 40035, "errmsg": "unsupported msgtype"})
        self.messages.append(SentMessage("webhook", session, msgtype, title, text, body))
        self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _user_get(self, request: web.Request) -> web.Response:
        """The old contact API: token in the query, HTTP 200 with an ``errcode`` whatever happens."""
        body = await request.json()
        token = request.query.get("access_token")
        call = Call("POST", request.path, body, time.monotonic(), 200, token=token)
        self.calls.append(call)
        await self._notify()
        if token not in self._valid_tokens:
            return web.json_response({"errcode": 40014, "errmsg": "不合法的access_token", "request_id": "r3"})
        if not self.contact_permission:
            denied = "应用尚未开通所需的权限：[qyapi_get_member]"
            return web.json_response({"errcode": 88, "sub_code": "60011", "sub_msg": denied,
                                      "errmsg": f"ding talk error[subcode=60011,submsg={denied}]", "request_id": "r4"})
        staff_id = str(body.get("userid") or "")
        if staff_id not in self.departments:
            return web.json_response({"errcode": 60121, "errmsg": "找不到该用户", "request_id": "r5"})
        result = {"userid": staff_id, "name": staff_id, "active": True, "dept_id_list": self.departments[staff_id]}
        return web.json_response({"errcode": 0, "errmsg": "ok", "result": result, "request_id": "r6"})


def bot_message(
    text: str,
    *,
    msg_id: str | None = None,
    conversation_id: str = "cidGroup001==",
    group: bool = True,
    staff_id: str | None = "staff001",
    nick: str = "张三",
    webhook: str = "",
    webhook_expires_ms: int | None = None,
    msgtype: str = "text",
    content: dict[str, Any] | None = None,
    robot_code: str = "dingfakeappkey",
    quoted: str | dict[str, Any] | None = None,
    quoted_key: str | None = None,
) -> dict[str, Any]:
    """A bot-message payload as DingTalk sends it (the ``data`` of a CALLBACK frame).

    ``staff_id=None`` leaves ``senderStaffId`` out, as for external users: only the opaque ``senderId`` is sent.
    ``quoted`` makes the (text) message quote another one: a string quotes a text message saying it, a dict is
    the ``repliedMsg`` as sent (a quoted card: ``{"msgType": "interactiveCard", "content": {"text": "[…]"}}``);
    ``quoted_key`` is the ``originalProcessQueryKey`` naming the quoted robot message or card.
    """
    now_ms = int(time.time() * 1000)
    data: dict[str, Any] = {
        "conversationId": conversation_id,
        "chatbotCorpId": "dingcorp",
        "chatbotUserId": "$:LWCP_v1:$bot",
        "msgId": msg_id or f"msg{secrets.token_hex(8)}",
        "senderNick": nick,
        "isAdmin": False,
        "sessionWebhookExpiredTime": webhook_expires_ms if webhook_expires_ms is not None else now_ms + 90 * 60 * 1000,
        "createAt": now_ms,
        "senderCorpId": "dingcorp",
        "conversationType": "2" if group else "1",
        "senderId": f"$:LWCP_v1:${staff_id or 'external-' + secrets.token_hex(4)}",
        "sessionWebhook": webhook,
        "robotCode": robot_code,
        "msgtype": msgtype,
    }
    if staff_id is not None:
        data["senderStaffId"] = staff_id
    if group:
        data["conversationTitle"] = "运维群"
        data["isInAtList"] = True
        data["atUsers"] = [{"dingtalkId": "$:LWCP_v1:$bot"}]
    if msgtype == "text":
        data["text"] = {"content": text}
    else:
        data["content"] = content or {}
    if quoted is not None:
        assert msgtype == "text", "quotes are sent with text messages"
        replied = quoted if isinstance(quoted, dict) else {
            "msgType": "text", "msgId": f"msg{secrets.token_hex(8)}", "senderId": "$:LWCP_v1:$staff002",
            "senderNick": "王五", "createdAt": now_ms - 60_000, "content": {"text": quoted}}
        data["text"].update({"isReplyMsg": True, "repliedMsg": replied})
        if quoted_key is not None:
            data["originalProcessQueryKey"] = quoted_key
    return data
