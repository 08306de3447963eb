"""What DingTalk's answers mean as sink errors: the one place they are told apart.

The card streamer paces, coalesces and falls back on the typed errors of
:mod:`botgateway.sink`; every DingTalk answer (OpenAPI call, token request,
session webhook, robot batch send, old-API media upload) is classified here,
so a throttle means the same thing wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botgateway.sink import CardGone, PermanentError, RateLimited, SinkError, TransientError, parse_retry_after

__all__ = [
    "CARD_GONE_CODES",
    "OAPI_BAD_TOKEN_ERRCODES",
    "OAPI_BUSY_ERRCODES",
    "QPS_LIMIT_CODES",
    "QPS_WINDOW_S",
    "SEND_TOO_FAST_ERRCODES",
    "answer_error",
    "batch_send_error",
    "error_code",
    "error_message",
    "media_error",
    "token_error",
    "transport_error",
    "webhook_error",
]

QPS_LIMIT_CODES = ("Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", "QpsLimit", "Throttling")
"""Error codes (or code fragments) DingTalk uses when it throttles a call."""

CARD_GONE_CODES = ("cardNotExist", "card.notExist", "notFound", "NotExist", "streamingFinished")
"""Error-code fragments meaning the card can no longer be updated."""

SEND_TOO_FAST_ERRCODES = (130101, 660026, 90018)
"""Session-webhook ``errcode`` values of the "sending too fast" family."""

OAPI_BAD_TOKEN_ERRCODES = (40014, 42001)
"""Old-API (``oapi.dingtalk.com``) ``errcode`` of an invalid or expired access token: refreshed once."""

OAPI_BUSY_ERRCODES = (-1,)
"""Old-API ``errcode`` of "system busy": worth a later try."""

QPS_WINDOW_S = 1.0
"""DingTalk's QPS limits count calls per second; a throttled call waits this long unless told otherwise."""


def error_code(payload: Any) -> str:
    """The ``code`` (OpenAPI) or ``errcode`` (robot webhook) of an answer, or ``""``."""
    if isinstance(payload, Mapping):
        return str(payload.get("code") or payload.get("errcode") or "")
    return ""


def error_message(payload: Any) -> str:
    """The answer's ``message`` or ``errmsg``, cut to 200 characters."""
    if isinstance(payload, Mapping):
        return str(payload.get("message") or payload.get("errmsg") or "")[:200]
    return ""


def _throttled(code: str) -> bool:
    return any(c in code for c in QPS_LIMIT_CODES)


def transport_error(exc: BaseException, what: str) -> TransientError:
    """The call never got an answer (connection refused, reset, timeout)."""
    return TransientError(f"DingTalk {what}: {type(exc).__name__}")


def answer_error(status: int, payload: Any, headers: Mapping[str, str], what: str) -> SinkError | None:
    """The error an OpenAPI answer means, or ``None`` when it succeeded; ``what`` names the call."""
    code = error_code(payload)
    if status == 429 or (status == 403 and _throttled(code)):
        # DingTalk counts calls per second: without a Retry-After, one second
        # is the wait that reaches a fresh window (shorter ones get throttled again).
        retry_after = parse_retry_after(headers.get("Retry-After"))
        if retry_after is None:
            retry_after = QPS_WINDOW_S
        return RateLimited(retry_after, f"DingTalk throttled {what} ({code or status})")
    if status >= 500:
        return TransientError(f"DingTalk {what}: HTTP {status} {code}".rstrip())
    if status == 401:
        return PermanentError(
            f"DingTalk {what}: a fresh access token was rejected too ({code}); "
            "check that the app is published and client_id/client_secret belong to it"
        )
    if status == 404 or (status == 400 and any(c in code for c in CARD_GONE_CODES)):
        return CardGone(f"DingTalk {what}: {code or status} {error_message(payload)}".rstrip())
    if status == 403:
        return PermanentError(
            f"DingTalk {what} was denied ({code}): grant the app the permission this call needs "
            "(Card.Streaming.Write, Card.Instance.Write, qyapi_robot_sendmsg)"
        )
    if status >= 400:
        return PermanentError(f"DingTalk {what} failed: HTTP {status} {code} {error_message(payload)}".rstrip())
    return None


