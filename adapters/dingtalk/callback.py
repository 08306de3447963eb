"""HTTP callback mode (outgoing robot): DingTalk POSTs each message to our URL.

Every request carries ``timestamp`` (ms) and ``sign`` headers; ``sign`` is the
base64 of HMAC-SHA256 over ``timestamp + "\\n" + appSecret``, keyed with the
app secret. The protocol signs only the timestamp, not the body, so a captured
pair would carry any body while its timestamp is accepted. Hence two checks
before the body is looked at: the clock skew is small (``callback_max_skew_s``,
five minutes by default), and each pair is used once (``first_use`` claims it
in the Store, which replicas share). Accepted messages are handed over at once
and answered with an empty 200, so DingTalk never waits for the turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

__all__ = ["MAX_SKEW_S", "CallbackServer", "FirstUse", "MessageHandler", "SignatureError", "replay_key", "sign", "verify_signature"]

log = structlog.get_logger(__name__)

MAX_SKEW_S = 300.0
"""Largest accepted difference between DingTalk's timestamp and our clock, by default (``callback_max_skew_s``)."""


class SignatureError(Exception):
    """A callback request failed verification; the message says why, never the secret."""


def sign(timestamp: str, secret: str) -> str:
    """The ``sign`` header DingTalk sends with ``timestamp`` for an app ``secret``."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify_signature(
    timestamp: str | None,
    signature: str | None,
    secret: str,
    *,
    now_s: float | None = None,
    max_skew_s: float = MAX_SKEW_S,
) -> None:
    """Raise :class:`SignatureError` unless ``signature`` is valid for ``timestamp`` and the skew is small."""
    if not timestamp or not signature:
        raise SignatureError("missing the timestamp or sign header")
    try:
        sent_ms = int(timestamp)
    except ValueError:
        raise SignatureError("the timestamp header is not a number of milliseconds") from None
    now = time.time() if now_s is None else now_s
    skew = abs(now - sent_ms / 1000)
    if skew > max_skew_s:
        raise SignatureError(f"the timestamp is {skew:.0f} s away from our clock (at most {max_skew_s:.0f} s); check the server's clock")
    if not hmac.compare_digest(sign(timestamp, secret), signature):
        raise SignatureError("the signature does not match; check adapters.dingtalk.client_secret")


def replay_key(timestamp: str, signature: str) -> str:
    """The key a signed pair is claimed under (the Store prefixes the platform)."""
    return f"sign:{timestamp}:{signature}"


MessageHandler = Callable[[dict[str, Any]], Awaitable[None]]

FirstUse = Callable[[str], Awaitable[bool]]
"""True the first time a :func:`replay_key` is seen, by any replica, within twice the allowed skew."""


class CallbackServer:
    """An aiohttp server receiving outgoing-robot callbacks at ``path``."""

    def __init__(
        self,
        *,
        secret: str,
        on_message: MessageHandler,
        first_use: FirstUse,
        max_skew_s: float = MAX_SKEW_S,
        host: str = "0.0.0.0",
        port: int = 8090,
        path: str = "/dingtalk/callback",
        clock: Callable[[], float] = time.time,
        reuse_port: bool = False,
    ) -> None:
        """``reuse_port``: bind with ``SO_REUSEPORT``, so the worker processes of one host share ``port``."""
        self._secret = secret
        self._on_message = on_message
        self._first_use = first_use
        self._max_skew_s = max_skew_s
        self._host = host
        self._port = port
        self._path = path
        self._clock = clock
        self._reuse_port = reuse_port
        self._runner: web.AppRunner | None = None
        self.url = ""
        """The bound URL once started (with the real port when ``port`` was 0)."""

    def app(self) -> web.Application:
        """The aiohttp application (for embedding in another server)."""
        app = web.Application()
        app.router.add_post(self._path, self._handle)
        return app

    async def start(self) -> str:
        """Listen; returns the callback URL."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_port=self._reuse_port or None)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise ValueError(
                f"cannot listen on {self._host}:{self._port} for DingTalk callbacks ({exc.strerror or exc}); "
                "change adapters.dingtalk.http_port"
            ) from None
        port = self._runner.addresses[0][1]
        self.url = f"http://{self._host}:{port}{self._path}"
        log.info("dingtalk.callback_listening", url=self.url)
        return self.url

    @property
    def listening(self) -> bool:
        """Whether it is listening now (started, not stopped)."""
        return self._runner is not None

    async def stop(self) -> None:
        """Stop listening (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        timestamp, signature = request.headers.get("timestamp"), request.headers.get("sign")
        try:
            verify_signature(timestamp, signature, self._secret, now_s=self._clock(), max_skew_s=self._max_skew_s)
            if not await self._first_use(replay_key(str(timestamp), str(signature))):
                raise SignatureError("this timestamp and sign were already used: a request is signed for one use only")
        except SignatureError as exc:
            log.warning("dingtalk.callback_rejected", reason=str(exc), remote=request.remote)
            return web.json_response({"errcode": 401, "errmsg": str(exc)}, status=401)
        try:
            payload = json.loads(await request.text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"errcode": 400, "errmsg": "the body is not JSON"}, status=400)
        if not isinstance(payload, dict):
            return web.json_response({"errcode": 400, "errmsg": "the body is not a JSON object"}, status=400)
        try:
            await self._on_message(payload)
        except Exception as exc:  # the message is dropped, the platform must still get its answer
            log.exception("dingtalk.callback_failed", error=type(exc).__name__)
            return web.json_response({"errcode": 500, "errmsg": "internal error"}, status=500)
        return web.json_response({})
