"""Loopback fakes of Alibaba CloudMonitor (``DescribeMetricList``) and Tencent Cloud Monitor (``GetMonitorData``).

Each checks what the real gateway checks (the ACS3 / TC3 signature made with
the configured key) and answers with the API's real shapes from points a test
seeds per (namespace, metric, instance).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes.aliyun_estate import acs3_signed
from tests.fakes.loopback import LoopbackFake

__all__ = ["FakeCloudMonitor", "FakeTencentMonitor", "Points"]

Points = dict[tuple[str, str, str], list[tuple[float, float]]]
"""(namespace, metric, instance) → (unix time, value) pairs."""


class _Recording(LoopbackFake):
    def __init__(self, points: Points, *, access_key: str, secret: str) -> None:
        self.points = points
        self.access_key = access_key
        self.secret = secret
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def _send(self, handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _window(self, key: tuple[str, str, str], start: float, end: float) -> list[tuple[float, float]]:
        return [(t, v) for t, v in self.points.get(key, []) if start <= t <= end]


class FakeCloudMonitor(_Recording):
    """CMS 2019-01-01 ``DescribeMetricList``: ``Datapoints`` is a JSON string, times in milliseconds."""

    thread_name = "fake-cloudmonitor"

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        params = dict(parse_qsl(urlsplit(handler.path).query, keep_blank_values=True))
        params.update(dict(parse_qsl(body, keep_blank_values=True)))
        action = handler.headers.get("x-acs-action", "")
        self._record({"action": action, "version": handler.headers.get("x-acs-version", ""), "params": params})
        auth = handler.headers.get("Authorization", "")
        key_id = auth.split("Credential=", 1)[1].split(",", 1)[0] if "Credential=" in auth else ""
        if key_id != self.access_key:
            return self._error(handler, 404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        if not acs3_signed(handler, body, auth, self.secret):
            return self._error(handler, 400, "SignatureDoesNotMatch", "The request signature does not conform.")
        if (action, handler.headers.get("x-acs-version")) != ("DescribeMetricList", "2019-01-01"):
            return self._error(handler, 404, "InvalidAction.NotFound", f"Specified api {action} is not found.")
        instance = json.loads(params["Dimensions"])[0]["instanceId"]
        key = (params["Namespace"], params["MetricName"], instance)
        found = self._window(key, int(params["StartTime"]) / 1000, int(params["EndTime"]) / 1000)
        size, offset = int(params.get("Length") or 1000), int(params.get("NextToken") or 0)
        page = found[offset : offset + size]
        datapoints = [
            {"timestamp": int(t * 1000), "userId": "1234567890123456", "instanceId": instance,
             "Average": v, "Minimum": v, "Maximum": v}
            for t, v in page
        ]
        answer: dict[str, Any] = {
            "RequestId": str(uuid.uuid4()), "Success": True, "Code": "200", "Period": params.get("Period", "60"),
            "Datapoints": json.dumps(datapoints),
        }
        if offset + size < len(found):
            answer["NextToken"] = str(offset + size)
        return self._send(handler, 200, answer)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        self._send(handler, status, {"RequestId": str(uuid.uuid4()), "Code": code, "Message": message})


class FakeTencentMonitor(_Recording):
    """monitor 2018-07-24 ``GetMonitorData``: ``DataPoints`` per instance with ``Timestamps`` and ``Values``."""

    thread_name = "fake-tencent-monitor"

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        action = handler.headers.get("X-TC-Action", "")
        params = json.loads(raw or b"{}")
        self._record({"action": action, "version": handler.headers.get("X-TC-Version", ""), "params": params})
        error = self._signature_error(handler, raw)
        if error is None and handler.headers.get("X-TC-Version") != "2018-07-24":
            error = ("InvalidParameterValue", "Version is not valid.")
        if error is None and action != "GetMonitorData":
            error = ("InvalidAction", f"The action {action} is not found.")
        if error is not None:
            payload: dict[str, Any] = {"Error": {"Code": error[0], "Message": error[1]}}
        else:
            payload = self._data(params)
        return self._send(handler, 200, {"Response": {**payload, "RequestId": str(uuid.uuid4())}})

    def _data(self, params: dict[str, Any]) -> dict[str, Any]:
        from datetime import datetime

        start = datetime.fromisoformat(params["StartTime"]).timestamp()
        end = datetime.fromisoformat(params["EndTime"]).timestamp()
        points = []
        for instance in params["Instances"]:
            dims = instance["Dimensions"]
            found = self._window((params["Namespace"], params["MetricName"], dims[0]["Value"]), start, end)
            points.append(
                {"Dimensions": dims, "Timestamps": [int(t) for t, _ in found], "Values": [v for _, v in found]}
            )
        return {"Period": params["Period"], "MetricName": params["MetricName"], "DataPoints": points,
                "StartTime": params["StartTime"], "EndTime": params["EndTime"], "Msg": ""}

    def _signature_error(self, handler: BaseHTTPRequestHandler, raw: bytes) -> tuple[str, str] | None:
        """TC3-HMAC-SHA256 as the real gateway verifies it: known SecretId, then the signature with its key."""
        auth = handler.headers.get("Authorization", "")
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
        if not auth.startswith("TC3-HMAC-SHA256 ") or len(scope) != 4:
            return ("AuthFailure.SignatureFailure", "The request signature is missing.")
        secret_id, date, service, _ = scope
        if secret_id != self.access_key:
            return ("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
        signed = auth.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
        headers = "".join(f"{h}:{(handler.headers.get(h) or '').strip()}\n" for h in signed)
        canonical = f"POST\n/\n\n{headers}\n{';'.join(signed)}\n{hashlib.sha256(raw).hexdigest()}"
        to_sign = (f"TC3-HMAC-SHA256\n{handler.headers.get('X-TC-Timestamp', '')}\n{date}/{service}/tc3_request\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")

        def mac(key: bytes, text: str) -> bytes:
            return hmac.new(key, text.encode(), hashlib.sha256).digest()

        key = mac(mac(mac(("TC3" + self.secret).encode(), date), service), "tc3_request")
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, auth.rsplit("Signature=", 1)[-1].strip()):
            return ("AuthFailure.SignatureFailure", "The provided credentials could not be validated.")
        return None
