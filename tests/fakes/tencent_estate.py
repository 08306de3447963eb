"""A fake of Tencent Cloud's estate APIs (CDB, Redis, CLB, VPC, DNSPod, CloudAudit, COS) on loopback, for the real SDKs.

One threaded HTTP server answers every product, as an endpoint override points
them all at it. A TC3 call is routed by the service in its signature's
credential scope (what the real gateway checks against the host) and
``X-TC-Action``/``X-TC-Version``; the signature is recomputed with the
configured SecretKey, as the real API does. Answers have the real shapes:
``{"Response": {..., "RequestId"}}``, errors as HTTP 200 with
``{"Response": {"Error": {"Code", "Message"}}}``. COS calls (no ``X-TC-Action``)
answer XML, and check the ``q-ak`` of their Authorization.

A small coherent estate in ``ap-guangzhou``: databases ``orders-db`` (VIP
10.0.3.7) and ``prod-db-03`` (isolated), a Redis ``orders-redis``, a CLB with
an HTTPS:443 listener and two backends (one unhealthy), security groups (one
open to the world on 22), EIPs, a NAT gateway, DNSPod ``example.com`` (``api``
a CNAME to the CLB), two COS buckets (one public-read) and CloudAudit events
(bob isolated prod-db-03).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape

from tests.fakes.clouds import FakeCloud

REGION = "ap-guangzhou"
VERSIONS = {
    "cdb": "2017-03-20", "redis": "2018-04-12", "clb": "2018-03-17", "vpc": "2017-03-12",
    "dnspod": "2021-03-23", "cloudaudit": "2019-03-19",
}
"""The API version each service answers."""
LB_DOMAIN = "lb-api00001-1251234567.clb.gz.tencentclb.com"
WORLD_READ = "http://cam.qcloud.com/groups/global/AllUsers"


class ApiError(Exception):
    """An error answer (``Response.Error``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code)
        self.code = code
        self.message = message


def _cdb(iid: str, name: str, vip: str, status: int, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceId": iid, "InstanceName": name, "Status": status, "Vip": vip, "Vport": 3306,
        "WanDomain": "", "WanPort": 0, "WanStatus": 0, "EngineVersion": "8.0", "EngineType": "InnoDB",
        "DeviceType": "UNIVERSAL", "Memory": 4000, "Volume": 200, "Region": REGION, "Zone": "ap-guangzhou-3",
        "UniqVpcId": "vpc-gz01", "UniqSubnetId": "subnet-gz01", "InstanceType": 1, "TaskStatus": 0,
        "CreateTime": "2024-03-01 10:00:00", "TagList": [{"TagKey": "env", "TagValue": "prod"}], **extra,
    }


def _policy(index: int, protocol: str, port: str, action: str = "ACCEPT", **source: str) -> dict[str, Any]:
    return {"PolicyIndex": index, "Protocol": protocol, "Port": port, "Action": action, "CidrBlock": "",
            "Ipv6CidrBlock": "", "SecurityGroupId": "", "PolicyDescription": "", "ModifyTime": "2024-03-01 10:00:00",
            **source}


def _address(aid: str, ip: str, status: str, instance: str = "", kind: str = "") -> dict[str, Any]:
    return {"AddressId": aid, "AddressName": aid.replace("eip-", "eip "), "AddressStatus": status, "AddressIp": ip,
            "InstanceId": instance or None, "InstanceType": kind or None, "AddressType": "EIP",
            "PrivateAddressIp": None, "InternetServiceProvider": "BGP", "Bandwidth": 10,
            "CreatedTime": "2024-03-01T10:00:00Z", "TagSet": []}


def _backend(iid: str, name: str, ip: str, port: int) -> dict[str, Any]:
    return {"Type": "CVM", "InstanceId": iid, "InstanceName": name, "Port": port, "Weight": 10,
            "PrivateIpAddresses": [ip], "PublicIpAddresses": [], "RegisteredTime": "2024-03-01 10:00:00"}