def media_error(status: int, payload: Any, headers: Mapping[str, str]) -> SinkError | None:
    """The error an old-API media upload answer means, or ``None`` when it carries a media id.

    The old API answers HTTP 200 with an ``errcode``; a gateway in front of it
    may still throttle with HTTP 429 or 403 ``QpsLimit``. A stale token
    (:data:`OAPI_BAD_TOKEN_ERRCODES`) is the caller's to refresh before this is asked.
    """
    what = "media upload"
    code = error_code(payload)
    if status == 429 or (status == 403 and _throttled(code)):
        retry_after = parse_retry_after(headers.get("Retry-After"))
        return RateLimited(QPS_WINDOW_S if retry_after is None else retry_after, f"DingTalk throttled the {what}")
    if status >= 500:
        return TransientError(f"DingTalk {what}: HTTP {status}")
    if status != 200:
        return PermanentError(f"DingTalk refused the {what}: HTTP {status} {code}".rstrip())
    errcode = _int(payload.get("errcode") if isinstance(payload, Mapping) else None)
    sub_code = str(payload.get("sub_code") or "") if isinstance(payload, Mapping) else ""
    if errcode in SEND_TOO_FAST_ERRCODES or sub_code in {str(c) for c in SEND_TOO_FAST_ERRCODES}:
        return RateLimited(QPS_WINDOW_S, f"DingTalk throttled the {what} (errcode {errcode})")
    if errcode in OAPI_BUSY_ERRCODES:
        return TransientError(f"DingTalk {what}: the platform is busy")
    if errcode in OAPI_BAD_TOKEN_ERRCODES:
        return PermanentError(f"DingTalk {what}: a fresh access token was rejected too (errcode {errcode})")
    if errcode:
        return PermanentError(f"DingTalk refused the {what} (errcode {errcode} {error_message(payload)[:60]})".rstrip())
    return None


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def token_error(status: int, payload: Any) -> SinkError | None:
    """The error an access-token answer means, or ``None`` when it carries a token."""
    if status >= 500:
        return TransientError(f"DingTalk token endpoint answered HTTP {status}")
    if status == 429 or _throttled(error_code(payload)):
        return RateLimited(None, "DingTalk throttled the token request")
    token = payload.get("accessToken") if isinstance(payload, Mapping) else None
    if status != 200 or not token:
        return PermanentError(
            f"DingTalk refused the app credentials (HTTP {status} {error_code(payload)}): "
            "check adapters.dingtalk.client_id and client_secret"
        )
    return None


def webhook_error(result: Any, what: str) -> SinkError | None:
    """The error a session webhook's HTTP 200 answer carries in ``errcode``, or ``None``."""
    errcode = result.get("errcode", 0) if isinstance(result, Mapping) else 0
    if errcode in (0, "0", None):
        return None
    if errcode in SEND_TOO_FAST_ERRCODES:
        return RateLimited(None, f"DingTalk {what}: sending too fast")
    return CardGone(f"DingTalk {what} failed: errcode {errcode} {error_message(result)}")


def batch_send_error(answer: Any, user_id: str) -> SinkError | None:
    """Why a robot 1:1 ``batchSend`` (HTTP 200 even when it sent nothing) skipped ``user_id``, or ``None``."""
    if not isinstance(answer, Mapping):
        return None
    if user_id in (answer.get("flowControlledStaffIdList") or []):
        return RateLimited(None, "DingTalk robot 1:1 message: the user is flow-controlled, try again shortly")
    if user_id in (answer.get("invalidStaffIdList") or []):
        return PermanentError(
            "DingTalk robot 1:1 message: the user is not a valid recipient for this robot "
            "(outside the app's visible range?)"
        )
    return None
