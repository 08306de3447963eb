"""Connecting one Slack app: check its bot token, then open Socket Mode or serve the HTTP Events API.

Socket Mode (default) needs the bot token and an app-level token; HTTP mode
serves the Events API with aiohttp and checks each request's signature and
body (:mod:`adapters.slack.verify`) before bolt sees it. Every failure to
start is a :class:`SlackStartError` whose message says what to fix.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from adapters.slack.errors import classify, slack_error_code
from adapters.slack.verify import RejectedRequest, check_signature
from adapters.slack.verify import bolt_request as verified_bolt_request

if TYPE_CHECKING:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig

__all__ = [
    "AckFirstSocketModeHandler", "SlackStartError", "check_bot_token", "close_socket", "open_socket", "serve_http",
    "socket_connected",
]

log = structlog.get_logger(__name__)

_REJECTED_BOT_TOKEN = frozenset({"invalid_auth", "not_authed", "token_revoked", "account_inactive"})
_REJECTED_APP_TOKEN = frozenset({"invalid_auth", "not_authed", "token_revoked"})


class SlackStartError(Exception):
    """The adapter cannot start (missing or rejected tokens); the message says what to fix."""


class AckFirstSocketModeHandler(AsyncSocketModeHandler):
    """Acknowledge every envelope before any processing, so Slack's 3 s limit holds whatever a listener does."""

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        await run_async_bolt_app(self.app, req)


async def check_bot_token(client: AsyncWebClient, config: SlackConfig) -> AuthorizeResult:
    """The app's identity from ``auth.test``, as bolt's ``authorize`` hands it to listeners."""
    if not config.bot_token.get_secret_value():
        raise SlackStartError("adapters.slack.bot_token is empty: set it to the app's xoxb-… bot token (for example ${SLACK_BOT_TOKEN})")
    try:
        auth = await client.auth_test()
    except Exception as exc:
        rejected = slack_error_code(exc) in _REJECTED_BOT_TOKEN
        hint = "the bot token was rejected; reinstall the app and copy the Bot User OAuth Token" if rejected else str(classify(exc))
        raise SlackStartError(f"Slack auth.test failed: {hint}") from None
    return AuthorizeResult(
        enterprise_id=auth.get("enterprise_id"),
        team_id=str(auth.get("team_id") or ""),
        bot_user_id=str(auth.get("user_id") or ""),
        bot_id=str(auth.get("bot_id") or ""),
        bot_token=config.bot_token.get_secret_value(),
    )


async def open_socket(
    app: AsyncApp, client: AsyncWebClient, config: SlackConfig, *, connect_timeout_s: float
) -> AckFirstSocketModeHandler:
    """A connected Socket Mode handler serving ``app``; fails instead of retrying forever."""
    app_token = config.app_token.get_secret_value()
    if not app_token.startswith("xapp-"):
        raise SlackStartError("adapters.slack.app_token must be the app-level token (xapp-…) with the connections:write scope; "
                              "create it under Basic Information → App-Level Tokens, or set mode: http")
    try:
        opened = await client.apps_connections_open(app_token=app_token)
    except Exception as exc:
        rejected = slack_error_code(exc) in _REJECTED_APP_TOKEN
        hint = "the app-level token was rejected" if rejected else str(classify(exc))
        raise SlackStartError(f"Slack apps.connections.open failed: {hint}; is Socket Mode enabled for the app?") from None
    handler = AckFirstSocketModeHandler(app, app_token=app_token, web_client=client)
    handler.client.wss_uri = str(opened["url"])
    try:
        # the SDK retries a failing connection forever; start-up must fail instead
        await asyncio.wait_for(handler.connect_async(), connect_timeout_s)
    except TimeoutError:
        await close_socket(handler)
        raise SlackStartError(f"could not open the Socket Mode connection within {connect_timeout_s:g} s; "
                              "check that outbound websockets to Slack are allowed (proxy, firewall)") from None
    return handler


def socket_connected(handler: AckFirstSocketModeHandler) -> bool:
    """Whether the Socket Mode connection is open now (between reconnects it is not)."""
    client = handler.client
    session = client.current_session
    return not client.closed and not client.stale and session is not None and not session.closed


async def close_socket(handler: AckFirstSocketModeHandler) -> None:
    """Close the Socket Mode connection; a failure is only logged."""
    try:
        await handler.close_async()
    except Exception as exc:
        log.debug("slack.socket_close_failed", error=type(exc).__name__)


async def serve_http(
    app: AsyncApp, config: SlackConfig, *, port: int, team_id: str, reuse_port: bool = False,
    claim: Callable[[Mapping[str, Any]], Awaitable[bool]] | None = None,
) -> tuple[web.AppRunner, str]:
    """Serve the Events API for ``app`` (and ``/healthz``); returns the runner and the events URL.

    ``reuse_port``: bind with ``SO_REUSEPORT``, so the worker processes of one host share the port.
    ``claim(body)``: asked before Slack gets its 200; False (another delivery of the event was taken, here or by
    another process) answers 200 at once and bolt never sees the request. The process that answers a delivery
    first is then the one that runs it, and a retried delivery costs a fleet one look-up, not bolt's whole dispatch.
    """
    if not config.signing_secret.get_secret_value():
        raise SlackStartError("adapters.slack.signing_secret is empty: HTTP mode needs the app's Signing Secret "
                              "(Basic Information → App Credentials), for example ${SLACK_SIGNING_SECRET}")

    secret = config.signing_secret.get_secret_value()

    async def events(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            check_signature(body, request.headers, secret=secret, now_s=time.time())
            bolt_request = verified_bolt_request(body, request.headers, request.query_string)
        except RejectedRequest as exc:
            log.warning("slack.http_rejected", status=exc.status, reason=str(exc), remote=request.remote)
            return web.Response(status=exc.status, text=str(exc))
        if claim is not None and not await claim(bolt_request.body):
            return web.Response(status=200)
        return await to_aiohttp_response(await app.async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "team": team_id})

    web_app = web.Application()
    web_app.router.add_post(config.http_path, events)
    web_app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.http_host, port, reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise SlackStartError(f"cannot listen on {config.http_host}:{port} for Slack events "
                              f"({exc.strerror or exc}); change adapters.slack.http_port") from None
    host, bound = runner.addresses[0][:2]
    return runner, f"http://{host}:{bound}{config.http_path}"