def _record(rid: int, name: str, rtype: str, value: str, ttl: int = 600) -> dict[str, Any]:
    return {"RecordId": rid, "Name": name, "Type": rtype, "Value": value, "TTL": ttl, "Line": "默认", "LineId": "0",
            "Status": "ENABLE", "MonitorStatus": "", "Remark": "", "UpdatedOn": "2024-03-01 10:00:00", "Weight": None}


def _event(
    when: int, user: str, action: str, rtype: str, name: str, params: Mapping[str, Any], code: int = 0
) -> dict[str, Any]:
    detail = {"eventName": action, "eventTime": when, "errorCode": code, "requestParameters": json.dumps(params),
              "sourceIPAddress": "203.0.113.7", "userIdentity": {"principalId": "100000000002", "type": "CAMUser"}}
    return {
        "EventId": str(uuid.uuid4()), "Username": user, "EventTime": str(when), "EventName": action,
        "CloudAuditEvent": json.dumps(detail), "ResourceTypeCn": "", "ErrorCode": code,
        "SecretId": "AKIDfakeAuditedCallersKey", "EventSource": f"{rtype}.tencentcloudapi.com",
        "RequestID": str(uuid.uuid4()),
        "ResourceRegion": REGION, "AccountID": 100000000001, "SourceIPAddress": "203.0.113.7", "EventNameCn": "",
        "Resources": {"ResourceType": rtype, "ResourceName": name}, "EventRegion": REGION, "Location": "",
        "_ids": {params.get("InstanceId", ""), name},
    }


def default_state(now: float | None = None) -> dict[str, Any]:
    """The sample estate, keyed by what each API lists; events are placed relative to ``now``."""
    t = int(now or time.time())
    return {
        **_data_state(), **_balancer_state(), **_group_state(), **_edge_state(),
        "events": [
            _event(t - 3600, "bob", "IsolateDBInstance", "cdb", "prod-db-03", {"InstanceId": "cdb-prd00003"}),
            _event(t - 7200, "alice", "ModifyDBInstanceName", "cdb", "orders-db",
                   {"InstanceId": "cdb-ord00001", "InstanceName": "orders-db"}),
            _event(t - 5400, "mallory", "IsolateDBInstance", "cdb", "prod-db-03", {"InstanceId": "cdb-prd00003"}, 403),
        ],
    }


def _data_state() -> dict[str, Any]:
    """Databases and the cache."""
    return {
        "cdb": [
            _cdb("cdb-ord00001", "orders-db", "10.0.3.7", 1),
            _cdb("cdb-prd00003", "prod-db-03", "10.0.3.9", 5,
                 WanDomain="gz-cdb-prd3.sql.tencentcdb.com", WanPort=28001),
            _cdb("cdb-rep00004", "reports-db", "10.0.3.11", 0),
        ],
        "cdb_groups": {"cdb-ord00001": ["sg-db000001"], "cdb-prd00003": ["sg-db000001"]},
        "redis": [{
            "InstanceId": "crs-ord00001", "InstanceName": "orders-redis", "Status": 2, "WanIp": "10.0.4.12",
            "Port": 6379, "ProductType": "standalone", "CurrentRedisVersion": "6.2", "UniqVpcId": "vpc-gz01",
            "Region": REGION, "Size": 1024, "Createtime": "2024-03-01 10:00:00", "InstanceTags": [],
        }],
    }


