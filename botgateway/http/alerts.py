"""``POST /alerts/alertmanager``: Prometheus Alertmanager's webhook (payload version 4).

Authenticated as Alertmanager's ``http_config`` can send it: a bearer token
(``authorization: {credentials: …}``) or basic auth, compared in constant
time; anything else is answered 401. A body over ``alerts.max_body_bytes`` is
answered 413, a malformed one 400 with the reason (and one log line). A valid
notification is answered 200 at once, the cards being posted behind it:
Alertmanager must not time out and send it again while a card waits for its
rate budget. Until the adapters are up the answer is 503 with ``Retry-After``,
and Alertmanager retries.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable

import structlog
from aiohttp import web

from botgateway.alerts.desk import AlertDesk
from botgateway.alerts.payload import PayloadError, parse_notification
from botgateway.config import AlertsConfig

__all__ = ["ALERTMANAGER_PATH", "alert_routes"]

log = structlog.get_logger(__name__)

ALERTMANAGER_PATH = "/alerts/alertmanager"
"""Where Alertmanager's ``webhook_configs`` ``url`` points."""


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison; a header that is not valid text (it arrives as latin-1) is simply wrong."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


def _authorized(config: AlertsConfig, header: str) -> bool:
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and config.token is not None and value:
        return _same(value, config.token.get_secret_value())
    if scheme.lower() == "basic" and config.basic_auth is not None and value:
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = config.basic_auth
        # both compared, whatever the first says: no timing tells which one was wrong
        ok_user = _same(user, expected.username)
        ok_password = _same(password, expected.password.get_secret_value())
        return ok_user and ok_password
    return False


async def _body(request: web.Request, limit: int) -> bytes | None:
    """The whole body (read to its end, however it was chunked), or None past ``limit`` bytes."""
    if request.content_length is not None and request.content_length > limit:
        return None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def alert_routes(config: AlertsConfig, desk: Callable[[], AlertDesk | None]) -> list[web.RouteDef]:
    """The receiver's route; ``desk()`` is the alert desk once the adapters are up (None before)."""

    async def receive(request: web.Request) -> web.Response:
        if not _authorized(config, request.headers.get("Authorization", "")):
            log.warning("alerts.unauthorized", remote=request.remote)
            return web.json_response(
                {"error": "missing or wrong credentials; send the bearer token or basic auth set in alerts:"},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="botgateway alerts"'},
            )
        limit = config.max_body_bytes
        body = await _body(request, limit)
        if body is None:
            return web.json_response({"error": f"the request body is larger than {limit} bytes"}, status=413)
        try:
            notification = parse_notification(body)
        except PayloadError as exc:
            log.warning("alerts.bad_payload", reason=str(exc)[:300], remote=request.remote)
            return web.json_response({"error": f"not an Alertmanager webhook payload (version 4): {exc}"}, status=400)
        current = desk()
        if current is None:
            return web.json_response({"error": "the gateway is starting; try again shortly"}, status=503,
                                     headers={"Retry-After": "5"})
        deliveries = current.accept(notification)
        return web.json_response({"status": "accepted", "deliveries": deliveries})

    return [web.post(ALERTMANAGER_PATH, receive)]
