"""An HTTP Events API request, checked before bolt sees it.

bolt assumes a well-formed request: a timestamp header that is not a number, a
body that is not UTF-8 or not a JSON object (directly or in a ``payload=``
form field) raise inside bolt and become an HTTP 500 with a traceback. Here
each of them becomes a :class:`RejectedRequest` with a plain reason: 401 when
the request is not signed by Slack, 400 when a signed body cannot be read.
The signature is checked over the raw bytes, before anything is decoded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from urllib.parse import parse_qsl

from slack_bolt.request.async_request import AsyncBoltRequest

__all__ = ["MAX_SKEW_S", "RejectedRequest", "bolt_request", "check_signature"]

MAX_SKEW_S = 300.0
"""Largest accepted difference between the request's timestamp and our clock (Slack's and bolt's five minutes)."""

_MAX_TIMESTAMP_DIGITS = 12
"""Seconds since 1970 have 10 digits until the year 2286; a longer header is junk, not a time."""


class RejectedRequest(Exception):
    """A request refused before bolt saw it: ``status`` is the HTTP answer, the message the plain reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        """401 (not signed by Slack) or 400 (signed, but the body cannot be read)."""


def check_signature(body: bytes, headers: Mapping[str, str], *, secret: str, now_s: float) -> None:
    """Raise a 401 :class:`RejectedRequest` unless Slack signed ``body`` recently with ``secret``."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not timestamp or not signature:
        raise RejectedRequest(401, "missing the X-Slack-Request-Timestamp or X-Slack-Signature header")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS):
        raise RejectedRequest(401, "the X-Slack-Request-Timestamp header is not a number of seconds")
    skew = abs(now_s - int(timestamp))
    if skew > MAX_SKEW_S:
        raise RejectedRequest(401, f"the request timestamp is {skew:.0f} s away from our clock (at most {MAX_SKEW_S:.0f} s)")
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(f"v0={digest}", signature):
        raise RejectedRequest(401, "the request signature does not match; check adapters.slack.signing_secret")


def bolt_request(body: bytes, headers: Mapping[str, str], query: str) -> AsyncBoltRequest:
    """The request as bolt reads it; a 400 :class:`RejectedRequest` when the (signed) body is unreadable."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RejectedRequest(400, f"the body is not UTF-8 (byte {exc.start})") from None
    _check_payload(text, headers.get("Content-Type", ""))
    try:
        return AsyncBoltRequest(body=text, query=query, headers=dict(headers))
    except (AttributeError, TypeError, KeyError, IndexError, ValueError):
        # bolt reads ids out of the body as it builds the request; a field of the wrong type fails there
        raise RejectedRequest(400, "the body has fields of unexpected types") from None


def _check_payload(text: str, content_type: str) -> None:
    """The body must hold one JSON object, as bolt will look for it: a JSON body, or a form's ``payload`` field."""
    if not text:
        return
    # the same choice bolt's parse_body makes (media type compared as sent), so what passes here is what bolt parses
    document: str | None
    if content_type.split(";")[0] == "application/json" or text.startswith("{"):
        document, where = text, "the body"
    elif "payload" in text:
        document = dict(parse_qsl(text, keep_blank_values=True)).get("payload")
        if document is None:
            return
        where = "the payload field"
    else:
        return  # a plain form (slash commands)
    try:
        value = json.loads(document)
    except json.JSONDecodeError as exc:
        raise RejectedRequest(400, f"{where} is not valid JSON ({exc.msg} at character {exc.pos})") from None
    except RecursionError:
        raise RejectedRequest(400, f"{where} is JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise RejectedRequest(400, f"{where} is JSON but not an object")
    # bolt's middleware reads ``event.type`` of every envelope that has an event
    event = value.get("event")
    if event is not None and not (isinstance(event, dict) and isinstance(event.get("type", ""), str)):
        raise RejectedRequest(400, f"the event in {where} is not an object with a string type")