def _balancer_state() -> dict[str, Any]:
    """The CLB, its listeners, targets and their health."""
    return {
        "clb": [{
            "LoadBalancerId": "lb-api00001", "LoadBalancerName": "api-clb", "LoadBalancerType": "OPEN", "Forward": 1,
            "Domain": "", "LoadBalancerDomain": LB_DOMAIN, "LoadBalancerVips": ["119.29.10.20"], "Status": 1,
            "VpcId": "vpc-gz01", "SecureGroups": ["sg-web00001"], "CreateTime": "2024-03-01 10:00:00", "Tags": [],
        }],
        "listeners": {"lb-api00001": [
            {"ListenerId": "lbl-https443", "ListenerName": "https", "Protocol": "HTTPS", "Port": 443},
            {"ListenerId": "lbl-tcp9000", "ListenerName": "legacy", "Protocol": "TCP", "Port": 9000},
        ]},
        "targets": {"lb-api00001": [
            {"ListenerId": "lbl-https443", "Protocol": "HTTPS", "Port": 443, "Targets": None, "Rules": [{
                "LocationId": "loc-api0001", "Domain": "api.example.com", "Url": "/",
                "Targets": [_backend("ins-gz000001", "gz-web-01", "10.66.0.11", 8080),
                            _backend("ins-gz000002", "gz-web-02", "10.66.0.12", 8080)],
            }]},
            {"ListenerId": "lbl-tcp9000", "Protocol": "TCP", "Port": 9000, "Targets": [], "Rules": None},
        ]},
        "health": {"lb-api00001": [
            {"ListenerId": "lbl-https443", "ListenerName": "https", "Protocol": "HTTPS", "Port": 443, "Rules": [{
                "LocationId": "loc-api0001", "Domain": "api.example.com", "Url": "/", "Targets": [
                    {"IP": "10.66.0.11", "Port": 8080, "HealthStatus": True, "TargetId": "ins-gz000001",
                     "HealthStatusDetail": "Alive", "Weight": 10},
                    {"IP": "10.66.0.12", "Port": 8080, "HealthStatus": False, "TargetId": "ins-gz000002",
                     "HealthStatusDetail": "Dead", "Weight": 10},
                ]}]},
        ]},
    }


def _group_state() -> dict[str, Any]:
    """Security groups and their policies."""
    return {
        "security_groups": [
            {"SecurityGroupId": "sg-web00001", "SecurityGroupName": "web", "SecurityGroupDesc": "public web tier",
             "IsDefault": False, "CreatedTime": "2024-03-01 10:00:00", "TagSet": []},
            {"SecurityGroupId": "sg-db000001", "SecurityGroupName": "db", "SecurityGroupDesc": "databases",
             "IsDefault": False, "CreatedTime": "2024-03-01 10:00:00", "TagSet": []},
            {"SecurityGroupId": "sg-default1", "SecurityGroupName": "default", "SecurityGroupDesc": "",
             "IsDefault": True, "CreatedTime": "2024-03-01 10:00:00", "TagSet": []},
        ],
        "policies": {
            "sg-web00001": {"Version": "3", "Ingress": [
                _policy(0, "TCP", "22", CidrBlock="0.0.0.0/0", PolicyDescription="ssh from anywhere"),
                _policy(1, "TCP", "80,443", CidrBlock="0.0.0.0/0"),
                _policy(2, "ALL", "ALL", "DROP", CidrBlock="0.0.0.0/0"),
            ], "Egress": [_policy(0, "ALL", "ALL", CidrBlock="0.0.0.0/0")]},
            "sg-db000001": {"Version": "1", "Ingress": [
                _policy(0, "TCP", "3306", SecurityGroupId="sg-web00001"),
                _policy(1, "TCP", "8000-8080", CidrBlock="10.0.0.0/16"),
                _policy(2, "UDP", "53", Ipv6CidrBlock="::/0"),
            ], "Egress": []},
        },
    }


