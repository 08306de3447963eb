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

The parts live in their own modules: the Stream gateway in
:mod:`tests.fakes.dingtalk_stream`, the card APIs in :mod:`tests.fakes.dingtalk_cards`,
robot messages in :mod:`tests.fakes.dingtalk_robot`, the media upload in
:mod:`tests.fakes.dingtalk_media`, scripted failures and the QPS limit in
:mod:`tests.fakes.dingtalk_limits`, the recorded calls, watchers and waits in
:mod:`tests.fakes.dingtalk_calls`, the bot-message payload in
:mod:`tests.fakes.dingtalk_payloads`. Their public names are importable from here too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.dingtalk_calls import Call, DingTalkObservation
from tests.fakes.dingtalk_cards import CARD_PATHS, DingTalkCardAPI, FakeCard
from tests.fakes.dingtalk_limits import QPS_LIMIT_CODE, DingTalkLimits, FailureKind
from tests.fakes.dingtalk_media import MEDIA_PATH, PNG_SIGNATURE, DingTalkMedia, UploadedMedia
from tests.fakes.dingtalk_payloads import bot_message
from tests.fakes.dingtalk_robot import DingTalkRobot, SentMessage
from tests.fakes.dingtalk_stream import BOT_TOPIC, CARD_CALLBACK_TOPIC, DingTalkStream

__all__ = [
    "BOT_TOPIC",
    "CARD_CALLBACK_TOPIC",
    "CARD_PATHS",
    "MEDIA_PATH",
    "PNG_SIGNATURE",
    "QPS_LIMIT_CODE",
    "Call",
    "FailureKind",
    "FakeCard",
    "FakeDingTalk",
    "SentMessage",
    "UploadedMedia",
    "bot_message",
]


class FakeDingTalk(DingTalkObservation, DingTalkStream, DingTalkCardAPI, DingTalkRobot, DingTalkMedia):
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
        self.departments: dict[str, list[int]] = {}
        """Direct department ids of each staff id, as ``topapi/v2/user/get`` answers them; others: no such user."""
        self.contact_permission = True
        """False answers ``topapi/v2/user/get`` like an app without 成员信息读权限 (qyapi_get_member)."""
        self.media: dict[str, UploadedMedia] = {}
        """Files the media upload accepted, by ``media_id``, in upload order."""
        self._valid_tokens: set[str] = set()
        self._tickets: set[str] = set()
        self._limits = DingTalkLimits(self)
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
        self._limits.script(path, kind, times)

    def expire_tokens(self) -> None:
        """Every token issued so far becomes invalid (the next OpenAPI call answers 401)."""
        self._valid_tokens.clear()

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
        failure = self._limits.next_failure(request.path)
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
        elif card and self._limits.card_over_qps(call.at):
            response = web.json_response({"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r2"}, status=403)
        call.status = response.status if response is not None else 200
        return call, response

    async def _bad_request(self, call: Call, body: dict[str, Any]) -> web.Response:
        """Refuse ``call`` with HTTP 400 and DingTalk's error ``body``, as a card API call it cannot take."""
        call.status = 400
        await self._notify()
        return web.json_response(body, status=400)

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
