"""Fake Alibaba Cloud ECS and Tencent Cloud CVM APIs on 127.0.0.1, for the real SDKs.

Each fake is a threaded HTTP server (the SDKs call it from worker threads and
from CLI subprocesses alike) that checks what the real API checks — action,
version, signature header and access key, filter names, JSON-array address
parameters, pagination tokens — and answers with the real response shapes:

* Aliyun: ``{"Instances": {"Instance": [...]}, "TotalCount", "NextToken", "PageNumber", "PageSize", "RequestId"}``;
  errors are HTTP 4xx with ``{"Code", "Message", "RequestId", "HostId"}``.
* Tencent: ``{"Response": {"InstanceSet": [...], "TotalCount", "RequestId"}}``; errors are HTTP 200 with
  ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``.

To exercise pagination with a handful of instances, the fakes cap every page
at ``page_cap`` records (the real limit is 100).
"""

from __future__ import annotations

import base64
import fnmatch
import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes.loopback import LoopbackFake


class Rendezvous:
    """Holds requests to several fakes until each fake has received one (or ``timeout_s`` passes).

    Proves lookups run concurrently without timing anything: if the calls were
    sequential, the first would wait out the timeout and :attr:`met` stays False.
    """

    def __init__(self, *names: str, timeout_s: float = 10.0) -> None:
        self.expected = set(names)
        self.arrived: set[str] = set()
        self.timeout_s = timeout_s
        self.met = False
        self._cond = threading.Condition()

    def arrive(self, name: str) -> None:
        """Note that ``name`` was asked, then block (in the server thread) until every fake was, or the timeout."""
        with self._cond:
            self.arrived.add(name)
            if self.arrived >= self.expected:
                self.met = True
                self._cond.notify_all()
            else:
                self._cond.wait_for(lambda: self.arrived >= self.expected, timeout=self.timeout_s)


class FakeCloud(LoopbackFake):
    """Common plumbing: a threaded server, recorded requests, latency, stalls and denied regions."""

    def __init__(
        self,
        instances: Mapping[str, Iterable[Mapping[str, Any]]],
        *,
        access_key: str = "test-key-id",
        page_cap: int = 2,
        denied_regions: Iterable[str] = (),
        delay_s: float = 0.0,
        stall: bool = False,
        rendezvous: Rendezvous | None = None,
        name: str = "",
    ) -> None:
        self.rendezvous = rendezvous
        self.name = name or type(self).__name__
        self.instances = {region: list(items) for region, items in instances.items()}
        self.access_key = access_key
        self.page_cap = page_cap
        self.denied_regions = set(denied_regions)
        self.delay_s = delay_s
        self.stall = stall
        """Answer nothing until the fake stops (a region that never answers in time, with no clock to race)."""
        self._released = threading.Event()
        self.requests: list[dict[str, Any]] = []
        """Every request: action, region, params (decoded)."""
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Stop listening (stalled requests are let go first, so their threads end)."""
        self._released.set()
        super().stop()

    def record(self, entry: dict[str, Any]) -> None:
        """Remember one request (thread-safe: the server handles requests on several threads)."""
        with self._lock:
            self.requests.append(entry)

    def wait(self) -> None:
        """Simulated API latency or a stall, then the rendezvous (if any)."""
        if self.stall:
            self._released.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.rendezvous is not None:
            self.rendezvous.arrive(self.name)

    def calls(self, region: str | None = None) -> list[dict[str, Any]]:
        """Recorded requests, optionally of one region."""
        with self._lock:
            return [r for r in self.requests if region is None or r.get("region") == region]

    content_type = "application/json;charset=utf-8"
    """What the real API answers with (the Tencent SDK only parses errors of exactly ``application/json``)."""

    def _send(self, handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", self.content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @staticmethod
    def _token(offset: int) -> str:
        return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()

    @staticmethod
    def _offset(token: str) -> int | None:
        try:
            kind, _, value = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
            return int(value) if kind == "offset" else None
        except Exception:
            return None


# --- Alibaba Cloud ---------------------------------------------------------------------------------


def aliyun_instance(
    instance_id: str,
    name: str,
    private_ip: str,
    *,
    public_ip: str | None = None,
    eip: str | None = None,
    status: str = "Running",
    region: str = "cn-hangzhou",
    zone: str = "cn-hangzhou-h",
    instance_type: str = "ecs.g7.xlarge",
    cpu: int = 4,
    memory_mib: int = 16384,
    os_name: str = "Alibaba Cloud Linux 3.2104 LTS 64位",
    tags: Mapping[str, str] | None = None,
    expired: str = "2099-12-31T15:59Z",
) -> dict[str, Any]:
    """One ``DescribeInstances`` record, shaped like the real API's."""
    return {
        "InstanceId": instance_id,
        "InstanceName": name,
        "HostName": name,
        "Status": status,
        "RegionId": region,
        "ZoneId": zone,
        "InstanceType": instance_type,
        "Cpu": cpu,
        "Memory": memory_mib,
        "OSName": os_name,
        "OSType": "linux",
        "VpcAttributes": {"VpcId": "vpc-bp1prod", "VSwitchId": "vsw-bp1a", "PrivateIpAddress": {"IpAddress": [private_ip]}},
        "InnerIpAddress": {"IpAddress": []},
        "PublicIpAddress": {"IpAddress": [public_ip] if public_ip else []},
        "EipAddress": {"IpAddress": eip or "", "AllocationId": "eip-1" if eip else ""},
        "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in (tags or {}).items()]},
        "CreationTime": "2024-05-20T08:00Z",
        "ExpiredTime": expired,
        "InstanceChargeType": "PostPaid",
    }


