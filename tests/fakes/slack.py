"""A fake Slack on loopback: the Web API methods botgateway uses and a Socket Mode websocket.

The real ``slack_sdk`` / ``slack_bolt`` are pointed at it through base URLs. It
behaves like Slack where it matters for the card pipeline:

* every Web API call is recorded (:attr:`FakeSlack.calls`) with its arguments;
* messages live in a small store, so ``chat.update`` of an unknown ts answers
  ``message_not_found`` and tests can read the final text of each message;
* per-method rate limits (a sliding window of N accepted calls per W seconds,
  scoped per workspace or per channel like Slack's tiers: ``chat.update`` Tier 3,
  ``chat.startStream`` Tier 2, ``chat.appendStream`` Tier 4, ``chat.postMessage``
  per channel; tests pass scaled-down windows) answer either
  ``ok:false, error: ratelimited`` bodies or HTTP 429 with ``Retry-After``;
* a channel's new messages (``channel_limit``: about one a second with short
  bursts, :data:`SLACK_CHANNEL_MESSAGES`) are counted together, whatever method
  makes them: ``chat.postMessage`` and, unless ``stream_starts_per_channel`` is
  off, ``chat.startStream``, in threads too; past the window, the same throttle;
* ``reactions.add`` keeps each message's reactions (:attr:`FakeSlack.reactions`);
* ``fail(method, ...)`` injects errors (``ok:false`` codes, HTTP 5xx);
* ``chat.startStream`` / ``appendStream`` / ``stopStream`` keep the streamed
  markdown and task updates of a message; ``chat.delete`` removes a message
  (kept in :attr:`FakeSlack.deleted`);
* a button press (:meth:`FakeSlack.block_action`) carries a fresh ``trigger_id``
  that ``views.open`` accepts once, within 3 s, like Slack's; the opened modal
  is kept (:attr:`FakeSlack.views`) and :meth:`FakeSlack.view_submission`
  builds what Slack sends when it is submitted;
* ``files.getUploadURLExternal``, the upload URL it hands out (served here) and
  ``files.completeUploadExternal`` check a chart's two-step upload and keep the
  files shared into each thread (:attr:`FakeSlack.files`, :mod:`tests.fakes.slack_files`);
* ``usergroups.users.list`` answers the members of :attr:`FakeSlack.usergroups`
  (``missing_scope`` while :attr:`FakeSlack.usergroups_readable` is off);
* ``apps.connections.open`` hands out a ``ws://127.0.0.1:…`` URL served here;
  :meth:`FakeSlack.push` sends an envelope and :meth:`FakeSlack.wait_ack`
  waits for the app's acknowledgement of that ``envelope_id``;
* :meth:`FakeSlack.watch` calls back on every accepted change of a message
  (with the moment it became visible) and :meth:`FakeSlack.method_counts`
  splits the calls of each method into accepted, throttled and failed, for the
  benchmark.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import math
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

from tests.fakes.slack_files import FakeSlackFiles

BOT_TOKEN = "xoxb-fake-bot-token"
ANSWER_BLOCK = "botgateway_answer"
"""The ``block_id`` botgateway gives a final answer's Refresh and feedback buttons (its live buttons are others)."""
TRIGGER_TTL_S = 3.0
"""A ``trigger_id`` opens a modal within this long after its interaction, once (Slack's rule)."""
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
MESSAGE_METHODS = ("chat.postMessage", "chat.startStream")
"""Methods that make a new message in a channel (``chat.startStream`` only while stream starts are counted)."""


@dataclass(frozen=True)
class Window:
    """A rate limit: at most ``calls`` accepted calls in any ``seconds`` window."""

    calls: int
    """Calls allowed in the window."""
    seconds: float
    """Window length."""
    scope: Literal["workspace", "channel"] = "workspace"
    """What the window is counted per (Slack's ``chat.postMessage`` special limit is per channel)."""


SLACK_CHANNEL_MESSAGES = Window(3, 3.0, "channel")
"""Slack's limit on a channel's new messages as the fake models it: about one a second, bursts of three."""