def _edge_state() -> dict[str, Any]:
    """EIPs, the NAT gateway, DNSPod zones and COS buckets."""
    return {
        "addresses": [
            _address("eip-cvm00001", "119.29.1.11", "BIND", "ins-gz000001", "CVM"),
            _address("eip-nat00001", "119.29.2.2", "BIND", "nat-gz000001", "NAT"),
            _address("eip-free0001", "119.29.3.3", "UNBIND"),
        ],
        "nat_gateways": [{
            "NatGatewayId": "nat-gz000001", "NatGatewayName": "gz-nat", "State": "AVAILABLE", "VpcId": "vpc-gz01",
            "Zone": "ap-guangzhou-3", "SubnetId": "subnet-gz01", "InternetMaxBandwidthOut": 100,
            "PublicIpAddressSet": [{"AddressId": "eip-nat00001", "PublicIpAddress": "119.29.2.2", "IsBlocked": False}],
            "CreatedTime": "2024-03-01 10:00:00", "TagSet": [], "SecurityGroupSet": [],
        }],
        "domains": [
            {"DomainId": 1001, "Name": "example.com", "Status": "ENABLE", "TTL": 600, "RecordCount": 4},
            {"DomainId": 1002, "Name": "example.org", "Status": "ENABLE", "TTL": 600, "RecordCount": 0},
        ],
        "records": {"example.com": [
            _record(2001, "api", "CNAME", LB_DOMAIN + "."),
            _record(2002, "www", "A", "119.29.10.20"),
            _record(2003, "@", "NS", "f1g1ns1.dnspod.net.", 86400),
            _record(2004, "@", "NS", "f1g1ns2.dnspod.net.", 86400),
        ]},
        "buckets": [
            {"Name": "assets-1251234567", "Location": REGION, "CreationDate": "2024-03-01T10:00:00Z",
             "BucketType": "cos", "public": True},
            {"Name": "backups-1251234567", "Location": "ap-shanghai", "CreationDate": "2024-03-02T10:00:00Z",
             "BucketType": "cos", "public": False},
        ],
    }


