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

The parts live in their own modules: the throttling model in
:mod:`tests.fakes.slack_limits`, the message store and ``chat.*`` methods in
:mod:`tests.fakes.slack_messages`, Socket Mode in :mod:`tests.fakes.slack_socket`,
event payloads and signatures in :mod:`tests.fakes.slack_payloads`, button
presses and modals in :mod:`tests.fakes.slack_interactions`. Their public names
are importable from here too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl

from aiohttp import web

from tests.fakes.slack_files import FakeSlackFiles
from tests.fakes.slack_interactions import TRIGGER_TTL_S, SlackInteractions
from tests.fakes.slack_limits import MESSAGE_METHODS, SLACK_CHANNEL_MESSAGES, Failure, SlackLimits, Window
from tests.fakes.slack_messages import ANSWER_BLOCK, Message, SlackChatMethods
from tests.fakes.slack_payloads import SIGNING_SECRET, SlackEvents
from tests.fakes.slack_socket import SlackSocketMode

__all__ = [
    "ANSWER_BLOCK",
    "APP_TOKEN",
    "BOT_TOKEN",
    "MESSAGE_METHODS",
    "SIGNING_SECRET",
    "SLACK_CHANNEL_MESSAGES",
    "TRIGGER_TTL_S",
    "Call",
    "Failure",
    "FakeSlack",
    "Message",
    "Window",
]

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"


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


class FakeSlack(SlackChatMethods, SlackInteractions, SlackSocketMode, SlackEvents):
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
        self.calls: list[Call] = []
        self._init_messages()
        self._init_interactions()
        self._init_socket_mode()
        self._limits = SlackLimits(self)
        self._ts = itertools.count(1)
        self._call_event = asyncio.Event()
        self._runner: web.AppRunner | None = None
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
        self._limits.script(method, Failure(error, status, retry_after, times, body))

    def calls_of(self, method: str) -> list[Call]:
        """Recorded calls of one method."""
        return [c for c in self.calls if c.method == method]

    def throttled(self, method: str | None = None) -> list[Call]:
        """Calls answered with a throttle (ratelimited body or HTTP 429)."""
        return [c for c in self.calls if (method is None or c.method == method) and (c.error == "ratelimited" or c.status == 429)]

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` is true, re-checking after every Web API call and Socket Mode (dis)connection."""
        async def check() -> None:
            while not predicate():
                self._call_event.clear()
                await self._call_event.wait()

        await asyncio.wait_for(check(), timeout)

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
        refusal = self._limits.refusal(method, args, call.at)
        if refusal is not None:
            headers = {"Retry-After": str(refusal.retry_after)} if refusal.retry_after is not None else None
            return self._reply(call, error=refusal.error, status=refusal.status, headers=headers, raw=refusal.body)
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return self._reply(call, error="unknown_method")
        result = handler(args)
        if isinstance(result, str):
            return self._reply(call, error=result)
        return self._reply(call, result)

    # Each _m_<method> returns a body dict (ok) or an error code string; chat.*, views.open and
    # apps.connections.open are the mixins'.

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
