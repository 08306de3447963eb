"""Slack's answers as the typed sink errors of :mod:`botgateway.sink`, mapped in one place.

Slack answers a failed Web API call with HTTP 200 and ``ok: false`` plus an
``error`` code, or with an HTTP error (429 with ``Retry-After`` when throttled,
5xx when it is having trouble); the transport can fail too. :func:`classify`
turns each of them into the sink error the card pipeline acts on. Messages
never carry a token; a caller may pass *hints*, what to do about a refusal of
its own calls (:data:`UPLOAD_HINTS`), for a message a person can act on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError

from botgateway.sink import CardGone, PermanentError, RateLimited, SinkError, TooLong, TransientError, parse_retry_after

__all__ = ["NATIVE_UNAVAILABLE", "UPLOAD_HINTS", "call_slack", "classify", "slack_error_code"]

_T = TypeVar("_T")

_GONE = frozenset({
    "message_not_found", "cant_update_message", "edit_window_closed", "thread_not_found",
    "message_not_in_streaming_state", "is_archived", "channel_not_found",
})
_TOO_LONG = frozenset({"msg_too_long", "msg_blocks_too_long", "markdown_text_too_long"})
_PERMANENT = frozenset({
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "no_permission",
    "missing_scope", "not_in_channel", "restricted_action", "ekm_access_denied", "team_access_not_granted",
    "invalid_blocks", "invalid_arguments", "not_allowed_token_type", "org_login_required",
})
_TRANSIENT = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout", "timeout"})

NATIVE_UNAVAILABLE = frozenset({
    "unknown_method", "not_allowed_token_type", "method_deprecated", "missing_scope", "feature_not_enabled",
    "not_allowed", "invalid_arguments", "missing_recipient_user_id", "missing_recipient_team_id",
    "team_not_allowed", "access_denied",
})
"""``chat.startStream`` errors meaning streaming is not available in this workspace (auto mode remembers)."""

UPLOAD_HINTS: Mapping[str, str] = MappingProxyType({
    "missing_scope": "add the files:write scope to the Slack app and reinstall it",
    "not_in_channel": "invite the bot to the channel (/invite @botgateway)",
    "not_allowed_token_type": "uploads need the bot token (xoxb-)",
    "file_uploads_disabled": "the workspace has turned file uploads off",
    "file_upload_size_restricted": "the workspace restricts the size of uploads",
    "file_type_not_allowed": "the workspace does not allow PNG uploads",
    "file_not_found": "the uploaded bytes did not reach slack",
})
"""What to do when Slack refuses a chart's upload (``files.getUploadURLExternal`` / ``completeUploadExternal``)."""


def slack_error_code(exc: BaseException) -> str:
    """The ``error`` code of a Slack API failure (empty when there is none)."""
    response = getattr(exc, "response", None)
    data = getattr(response, "data", None)
    if isinstance(data, Mapping):
        return str(data.get("error") or "")
    return ""


def classify(exc: BaseException, hints: Mapping[str, str] | None = None) -> SinkError:
    """Map a Slack SDK / transport failure onto the typed sink errors (messages carry no secrets).

    ``hints``: per ``error`` code, what to do about it; such a refusal is permanent and its message says so.
    """
    if isinstance(exc, SinkError):
        return exc
    if isinstance(exc, SlackApiError):
        return _classify_answer(exc, hints or {})
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
        return TransientError(f"could not reach slack ({type(exc).__name__})")
    return PermanentError(f"unexpected error talking to slack ({type(exc).__name__})")


async def call_slack(fn: Callable[..., Awaitable[_T]], /, *, hints: Mapping[str, str] | None = None,
                     **kwargs: Any) -> _T:
    """``await fn(**kwargs)`` (a Web API method of the SDK client), its failures raised as typed sink errors
    (``hints``: see :func:`classify`)."""
    try:
        return await fn(**kwargs)
    except Exception as exc:
        raise classify(exc, hints) from None


def _classify_answer(exc: SlackApiError, hints: Mapping[str, str]) -> SinkError:
    response = exc.response
    status = getattr(response, "status_code", None) or getattr(response, "status", None) or 0
    headers = getattr(response, "headers", None) or {}
    code = slack_error_code(exc)
    if status == 429 or code == "ratelimited":
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        return RateLimited(retry_after, f"slack throttled the call ({code or status})")
    if code in _GONE:
        return CardGone(f"the message can no longer be updated ({code})")
    if code in _TOO_LONG:
        return TooLong(f"the message is too long for slack ({code})")
    if code in hints:
        return PermanentError(f"slack refused the call ({code}): {hints[code]}")
    if code in _PERMANENT:
        return PermanentError(f"slack refused the call ({code}); check the app's token and scopes")
    if status >= 500 or code in _TRANSIENT:
        return TransientError(f"slack is having trouble ({code or f'HTTP {status}'})")
    if not code:
        return TransientError(f"unexpected answer from slack (HTTP {status})")
    return PermanentError(f"slack refused the call ({code})")


def _header(headers: Any, name: str) -> str | None:
    try:
        value = headers.get(name) or headers.get(name.lower())
    except AttributeError:
        return None
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return str(value) if value is not None else None