class FakeTencentEstate(FakeCloud):
    """Every estate API the Tencent source calls, with paging, latency, throttling and CAM denials."""

    content_type = "application/json"

    def __init__(
        self,
        *,
        secret_id: str = "tc-secret-id",
        secret_key: str = "tc-secret-key",
        page_cap: int = 2,
        delay_s: float = 0.0,
        throttle_first: int = 0,
        denied_actions: Iterable[str] = (),
        extra_addresses: int = 0,
    ) -> None:
        super().__init__({}, access_key=secret_id, page_cap=page_cap, delay_s=delay_s)
        self.secret_key = secret_key
        self.throttle_first = throttle_first
        """Answer this many calls (of any action) with ``RequestLimitExceeded`` first."""
        self.throttled = 0
        self.denied_actions = set(denied_actions)
        """Actions (``DescribeDBInstances``, ``GetBucketACL``) the key's CAM policy does not allow."""
        self.state = default_state()
        self.state["addresses"] += [
            _address(f"eip-bulk{n:05d}", f"198.18.{n // 250}.{n % 250 + 1}", "UNBIND") for n in range(extra_addresses)
        ]
        self._gate = threading.Lock()

    # -- plumbing ------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def actions(self, action: str | None = None) -> list[dict[str, Any]]:
        """Recorded requests, optionally of one action."""
        return [r for r in self.calls() if action is None or r["action"] == action]

    def _throttle(self) -> bool:
        with self._gate:
            if self.throttled < self.throttle_first:
                self.throttled += 1
                return True
            return False

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "GET" and not handler.headers.get("X-TC-Action"):
            return self._cos(handler)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        action = handler.headers.get("X-TC-Action", "")
        region = handler.headers.get("X-TC-Region", "")
        auth = handler.headers.get("Authorization", "")
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
        service = scope[2] if len(scope) == 4 else ""
        try:
            params = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            params = None
        self.record({"t": time.monotonic(), "service": service, "action": action, "region": region, "params": params})
        self.wait()
        try:
            if params is None:
                raise ApiError("InvalidParameter", "The request body is not valid JSON.")
            self._check_signature(handler, raw, scope)
            if handler.headers.get("X-TC-Version") != VERSIONS.get(service):
                raise ApiError("InvalidParameterValue", "Version is not valid.")
            if self._throttle():
                raise ApiError("RequestLimitExceeded", "Your current request times equals to `20` in a second.")
            if action in self.denied_actions:
                raise ApiError("AuthFailure.UnauthorizedOperation",
                               f"you are not authorized to perform operation ({service}:{action})")
            method = getattr(self, f"_{service}_{action}", None)
            if method is None:
                raise ApiError("InvalidAction", f"The action {action} is not found.")
            answer = method(params, region)
        except ApiError as err:
            answer = {"Error": {"Code": err.code, "Message": err.message}}
        return self._send(handler, 200, {"Response": {**answer, "RequestId": str(uuid.uuid4())}})

    def _check_signature(self, handler: BaseHTTPRequestHandler, raw: bytes, scope: list[str]) -> None:
        """TC3-HMAC-SHA256 as the real gateway verifies it: known SecretId, then the signature with its key."""
        auth = handler.headers.get("Authorization", "")
        if not auth.startswith("TC3-HMAC-SHA256 Credential=") or len(scope) != 4:
            raise ApiError("AuthFailure.SignatureFailure", "The request signature is missing.")
        secret_id, date, service, _ = scope
        if secret_id != self.access_key:
            raise ApiError("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
        headers = f"content-type:{handler.headers.get('Content-Type', '')}\nhost:{handler.headers.get('Host', '')}\n"
        canonical = f"POST\n/\n\n{headers}\ncontent-type;host\n{hashlib.sha256(raw).hexdigest()}"
        to_sign = (f"TC3-HMAC-SHA256\n{handler.headers.get('X-TC-Timestamp', '')}\n{date}/{service}/tc3_request\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")

        def mac(key: bytes, text: str) -> bytes:
            return hmac.new(key, text.encode(), hashlib.sha256).digest()

        key = mac(mac(mac(("TC3" + self.secret_key).encode(), date), service), "tc3_request")
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, auth.rsplit("Signature=", 1)[-1].strip()):
            raise ApiError("AuthFailure.SignatureFailure", "The provided credentials could not be validated.")

    def _page(
        self, items: list[Any], params: Mapping[str, Any], *, max_limit: int = 100, as_text: bool = False
    ) -> list[Any]:
        """``Offset``/``Limit`` of one request (strings where the API types them so), capped at ``page_cap``."""
        for name in ("Offset", "Limit"):
            if name in params and isinstance(params[name], str) != as_text:
                raise ApiError("InvalidParameter", f"The value type of parameter `{name}` is not valid.")
        offset, limit = int(params.get("Offset") or 0), int(params.get("Limit") or 20)
        if limit > max_limit or limit < 1 or offset < 0:
            raise ApiError("InvalidParameterValue.Limit", f"Limit must be between 1 and {max_limit}.")
        return items[offset : offset + min(limit, self.page_cap)]

    def _here(self, key: str, region: str) -> list[Any]:
        """A regional list: the sample estate lives in ``ap-guangzhou`` only."""
        return list(self.state[key]) if region == REGION else []

    # -- TC3 actions (named _<service>_<Action>) ----------------------------------

    def _cdb_DescribeDBInstances(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("cdb", region)
        return {"TotalCount": len(items), "Items": self._page(items, params, max_limit=2000)}

    def _cdb_DescribeDBSecurityGroups(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        iid = params.get("InstanceId", "")
        if iid not in {i["InstanceId"] for i in self.state["cdb"]}:
            raise ApiError("InvalidParameter", f"instance {iid} not found")
        groups = self.state["cdb_groups"].get(iid, [])
        return {"Groups": [{"SecurityGroupId": g, "SecurityGroupName": g, "ProjectId": 0, "Inbound": [], "Outbound": []}
                           for g in groups]}

    def _redis_DescribeInstances(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("redis", region)
        return {"TotalCount": len(items), "InstanceSet": self._page(items, params, max_limit=1000)}

    def _clb_DescribeLoadBalancers(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("clb", region)
        return {"TotalCount": len(items), "LoadBalancerSet": self._page(items, params)}

    def _lb(self, params: Mapping[str, Any]) -> str:
        lb = params.get("LoadBalancerId", "")
        if lb not in {i["LoadBalancerId"] for i in self.state["clb"]}:
            raise ApiError("InvalidParameter.LBIdNotFound", f"LoadBalancerId {lb} not found.")
        return str(lb)

    def _clb_DescribeListeners(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        found = self.state["listeners"].get(self._lb(params), [])
        return {"Listeners": found, "TotalCount": len(found)}

    def _clb_DescribeTargets(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        return {"Listeners": self.state["targets"].get(self._lb(params), [])}

    def _clb_DescribeTargetHealth(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        ids = params.get("LoadBalancerIds") or []
        if not isinstance(ids, list) or not ids or len(ids) > 20:
            raise ApiError("InvalidParameterValue.Length", "LoadBalancerIds takes 1 to 20 ids.")
        return {"LoadBalancers": [
            {"LoadBalancerId": lb, "LoadBalancerName": lb, "Listeners": self.state["health"].get(lb, [])} for lb in ids
        ]}

    def _vpc_DescribeSecurityGroups(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("security_groups", region)
        return {"TotalCount": len(items), "SecurityGroupSet": self._page(items, params, as_text=True)}

    def _vpc_DescribeSecurityGroupPolicies(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        sg = params.get("SecurityGroupId", "")
        if sg not in {g["SecurityGroupId"] for g in self.state["security_groups"]}:
            raise ApiError("ResourceNotFound", f"The security group {sg} does not exist.")
        return {"SecurityGroupPolicySet": self.state["policies"].get(sg, {"Version": "0", "Ingress": [], "Egress": []})}

    def _vpc_DescribeAddresses(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("addresses", region)
        return {"TotalCount": len(items), "AddressSet": self._page(items, params)}

    def _vpc_DescribeNatGateways(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = self._here("nat_gateways", region)
        return {"TotalCount": len(items), "NatGatewaySet": self._page(items, params)}

    def _dnspod_DescribeDomainList(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        items = list(self.state["domains"])
        page = self._page(items, params, max_limit=3000)
        if not page:
            raise ApiError("ResourceNotFound.NoDataOfDomain", "No domains in this account.")
        return {"DomainCountInfo": {"AllTotal": len(items), "DomainTotal": len(items), "MineTotal": len(items)},
                "DomainList": page}

    def _dnspod_DescribeRecordList(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        domain = params.get("Domain", "")
        if domain not in {d["Name"] for d in self.state["domains"]}:
            raise ApiError("InvalidParameter.DomainNotExist", "The domain does not exist.")
        items = list(self.state["records"].get(domain, []))
        page = self._page(items, params, max_limit=3000)
        if not page:
            raise ApiError("ResourceNotFound.NoDataOfRecord", "No records.")
        return {"RecordCountInfo": {"SubdomainCount": len(items), "ListCount": len(page), "TotalCount": len(items)},
                "RecordList": page}

    def _cloudaudit_LookUpEvents(self, params: Mapping[str, Any], region: str) -> dict[str, Any]:
        start, end = params.get("StartTime"), params.get("EndTime")
        if not isinstance(start, int) or not isinstance(end, int) or start > end:
            raise ApiError("InvalidParameterValue.Time", "StartTime and EndTime must be unix seconds, start first.")
        size = int(params.get("MaxResults") or 10)
        if not 1 <= size <= 50:
            raise ApiError("InvalidParameterValue.MaxResult", "MaxResults must be between 1 and 50.")
        events = [e for e in self.state["events"] if start <= int(e["EventTime"]) <= end]
        for attr in params.get("LookupAttributes") or []:
            key, value = attr.get("AttributeKey"), attr.get("AttributeValue")
            if key not in ("ResourceId", "ResourceName", "EventName", "Username"):
                raise ApiError("InvalidParameterValue.AttributeKey", f"AttributeKey {key} is not valid.")
            if key in ("ResourceId", "ResourceName"):
                events = [e for e in events if value in e["_ids"]]
            else:
                events = [e for e in events if e[key] == value]
        events.sort(key=lambda e: -int(e["EventTime"]))
        offset = self._offset(params["NextToken"]) if params.get("NextToken") else 0
        if offset is None:
            raise ApiError("InvalidParameterValue.NextToken", "NextToken is not valid.")
        page = events[offset : offset + min(size, self.page_cap)]
        over = offset + len(page) >= len(events)
        return {"Events": [{k: v for k, v in e.items() if k != "_ids"} for e in page], "ListOver": over,
                "NextToken": "" if over else self._token(offset + len(page)), "TotalCount": len(events)}

    # -- COS -------------------------------------------------------------------------

    def _cos(self, handler: BaseHTTPRequestHandler) -> None:
        query = dict(parse_qsl(urlsplit(handler.path).query, keep_blank_values=True))
        host = handler.headers.get("Host", "")
        acl = "acl" in query
        bucket = next((b for b in self.state["buckets"] if host.startswith(b["Name"] + ".cos.")), None)
        action = "GetBucketACL" if acl else "GetService"
        self.record({"t": time.monotonic(), "service": "cos", "action": action,
                     "region": bucket["Location"] if bucket else "", "params": query})
        self.wait()
        auth = handler.headers.get("Authorization", "")
        if "q-sign-algorithm=sha1" not in auth or f"q-ak={self.access_key}&" not in auth:
            return self._cos_error(handler, 403, "InvalidAccessKeyId", "The access key Id you provided is invalid.")
        if self._throttle():
            return self._cos_error(handler, 503, "SlowDown", "Please reduce your request rate.")
        if action in self.denied_actions:
            return self._cos_error(handler, 403, "AccessDenied", "Access Denied.")
        if not acl:
            return self._xml(handler, self._service_xml())
        if bucket is None:
            return self._cos_error(handler, 404, "NoSuchBucket", "The specified bucket does not exist.")
        return self._xml(handler, self._acl_xml(bool(bucket["public"])))

    def _service_xml(self) -> str:
        rows = "".join(
            f"<Bucket><Name>{escape(b['Name'])}</Name><Location>{b['Location']}</Location>"
            f"<CreationDate>{b['CreationDate']}</CreationDate><BucketType>{b['BucketType']}</BucketType></Bucket>"
            for b in self.state["buckets"]
        )
        uin = "qcs::cam::uin/100000000001:uin/100000000001"
        owner = f"<Owner><ID>{uin}</ID><DisplayName>100000000001</DisplayName></Owner>"
        return f"<ListAllMyBucketsResult>{owner}<Buckets>{rows}</Buckets></ListAllMyBucketsResult>"

    @staticmethod
    def _acl_xml(public: bool) -> str:
        xsi = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
        uin = "qcs::cam::uin/100000000001:uin/100000000001"
        grants = (f'<Grant><Grantee {xsi} xsi:type="CanonicalUser"><ID>{uin}</ID><DisplayName>{uin}</DisplayName>'
                  "</Grantee><Permission>FULL_CONTROL</Permission></Grant>")
        if public:
            grants += (f'<Grant><Grantee {xsi} xsi:type="Group"><URI>{WORLD_READ}</URI></Grantee>'
                       "<Permission>READ</Permission></Grant>")
        return (f"<AccessControlPolicy><Owner><ID>{uin}</ID><DisplayName>{uin}</DisplayName></Owner>"
                f"<AccessControlList>{grants}</AccessControlList></AccessControlPolicy>")

    def _xml(self, handler: BaseHTTPRequestHandler, text: str, status: int = 200) -> None:
        body = text.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("x-cos-request-id", base64.b64encode(uuid.uuid4().bytes).decode())
        handler.send_header("Date", datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT"))
        handler.end_headers()
        handler.wfile.write(body)

    def _cos_error(self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        text = (f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{handler.headers.get('Host', '')}"
                f"</Resource><RequestId>{uuid.uuid4()}</RequestId><TraceId>trace</TraceId></Error>")
        self._xml(handler, text, status)