@dataclass
class Call:
    """One recorded Web API call."""

    method: str
    """Web API method name (``chat.update``)."""
    args: dict[str, Any]
    """Arguments (JSON body, form body and query merged; ``token`` removed)."""
    at: float
    """When the call arrived (the fake's clock: monotonic unless a test gave its own)."""
    ok: bool = True
    """Whether the fake answered ``ok: true``."""
    error: str = ""
    """The ``error`` code answered, if any."""
    status: int = 200
    """HTTP status answered."""


@dataclass
class Message:
    """A message the bot posted (or a stream it started)."""

    channel: str
    """Channel id."""
    ts: str
    """Message ts."""
    thread_ts: str | None
    """Thread it was posted in."""
    text: str = ""
    """Current ``text`` (for streams: the markdown streamed so far)."""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    """Current blocks."""
    streaming: bool = False
    """True while a ``chat.startStream`` stream is open."""
    stream: bool = False
    """True if the message was created by ``chat.startStream``."""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Latest task update per task id (streams)."""
    chunks: list[dict[str, Any]] = field(default_factory=list)
    """Every chunk appended, in order (streams)."""
    versions: list[str] = field(default_factory=list)
    """Every text the message showed, oldest first."""
    stop_blocks: list[dict[str, Any]] = field(default_factory=list)
    """Blocks given to ``chat.stopStream``."""

    def markdown(self) -> str:
        """The text of the message's first markdown/section block (or ``text``)."""
        for block in self.blocks:
            if block.get("type") == "markdown":
                return str(block.get("text", ""))
            if block.get("type") == "section" and isinstance(block.get("text"), dict):
                return str(block["text"].get("text", ""))
        return self.text

    def buttons(self) -> list[dict[str, Any]]:
        """Button elements of the message's action blocks while it is live (Stop, Approve, Deny): a final answer's
        Refresh and feedback buttons are :meth:`answer_buttons`."""
        found: list[dict[str, Any]] = []
        for block in [*self.blocks, *self.stop_blocks]:
            if block.get("type") == "actions" and not str(block.get("block_id", "")).startswith(ANSWER_BLOCK):
                found.extend(e for e in block.get("elements", []) if e.get("type") == "button")
        return found

    def answer_buttons(self) -> dict[str, dict[str, Any]]:
        """A final answer's Refresh and feedback elements by ``action_id`` (buttons, Slack's ``feedback_buttons``)."""
        found: dict[str, dict[str, Any]] = {}
        for block in [*self.blocks, *self.stop_blocks]:
            if str(block.get("block_id", "")).startswith(ANSWER_BLOCK):
                found.update((str(e.get("action_id")), e) for e in block.get("elements", []))
        return found


@dataclass
class Failure:
    """An injected failure for the next calls of one method."""

    error: str = "internal_error"
    """``error`` code answered in the body."""
    status: int = 200
    """HTTP status (5xx for server errors, 429 for throttling)."""
    retry_after: float | None = None
    """``Retry-After`` header, if any."""
    remaining: int = 1
    """How many calls still fail."""
    body: str | None = None
    """Raw body instead of JSON (for broken proxies)."""