class FakeAliyun(FakeCloud):
    """``ecs.aliyuncs.com`` ``DescribeInstances`` (API version 2014-05-26)."""

    _ADDRESS_PARAMS = {
        "PrivateIpAddresses": lambda i: i["VpcAttributes"]["PrivateIpAddress"]["IpAddress"],
        "InnerIpAddresses": lambda i: i["InnerIpAddress"]["IpAddress"],
        "PublicIpAddresses": lambda i: i["PublicIpAddress"]["IpAddress"],
        "EipAddresses": lambda i: [i["EipAddress"]["IpAddress"]] if i["EipAddress"]["IpAddress"] else [],
    }
    _KNOWN = {
        "RegionId", "MaxResults", "NextToken", "PageNumber", "PageSize", "InstanceIds", "InstanceName", "Status",
        *_ADDRESS_PARAMS,
    }

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        self._send(handler, status, {"RequestId": str(uuid.uuid4()), "HostId": "ecs.aliyuncs.com", "Code": code, "Message": message})

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        params = dict(parse_qsl(urlsplit(handler.path).query))
        params.update(dict(parse_qsl(body)))
        action = handler.headers.get("x-acs-action") or params.get("Action", "")
        region = params.get("RegionId", "")
        self.record({"action": action, "region": region, "params": params})
        self.wait()
        auth = handler.headers.get("Authorization", "")
        if not auth.startswith("ACS3-HMAC-SHA256 Credential="):
            return self._error(handler, 400, "MissingSignature", "The request signature is missing.")
        if auth.split("Credential=", 1)[1].split(",", 1)[0] != self.access_key:
            return self._error(handler, 404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        if handler.headers.get("x-acs-version") != "2014-05-26":
            return self._error(handler, 400, "InvalidVersion", "Specified parameter Version is not valid.")
        if action != "DescribeInstances":
            return self._error(handler, 404, "InvalidAction.NotFound", f"Specified api {action} is not found.")
        if not region:
            return self._error(handler, 400, "MissingRegionId", "RegionId is mandatory for this action.")
        if region not in self.instances and region not in self.denied_regions:
            return self._error(handler, 404, "InvalidRegionId.NotFound", "The specified RegionId does not exist.")
        unknown = set(params) - self._KNOWN
        if unknown:
            return self._error(handler, 400, "InvalidParameter", f"Unknown parameter {sorted(unknown)[0]}.")
        if region in self.denied_regions:
            return self._error(
                handler, 403, "Forbidden.RAM",
                "User not authorized to operate on the specified resource, or this API doesn't support RAM.",
            )
        items = list(self.instances[region])
        for param, getter in self._ADDRESS_PARAMS.items():
            if param in params:
                try:
                    wanted = json.loads(params[param])
                    assert isinstance(wanted, list) and all(isinstance(w, str) for w in wanted)
                except Exception:
                    return self._error(handler, 400, "InvalidParameter", f"The specified parameter {param} is not a JSON array.")
                items = [i for i in items if set(getter(i)) & set(wanted)]
        if "InstanceIds" in params:
            try:
                ids = json.loads(params["InstanceIds"])
            except json.JSONDecodeError:
                return self._error(handler, 400, "InvalidInstanceIds.Malformed", "The specified parameter InstanceIds is not valid.")
            items = [i for i in items if i["InstanceId"] in ids]
        if "Status" in params:
            items = [i for i in items if i["Status"] == params["Status"]]
        if "InstanceName" in params:
            items = [i for i in items if fnmatch.fnmatchcase(i["InstanceName"], params["InstanceName"])]
        total = len(items)
        if "MaxResults" in params or "NextToken" in params:
            size = min(int(params.get("MaxResults", 10)), 100, self.page_cap)
            offset = 0
            if params.get("NextToken"):
                found = self._offset(params["NextToken"])
                if found is None:
                    return self._error(handler, 400, "InvalidParameter.NextToken", "The specified NextToken is not valid.")
                offset = found
            page = items[offset : offset + size]
            next_token = self._token(offset + size) if offset + size < total else ""
            return self._send(handler, 200, {
                "RequestId": str(uuid.uuid4()), "TotalCount": total, "NextToken": next_token,
                "Instances": {"Instance": page},
            })
        size = min(int(params.get("PageSize", 10)), 100, self.page_cap)
        number = int(params.get("PageNumber", 1))
        page = items[(number - 1) * size : number * size]
        return self._send(handler, 200, {
            "RequestId": str(uuid.uuid4()), "TotalCount": total, "PageNumber": number, "PageSize": size,
            "Instances": {"Instance": page},
        })


# --- Tencent Cloud ---------------------------------------------------------------------------------


def tencent_instance(
    instance_id: str,
    name: str,
    private_ip: str,
    *,
    public_ip: str | None = None,
    state: str = "RUNNING",
    zone: str = "ap-guangzhou-3",
    instance_type: str = "S5.LARGE8",
    cpu: int = 4,
    memory_gb: int = 8,
    os_name: str = "TencentOS Server 3.1 (TK4)",
    tags: Mapping[str, str] | None = None,
    expired: str | None = None,
) -> dict[str, Any]:
    """One ``DescribeInstances`` ``InstanceSet`` record, shaped like the real API's."""
    return {
        "InstanceId": instance_id,
        "InstanceName": name,
        "InstanceState": state,
        "InstanceType": instance_type,
        "CPU": cpu,
        "Memory": memory_gb,
        "OsName": os_name,
        "Placement": {"Zone": zone, "ProjectId": 0},
        "PrivateIpAddresses": [private_ip],
        "PublicIpAddresses": [public_ip] if public_ip else None,
        "VirtualPrivateCloud": {"VpcId": "vpc-gz01", "SubnetId": "subnet-gz01", "AsVpcGateway": False},
        "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()],
        "CreatedTime": "2024-06-01T02:03:04Z",
        "ExpiredTime": expired,
        "InstanceChargeType": "POSTPAID_BY_HOUR",
    }


class FakeTencent(FakeCloud):
    """``cvm.tencentcloudapi.com`` ``DescribeInstances`` (API version 2017-03-12)."""

    content_type = "application/json"

    _FILTERS = {
        "private-ip-address": lambda i: i["PrivateIpAddresses"] or [],
        "public-ip-address": lambda i: i["PublicIpAddresses"] or [],
        "instance-state": lambda i: [i["InstanceState"]],
        "instance-name": lambda i: [i["InstanceName"]],
        "instance-id": lambda i: [i["InstanceId"]],
        "zone": lambda i: [i["Placement"]["Zone"]],
        "tag-key": lambda i: [t["Key"] for t in i["Tags"]],
    }

    def _error(self, handler: BaseHTTPRequestHandler, code: str, message: str) -> None:
        self._send(handler, 200, {"Response": {"Error": {"Code": code, "Message": message}, "RequestId": str(uuid.uuid4())}})

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length).decode() if length else "{}"
        action = handler.headers.get("X-TC-Action", "")
        region = handler.headers.get("X-TC-Region", "")
        try:
            params = json.loads(raw or "{}")
        except json.JSONDecodeError:
            params = None
        self.record({"action": action, "region": region, "params": params})
        self.wait()
        if params is None:
            return self._error(handler, "InvalidParameter", "The request body is not valid JSON.")
        auth = handler.headers.get("Authorization", "")
        if not auth.startswith("TC3-HMAC-SHA256 Credential="):
            return self._error(handler, "AuthFailure.SignatureFailure", "The request signature is missing.")
        if auth.split("Credential=", 1)[1].split("/", 1)[0] != self.access_key:
            return self._error(handler, "AuthFailure.SecretIdNotFound", "The SecretId is not found.")
        if handler.headers.get("X-TC-Version") != "2017-03-12":
            return self._error(handler, "InvalidParameterValue", "Version is not valid.")
        if action != "DescribeInstances":
            return self._error(handler, "InvalidAction", f"The action {action} is not found.")
        if region in self.denied_regions:
            return self._error(
                handler, "AuthFailure.UnauthorizedOperation",
                "The request is not authorized. Please check the CAM policy of the sub-account.",
            )
        if region not in self.instances:
            return self._error(handler, "UnsupportedRegion", f"The region {region} is not supported.")
        items = list(self.instances[region])
        if "InstanceIds" in params and "Filters" in params:
            return self._error(handler, "InvalidParameterValue.InstanceIdsFiltersConflict", "InstanceIds and Filters cannot be used together.")
        for flt in params.get("Filters") or []:
            name, values = flt.get("Name", ""), flt.get("Values")
            if not isinstance(values, list) or not values:
                return self._error(handler, "InvalidFilterValue", f"Filter {name} needs Values.")
            if name.startswith("tag:"):
                key = name[4:]
                items = [i for i in items if any(t["Key"] == key and t["Value"] in values for t in i["Tags"])]
                continue
            getter = self._FILTERS.get(name)
            if getter is None:
                return self._error(handler, "InvalidFilter", f"The filter {name} is not supported.")
            items = [i for i in items if set(getter(i)) & set(values)]
        if "InstanceIds" in params:
            items = [i for i in items if i["InstanceId"] in params["InstanceIds"]]
        limit = int(params.get("Limit", 20))
        if limit > 100:
            return self._error(handler, "InvalidParameterValue.LimitExceeded", "Limit must be at most 100.")
        offset = int(params.get("Offset", 0))
        size = min(limit, self.page_cap)
        page = items[offset : offset + size]
        return self._send(handler, 200, {
            "Response": {"TotalCount": len(items), "InstanceSet": page, "RequestId": str(uuid.uuid4())}
        })


# --- AWS (moto) ------------------------------------------------------------------------------------


def start_moto() -> Any:
    """moto's in-process EC2 server on 127.0.0.1 (ephemeral port); ``.stop()`` it when done.

    moto does not implement the ``network-interface.addresses.private-ip-address``
    filter; the fake is taught it with primary-address semantics (what moto models).
    """
    from moto.ec2 import utils as ec2_utils
    from moto.server import ThreadedMotoServer

    ec2_utils.filter_dict_attribute_mapping.setdefault("network-interface.addresses.private-ip-address", "private_ip")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    return server
