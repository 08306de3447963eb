"""A fake AWS CloudTrail ``LookupEvents`` API on 127.0.0.1, for the real ``boto3`` client (moto lacks it).

It speaks CloudTrail's JSON 1.1 protocol (``X-Amz-Target:
com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents``) and checks
what the real API checks: a SigV4 ``Authorization`` header for the ``cloudtrail``
service carrying the configured access key id (else ``UnrecognizedClientException``),
at most one lookup attribute of a known key, ``MaxResults`` of 1-50, and its own
``NextToken``. Events live per region (the one in the credential scope). Errors
are HTTP 400 with ``{"__type", "message"}``, as the real service answers.

Every request is recorded with its arrival ``time.monotonic()`` and region, so a
test can check the rate a client kept.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackFake

TARGET = "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents"
_SCOPE = re.compile(r"Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
_ATTRIBUTES = {
    "EventId", "EventName", "ReadOnly", "Username", "ResourceType", "ResourceName", "EventSource", "AccessKeyId",
}


@dataclass(frozen=True)
class Arrival:
    """One request as the fake saw it."""

    at: float
    """``time.monotonic()`` when it arrived."""
    region: str
    """The region of its credential scope."""
    body: Mapping[str, Any]
    """The decoded JSON request."""
    status: int
    """What the fake answered."""


def trail_event(
    name: str,
    at: float,
    *,
    user: str = "alice",
    resource: str = "",
    resource_type: str = "AWS::RDS::DBInstance",
    source: str = "rds.amazonaws.com",
    source_ip: str = "203.0.113.7",
    error_code: str = "",
    region: str = "us-west-2",
    role: str = "",
    read_only: bool = False,
) -> dict[str, Any]:
    """One CloudTrail event as ``LookupEvents`` returns it (``CloudTrailEvent`` is the JSON record, as a string)."""
    event_id = str(uuid.uuid4())
    if role:
        identity: dict[str, Any] = {
            "type": "AssumedRole",
            "arn": f"arn:aws:sts::123456789012:assumed-role/{role}/{user}",
            "sessionContext": {"sessionIssuer": {"type": "Role", "userName": role}},
        }
    else:
        identity = {"type": "IAMUser", "arn": f"arn:aws:iam::123456789012:user/{user}", "userName": user}
    record: dict[str, Any] = {
        "eventVersion": "1.08", "eventID": event_id, "eventName": name, "eventSource": source, "awsRegion": region,
        "eventTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)), "userIdentity": identity,
        "sourceIPAddress": source_ip, "readOnly": read_only,
        "requestParameters": {"dBInstanceIdentifier": resource} if resource else {},
    }
    if error_code:
        record.update(errorCode=error_code, errorMessage=f"{name} failed: {error_code}")
    return {
        "EventId": event_id, "EventName": name, "ReadOnly": str(read_only).lower(), "EventTime": at,
        "EventSource": source, "Username": user,
        "Resources": [{"ResourceType": resource_type, "ResourceName": resource}] if resource else [],
        "CloudTrailEvent": json.dumps(record),
    }


class FakeCloudTrail(LoopbackFake):
    """CloudTrail's ``LookupEvents`` over events per region, with latency, throttling and denial on demand."""

    def __init__(
        self,
        events: Mapping[str, Iterable[Mapping[str, Any]]],
        *,
        access_key: str = "testing",
        delay_s: float = 0.0,
        throttle_first: int = 0,
        denied: bool = False,
        page_cap: int = 50,
    ) -> None:
        self.events = {region: list(items) for region, items in events.items()}
        self.access_key = access_key
        self.delay_s = delay_s
        self.throttle_first = throttle_first
        """Answer ``ThrottlingException`` to this many requests before serving."""
        self.denied = denied
        self.page_cap = page_cap
        """Events per page at most, below the caller's ``MaxResults`` (the real cap is 50)."""
        self._lock = threading.Lock()
        self._arrivals: list[Arrival] = []
    def arrivals(self, status: int | None = None) -> list[Arrival]:
        """Every request so far, in arrival order (optionally only those answered with ``status``)."""
        with self._lock:
            return [a for a in self._arrivals if status is None or a.status == status]

    # -- protocol ---------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        arrived = time.monotonic()
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        scope = _SCOPE.search(handler.headers.get("Authorization") or "")
        region = scope.group(2) if scope else ""
        status, payload = self._answer(handler, scope, body)
        with self._lock:
            self._arrivals.append(Arrival(arrived, region, body, status))
        if self.delay_s:
            time.sleep(self.delay_s)  # simulated API latency
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/x-amz-json-1.1")
        handler.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(
        self, handler: BaseHTTPRequestHandler, scope: re.Match[str] | None, body: Mapping[str, Any]
    ) -> tuple[int, Any]:
        if handler.headers.get("X-Amz-Target") != TARGET:
            return 400, _error("UnknownOperationException", "unknown operation")
        if scope is None or scope.group(3) != "cloudtrail":
            return 400, _error("MissingAuthenticationTokenException", "request is missing a SigV4 signature")
        if scope.group(1) != self.access_key:
            return 400, _error("UnrecognizedClientException", "The security token included in the request is invalid.")
        with self._lock:
            throttle = self.throttle_first > 0
            if throttle:
                self.throttle_first -= 1
        if throttle:
            return 400, _error("ThrottlingException", "Rate exceeded")
        if self.denied:
            return 400, _error(
                "AccessDeniedException",
                "User: arn:aws:iam::123456789012:user/bot is not authorized to perform: cloudtrail:LookupEvents",
            )
        return self._lookup(scope.group(2), body)

    def _lookup(self, region: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        attributes = body.get("LookupAttributes") or []
        if len(attributes) > 1 or any(a.get("AttributeKey") not in _ATTRIBUTES for a in attributes):
            return 400, _error("InvalidLookupAttributesException", "one lookup attribute of a known key is allowed")
        wanted = int(body.get("MaxResults") or 50)
        if not 1 <= wanted <= 50:
            return 400, _error("InvalidMaxResultsException", "MaxResults must be 1-50")
        start = _offset(body.get("NextToken"))
        if start is None:
            return 400, _error("InvalidNextTokenException", "invalid NextToken")
        found = [e for e in self.events.get(region, []) if _matches(e, attributes, body)]
        found.sort(key=lambda e: float(e["EventTime"]), reverse=True)
        size = min(wanted, self.page_cap)
        page = found[start:start + size]
        answer: dict[str, Any] = {"Events": page}
        if start + size < len(found):
            answer["NextToken"] = base64.urlsafe_b64encode(f"events:{start + size}".encode()).decode()
        return 200, answer


def _error(code: str, message: str) -> dict[str, str]:
    return {"__type": code, "message": message}


def _offset(token: Any) -> int | None:
    if not token:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(str(token).encode()).decode().partition(":")
        return int(value) if kind == "events" else None
    except (ValueError, UnicodeDecodeError):
        return None


def _matches(event: Mapping[str, Any], attributes: Sequence[Mapping[str, Any]], body: Mapping[str, Any]) -> bool:
    at = float(event["EventTime"])
    if body.get("StartTime") is not None and at < float(body["StartTime"]):
        return False
    if body.get("EndTime") is not None and at > float(body["EndTime"]):
        return False
    for attribute in attributes:
        key, value = attribute.get("AttributeKey"), attribute.get("AttributeValue")
        resources = event.get("Resources") or []
        if key == "ResourceName" and not any(r.get("ResourceName") == value for r in resources):
            return False
        if key == "ResourceType" and not any(r.get("ResourceType") == value for r in resources):
            return False
        if key in ("EventName", "Username", "EventId", "EventSource") and event.get(key) != value:
            return False
    return True