class FakeSlack:
    """The fake Slack server. ``await start()`` → Web API base URL (``http://127.0.0.1:PORT/api/``)."""

    def __init__(
        self,
        *,
        team_id: str = "T0001",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        limits: Mapping[str, Window] | None = None,
        limit_style: Literal["body", "http429"] = "http429",
        retry_after: float = 1.0,
        streaming_enabled: bool = True,
        latency_s: float = 0.0,
        channel_limit: Window | None = None,
        stream_starts_per_channel: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` times the calls and counts the rate windows (a test's virtual clock; default: monotonic)."""
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.limits: dict[str, Window] = dict(limits or {})
        """Method → window. Change freely between calls."""
        self.limit_style = limit_style
        """How throttling is answered: ``ok:false ratelimited`` (HTTP 200) or HTTP 429 + Retry-After."""
        self.retry_after = retry_after
        """Seconds advertised in ``Retry-After``."""
        self.streaming_enabled = streaming_enabled
        """False makes ``chat.startStream`` answer ``not_allowed_token_type`` like a workspace without AI features."""
        self.latency_s = latency_s
        """Delay before every Web API answer (simulates a slow Slack)."""
        self.channel_limit = channel_limit
        """New messages one channel takes, whatever method makes them (None: not limited beyond ``limits``)."""
        self.stream_starts_per_channel = stream_starts_per_channel
        """Whether ``chat.startStream`` counts as one of its channel's new messages."""
        self._clock = clock
        self.reactions: dict[tuple[str, str], list[str]] = defaultdict(list)
        """Reactions added per (channel, ts) of a message, in order (``reactions.add``)."""
        self.user_names: dict[str, str] = {"U1": "alice", "U2": "bob"}
        """Display names ``users.info`` knows."""
        self.usergroups: dict[str, list[str]] = {}
        """User ids of each user group (``S0ONCALL``) that ``usergroups.users.list`` knows; others: ``no_such_subteam``."""
        self.usergroups_readable = True
        """False answers ``usergroups.users.list`` with ``missing_scope``, like an app without ``usergroups:read``."""
        self.socket_enabled = True
        """False refuses websocket connections (a proxy that blocks them)."""
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], Message] = {}
        self.deleted: list[Message] = []
        """Messages removed with ``chat.delete``, in order."""
        self.ephemerals: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        """Modals opened with ``views.open`` (each view as sent, with the ``id`` given to it), in order."""
        self._triggers: dict[str, tuple[float, str]] = {}
        self.acks: dict[str, dict[str, Any]] = {}
        self.sockets: list[web.WebSocketResponse] = []
        self._accepted: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._failures: dict[str, deque[Failure]] = defaultdict(deque)
        self._ts = itertools.count(1)
        self._ack_events: dict[str, asyncio.Event] = {}
        self._connected = asyncio.Event()
        self._call_event = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._watchers: list[Callable[[Message, str, float], None]] = []
        self.base = ""
        self.files = FakeSlackFiles(lambda: self.base, self.new_ts, self._call_event.set)
        """Uploads: the files shared into each channel and thread, and the upload URL's failures."""

    # --- lifecycle -------------------------------------------------------------

    async def start(self) -> str:
        """Serve on an ephemeral loopback port; returns the Web API base URL."""
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        self.files.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"
        return f"{self.base}/api/"

    async def stop(self) -> None:
        """Close sockets and the server."""
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        """Web API base URL (with trailing slash, as slack_sdk expects)."""
        return f"{self.base}/api/"

    # --- test controls -------------------------------------------------------------

    def fail(self, method: str, error: str = "internal_error", *, status: int = 200, times: int = 1,
             retry_after: float | None = None, body: str | None = None) -> None:
        """Make the next ``times`` calls of ``method`` fail with ``error`` / ``status``."""
        self._failures[method].append(Failure(error, status, retry_after, times, body))

    def calls_of(self, method: str) -> list[Call]:
        """Recorded calls of one method."""
        return [c for c in self.calls if c.method == method]

    def throttled(self, method: str | None = None) -> list[Call]:
        """Calls answered with a throttle (ratelimited body or HTTP 429)."""
        return [c for c in self.calls if (method is None or c.method == method) and (c.error == "ratelimited" or c.status == 429)]

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """Bot messages in a thread, oldest first."""
        found = [m for m in self.messages.values() if m.channel == channel and m.thread_ts == thread_ts]
        return sorted(found, key=lambda m: float(m.ts))

    def channel_messages(self, channel: str) -> list[Message]:
        """Bot messages in a channel, oldest first."""
        return sorted((m for m in self.messages.values() if m.channel == channel), key=lambda m: float(m.ts))

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` is true, re-checking after every Web API call and Socket Mode (dis)connection."""
        async def check() -> None:
            while not predicate():
                self._call_event.clear()
                await self._call_event.wait()

        await asyncio.wait_for(check(), timeout)

    def watch(self, callback: Callable[[Message, str, float], None]) -> None:
        """Call ``callback(message, change, at)`` after every accepted change of a bot message.

        ``change`` is the method's verb (``postMessage``, ``update``, ``delete``,
        ``startStream``, ``appendStream``, ``stopStream``); ``at`` is the
        ``time.monotonic()`` moment the change became visible (after the
        simulated latency). A deleted message is passed as it was.
        """
        self._watchers.append(callback)

    def _tell_watchers(self, msg: Message, change: str) -> None:
        at = time.monotonic()
        for callback in self._watchers:
            callback(msg, change, at)

    def method_counts(self) -> dict[str, dict[str, int]]:
        """Per method: calls ``accepted`` (ok), ``throttled`` (ratelimited / HTTP 429) and ``failed`` (any other error)."""
        counts: dict[str, dict[str, int]] = defaultdict(lambda: {"accepted": 0, "throttled": 0, "failed": 0})
        for call in self.calls:
            if call.error == "ratelimited" or call.status == 429:
                counts[call.method]["throttled"] += 1
            elif call.ok:
                counts[call.method]["accepted"] += 1
            else:
                counts[call.method]["failed"] += 1
        return dict(counts)

    def max_in_window(self, method: str, seconds: float, key: str | None = None) -> int:
        """Most accepted calls of ``method`` in any window of ``seconds`` (from the recorded calls)."""
        times = [c.at for c in self.calls if c.method == method and c.ok]
        best, lo = 0, 0
        for hi, t in enumerate(times):
            while t - times[lo] >= seconds:
                lo += 1
            best = max(best, hi - lo + 1)
        return best

    def new_ts(self) -> str:
        """A fresh, increasing message ts."""
        return f"{int(time.time())}.{next(self._ts):06d}"

    # --- Socket Mode ----------------------------------------------------------------

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

    def event_payload(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """An Events API ``event_callback`` body around ``event``."""
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": "A0001",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}],
        }

    def mention(self, text: str, *, user: str = "U1", channel: str = "C1", ts: str | None = None,
                thread_ts: str | None = None) -> dict[str, Any]:
        """An ``app_mention`` event (``text`` gets the bot mention prepended)."""
        event = {"type": "app_mention", "user": user, "text": f"<@{self.bot_user_id}> {text}", "ts": ts or self.new_ts(),
                 "channel": channel, "team": self.team_id, "event_ts": ts or ""}
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def message(self, text: str, *, user: str = "U1", channel: str = "C1", channel_type: str = "channel",
                ts: str | None = None, thread_ts: str | None = None, **extra: Any) -> dict[str, Any]:
        """A ``message`` event."""
        event = {"type": "message", "user": user, "text": text, "ts": ts or self.new_ts(), "channel": channel,
                 "channel_type": channel_type, "team": self.team_id, **extra}
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def block_action(self, *, user: str, channel: str, message_ts: str, action_id: str, value: str,
                     thread_ts: str | None = None, action_type: str = "button",
                     block_id: str = "botgateway_stop") -> dict[str, Any]:
        """A ``block_actions`` interactive payload for a button press (``action_type``: ``feedback_buttons`` for one
        of Slack's feedback buttons, whose ``value`` is the pressed one's), with a fresh ``trigger_id``."""
        trigger_id = f"{next(self._ts)}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:16]}"
        self._triggers[trigger_id] = (time.monotonic(), user)
        return {
            "type": "block_actions",
            "team": {"id": self.team_id, "domain": "fake"},
            "user": {"id": user, "username": user, "team_id": self.team_id},
            "api_app_id": "A0001",
            "token": "verification-token",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False},
            "trigger_id": trigger_id,
            "channel": {"id": channel, "name": "ops"},
            "message": {"ts": message_ts, "thread_ts": thread_ts, "type": "message", "bot_id": self.bot_id},
            "response_url": f"{self.base}/response",
            "actions": [{"action_id": action_id, "block_id": block_id, "value": value, "type": action_type,
                         "action_ts": f"{time.time():.6f}"}],
        }

    def view_submission(self, view: dict[str, Any], *, user: str, values: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The ``view_submission`` payload of an opened modal (from :attr:`views`) submitted by ``user``.

        ``values``: ``{block_id: {action_id: value}}``; a plain-text input left empty is ``None``, as Slack sends it.
        """
        state = {block: {action: {"type": "plain_text_input", "value": value} for action, value in actions.items()}
                 for block, actions in values.items()}
        return {
            "type": "view_submission",
            "team": {"id": self.team_id, "domain": "fake"},
            "user": {"id": user, "username": user, "name": user, "team_id": self.team_id},
            "api_app_id": "A0001",
            "token": "verification-token",
            "trigger_id": f"{next(self._ts)}.{uuid.uuid4().hex[:12]}",
            "view": {**view, "state": {"values": state}, "team_id": self.team_id, "app_id": "A0001",
                     "bot_id": self.bot_id, "hash": uuid.uuid4().hex[:12]},
            "response_urls": [],
            "is_enterprise_install": False,
        }

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

    # --- HTTP Events API helper -------------------------------------------------

    @staticmethod
    def sign(body: str | bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
        """Headers Slack sends with an HTTP event: timestamp and ``v0=`` HMAC signature (of the raw bytes)."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        raw = body.encode() if isinstance(body, str) else body
        digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}", "Content-Type": "application/json"}

    # --- Web API ---------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        raw = await request.text()
        if raw:
            if request.content_type == "application/json":
                args.update(json.loads(raw))
            else:
                args.update(dict(parse_qsl(raw, keep_blank_values=True)))
        for key in ("blocks", "chunks", "prompts", "metadata"):
            if isinstance(args.get(key), str):
                try:
                    args[key] = json.loads(args[key])
                except ValueError:
                    pass
        token = args.pop("token", None) or request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        call = Call(method, args, self._clock())
        self.calls.append(call)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return self._answer(call, method, args, token)
        finally:
            self._call_event.set()

    def _reply(self, call: Call, body: dict[str, Any] | None = None, *, error: str = "", status: int = 200,
               headers: dict[str, str] | None = None, raw: str | None = None) -> web.Response:
        call.ok = not error and status == 200
        call.error = error
        call.status = status
        if raw is not None:
            return web.Response(status=status, text=raw, content_type="text/html", headers=headers)
        payload = {"ok": False, "error": error} if error else {"ok": True, **(body or {})}
        return web.json_response(payload, status=status, headers=headers)

    def _answer(self, call: Call, method: str, args: dict[str, Any], token: str) -> web.Response:
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != expected:
            return self._reply(call, error="invalid_auth" if token else "not_authed")
        failures = self._failures.get(method)
        if failures:
            failure = failures[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.popleft()
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else None
            return self._reply(call, error=failure.error, status=failure.status, headers=headers, raw=failure.body)
        window = self.limits.get(method)
        if window is not None:
            scope = str(args.get("channel", "")) if window.scope == "channel" else self.team_id
            throttle = self._over(call, window, (method, scope))
            if throttle is not None:
                return throttle
        if self.channel_limit is not None and self._makes_message(method):
            throttle = self._over(call, self.channel_limit, ("messages", str(args.get("channel", ""))))
            if throttle is not None:
                return throttle
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return self._reply(call, error="unknown_method")
        result = handler(args)
        if isinstance(result, str):
            return self._reply(call, error=result)
        return self._reply(call, result)

    def _makes_message(self, method: str) -> bool:
        return method in MESSAGE_METHODS and (method != "chat.startStream" or self.stream_starts_per_channel)

    def _over(self, call: Call, window: Window, key: tuple[str, str]) -> web.Response | None:
        """The throttle answer when ``call`` is past ``window`` counted under ``key``; else None (the call counts)."""
        accepted = self._accepted[key]
        while accepted and call.at - accepted[0] >= window.seconds:
            accepted.popleft()
        if len(accepted) < window.calls:
            accepted.append(call.at)
            return None
        retry = max(0.05, window.seconds - (call.at - accepted[0]))
        if self.limit_style == "http429":
            # Whole seconds, rounded up like Slack's: rounding down would invite a retry that is throttled again.
            return self._reply(call, error="ratelimited", status=429, headers={"Retry-After": str(math.ceil(retry))})
        return self._reply(call, error="ratelimited")

    # Each _m_<method> returns a body dict (ok) or an error code string.

    def _m_reactions_add(self, args: dict[str, Any]) -> dict[str, Any] | str:
        channel, ts, name = str(args.get("channel") or ""), str(args.get("timestamp") or ""), str(args.get("name") or "")
        if not channel or not ts or not name:
            return "invalid_arguments" if channel else "channel_not_found"
        if name in self.reactions[(channel, ts)]:
            return "already_reacted"
        self.reactions[(channel, ts)].append(name)
        return {}

    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any] | str:
        return {"url": "https://fake.slack.com/", "team": "Fake", "user": "botgateway", "team_id": self.team_id,
                "user_id": self.bot_user_id, "bot_id": self.bot_id, "is_enterprise_install": False}

    def _m_users_info(self, args: dict[str, Any]) -> dict[str, Any] | str:
        user = str(args.get("user") or "")
        name = self.user_names.get(user)
        if name is None:
            return "user_not_found"
        return {"user": {"id": user, "name": name.lower(), "real_name": name, "profile": {"display_name": name}}}

    def _m_usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any] | str:
        if not self.usergroups_readable:
            return "missing_scope"
        users = self.usergroups.get(str(args.get("usergroup") or ""))
        if users is None:
            return "no_such_subteam"
        return {"users": list(users)}

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any] | str:
        return {"url": f"{self.base.replace('http://', 'ws://')}/socket?ticket=valid"}

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any] | str:
        channel = args.get("channel")
        if not channel:
            return "channel_not_found"
        text = str(args.get("text") or "")
        blocks = args.get("blocks") or []
        if not text and not blocks:
            return "no_text"
        if len(text) > 40000:
            return "msg_too_long"
        if _blocks_too_long(blocks):
            return "invalid_blocks"
        ts = self.new_ts()
        msg = Message(channel, ts, args.get("thread_ts") or None, text, list(blocks))
        msg.versions.append(msg.markdown())
        self.messages[(channel, ts)] = msg
        self._tell_watchers(msg, "postMessage")
        return {"channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self.messages.get((str(args.get("channel")), str(args.get("ts"))))
        if msg is None:
            return "message_not_found"
        if msg.streaming:
            return "cant_update_message"
        text = str(args.get("text") or "")
        blocks = args.get("blocks")
        if len(text) > 40000:
            return "msg_too_long"
        if blocks is not None and _blocks_too_long(blocks):
            return "invalid_blocks"
        msg.text = text
        if blocks is not None:
            msg.blocks = list(blocks)
        msg.versions.append(msg.markdown())
        self._tell_watchers(msg, "update")
        return {"channel": msg.channel, "ts": msg.ts, "text": text}

    def _m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self.messages.pop((str(args.get("channel")), str(args.get("ts"))), None)
        if msg is None:
            return "message_not_found"
        self.deleted.append(msg)
        self._tell_watchers(msg, "delete")
        return {"channel": msg.channel, "ts": msg.ts}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any] | str:
        self.ephemerals.append(args)
        return {"message_ts": self.new_ts()}

    def _m_views_open(self, args: dict[str, Any]) -> dict[str, Any] | str:
        trigger = self._triggers.pop(str(args.get("trigger_id") or ""), None)
        if trigger is None:
            return "invalid_trigger_id" if not args.get("trigger_id") else "trigger_exchanged"
        if time.monotonic() - trigger[0] > TRIGGER_TTL_S:
            return "expired_trigger_id"
        view = args.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                return "invalid_arguments"
        if not isinstance(view, dict) or view.get("type") != "modal" or not isinstance(view.get("blocks"), list):
            return "invalid_arguments"
        title = (view.get("title") or {}).get("text", "")
        if not title or len(title) > 24 or len(str(view.get("private_metadata") or "")) > 3000:
            return "invalid_arguments"
        opened = {**view, "id": f"V{uuid.uuid4().hex[:10].upper()}", "opened_by": trigger[1]}
        self.views.append(opened)
        return {"view": opened}

    def _m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        if not self.streaming_enabled:
            return "not_allowed_token_type"
        channel = str(args.get("channel") or "")
        if not channel:
            return "channel_not_found"
        if not args.get("thread_ts"):
            return "invalid_arguments"
        if channel.startswith("C") and not (args.get("recipient_user_id") and args.get("recipient_team_id")):
            return "missing_recipient_user_id"
        ts = self.new_ts()
        msg = Message(channel, ts, str(args["thread_ts"]), streaming=True, stream=True)
        self.messages[(channel, ts)] = msg
        error = self._append(msg, args)
        if error:
            return error
        self._tell_watchers(msg, "startStream")
        return {"channel": channel, "ts": ts}

    def _m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self._append_to_live_stream(args)
        if isinstance(msg, str):
            return msg
        self._tell_watchers(msg, "appendStream")
        return {"channel": msg.channel, "ts": msg.ts}

    def _m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any] | str:
        msg = self._append_to_live_stream(args)
        if isinstance(msg, str):
            return msg
        msg.streaming = False
        msg.stop_blocks = list(args.get("blocks") or [])
        self._tell_watchers(msg, "stopStream")
        return {"channel": msg.channel, "ts": msg.ts, "message": {"text": msg.text}}

    def _append_to_live_stream(self, args: dict[str, Any]) -> Message | str:
        """The streaming message ``args`` names, after appending its chunks; else Slack's error code."""
        msg = self.messages.get((str(args.get("channel")), str(args.get("ts"))))
        if msg is None:
            return "message_not_found"
        if not msg.streaming:
            return "message_not_in_streaming_state"
        return self._append(msg, args) or msg

    def _append(self, msg: Message, args: dict[str, Any]) -> str:
        text = args.get("markdown_text")
        if text is not None and len(str(text)) > 12000:
            return "msg_too_long"
        if text:
            msg.text += str(text)
            msg.chunks.append({"type": "markdown_text", "text": str(text)})
        for chunk in args.get("chunks") or []:
            msg.chunks.append(chunk)
            if chunk.get("type") == "markdown_text":
                msg.text += str(chunk.get("text", ""))
            elif chunk.get("type") == "task_update":
                msg.tasks[str(chunk.get("id"))] = chunk
        msg.versions.append(msg.text)
        return ""

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any] | str:
        return self.files.m_get_upload_url(args)

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any] | str:
        return self.files.m_complete(args)

    def _m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any] | str:
        if not args.get("channel_id") or not args.get("thread_ts"):
            return "invalid_arguments"
        return {}

    def _m_assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any] | str:
        prompts = args.get("prompts")
        if not args.get("channel_id") or not isinstance(prompts, list) or not prompts:
            return "invalid_arguments"
        if any(not p.get("title") or not p.get("message") for p in prompts):
            return "invalid_arguments"
        return {}


def _blocks_too_long(blocks: Any) -> bool:
    """Slack rejects markdown blocks over 12,000 characters (a message's together) and section text over 3,000."""
    if not isinstance(blocks, list):
        return True
    if sum(len(str(b.get("text", ""))) for b in blocks if b.get("type") == "markdown") > 12000:
        return True
    for block in blocks:
        if block.get("type") == "markdown" and len(str(block.get("text", ""))) > 12000:
            return True
        if block.get("type") == "section" and len(str((block.get("text") or {}).get("text", ""))) > 3000:
            return True
    return False
