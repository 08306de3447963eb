"""A fake Alibaba Cloud estate on 127.0.0.1 (RDS, KVStore, SLB, VPC, ECS groups, Alidns, ActionTrail, OSS) for the SDKs.

One threaded HTTP server (:class:`~tests.fakes.clouds.FakeCloud`'s plumbing)
answers every product, as the SDKs are all pointed at one endpoint:

* OpenAPI (RPC style) calls are dispatched by ``x-acs-action`` and ``x-acs-version`` (r-kvstore's
  ``DescribeInstances`` is 2015-01-01, ECS's 2014-05-26), checked for the ``ACS3-HMAC-SHA256`` signature
  header's credential, and answered with the real shapes (``{"Items": {"DBInstance": [...]}}``…) and paging
  (``PageNumber``/``PageSize`` with ``TotalCount``, or ``NextToken``/``MaxResults`` where the real API has them).
  Errors are HTTP 4xx with ``{"Code", "Message", "RequestId", "HostId"}``.
* OSS (REST) ``GET /`` (``ListBuckets``, paged by ``marker``/``max-keys``) and ``GET /<bucket>/?acl``
  (``GetBucketAcl``), checked for the ``OSS4-HMAC-SHA256`` header's credential; errors are XML.

Options: ``access_secret`` (verify OpenAPI signatures with it, not only the key id), ``delay_s`` (latency),
``throttle_first`` (that many OpenAPI calls answer ``Throttling.User``), ``denied_actions`` (``Forbidden.RAM``,
or OSS ``AccessDenied``). Pages are capped at ``page_cap`` records so a handful of records exercises paging.
Every request is recorded with its ``time.monotonic()``, action and region.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from tests.fakes.clouds import FakeCloud

__all__ = [
    "AliyunEstateState",
    "FakeAliyunEstate",
    "acs3_signed",
    "bucket",
    "dns_record",
    "eip",
    "net_info",
    "permission",
    "rds_instance",
    "sample_estate",
    "security_group",
    "slb",
    "trail_event",
]

Record = dict[str, Any]

HANGZHOU = "cn-hangzhou"


@dataclass
class AliyunEstateState:
    """What the fake account holds: per-region records as the APIs return them; domains and buckets are global."""

    databases: dict[str, list[Record]] = field(default_factory=dict)
    net_info: dict[str, list[Record]] = field(default_factory=dict)
    """``DBInstanceNetInfo`` records by instance id."""
    caches: dict[str, list[Record]] = field(default_factory=dict)
    load_balancers: dict[str, list[Record]] = field(default_factory=dict)
    lb_attributes: dict[str, Record] = field(default_factory=dict)
    """``DescribeLoadBalancerAttribute`` extras (listeners, default backends) by load balancer id."""
    lb_health: dict[str, list[Record]] = field(default_factory=dict)
    """``DescribeHealthStatus`` ``BackendServer`` rows by load balancer id."""
    security_groups: dict[str, list[Record]] = field(default_factory=dict)
    permissions: dict[str, list[Record]] = field(default_factory=dict)
    """``Permission`` records by group id."""
    eips: dict[str, list[Record]] = field(default_factory=dict)
    nat_gateways: dict[str, list[Record]] = field(default_factory=dict)
    domains: list[Record] = field(default_factory=list)
    records: dict[str, list[Record]] = field(default_factory=dict)
    """``Record`` records by domain name."""
    buckets: list[Record] = field(default_factory=list)
    """``{"Name", "Region", "StorageClass", "CreationDate", "Acl"}``."""
    events: dict[str, list[Record]] = field(default_factory=dict)
    """ActionTrail events by region."""

    @property
    def regions(self) -> set[str]:
        """Every region that has something."""
        tables = (self.databases, self.caches, self.load_balancers, self.security_groups, self.eips, self.nat_gateways)
        return {region for table in tables for region in table} | set(self.events)


def _ago(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample_estate() -> AliyunEstateState:
    """A small coherent estate in cn-hangzhou: the orders stack behind api.example.com, and who stopped prod-db-03."""
    state = AliyunEstateState()
    _data_tier(state)
    _load_balancers(state)
    _network(state)
    _dns_buckets_trail(state)
    return state


VPC = "vpc-bp1prod"


def _data_tier(state: AliyunEstateState) -> None:
    state.databases[HANGZHOU] = [
        rds_instance("rm-bp1db01", "prod-db-01", "Running"),
        rds_instance("rm-bp1db02", "stg-db-02", "Running", engine="PostgreSQL", version="15.0"),
        rds_instance("rm-bp1db03", "prod-db-03", "Stopped"),
    ]
    state.net_info = {
        "rm-bp1db01": [net_info("rm-bp1db01.mysql.rds.aliyuncs.com", "10.0.3.7", 3306)],
        "rm-bp1db02": [net_info("rm-bp1db02.pg.rds.aliyuncs.com", "10.0.3.8", 5432)],
        "rm-bp1db03": [
            net_info("rm-bp1db03.mysql.rds.aliyuncs.com", "10.0.3.9", 3306),
            net_info("rm-bp1db03o.mysql.rds.aliyuncs.com", "47.96.5.9", 3306, ip_type="Public"),
        ],
    }
    state.caches[HANGZHOU] = [
        {
            "InstanceId": "r-bp1orders", "InstanceName": "orders-redis", "InstanceStatus": "Normal",
            "InstanceType": "Redis", "EngineVersion": "7.0", "InstanceClass": "redis.master.small.default",
            "ArchitectureType": "standard", "ConnectionDomain": "r-bp1orders.redis.rds.aliyuncs.com",
            "PrivateIp": "10.0.3.20", "Port": 6379, "RegionId": HANGZHOU, "ZoneId": "cn-hangzhou-h",
            "NetworkType": "VPC", "VpcId": VPC, "VSwitchId": "vsw-bp1a", "CreateTime": "2024-03-01T02:00:00Z",
            "Tags": {"Tag": [{"Key": "owner", "Value": "orders-team"}]},
        }
    ]


def _load_balancers(state: AliyunEstateState) -> None:
    state.load_balancers[HANGZHOU] = [
        slb("lb-bp1api", "api-slb", "47.96.2.20", "internet"),
        slb("lb-bp1int", "internal-slb", "172.16.0.50", "intranet"),
    ]
    https = {"ListenerPort": 443, "ListenerProtocol": "https"}
    state.lb_attributes = {
        "lb-bp1api": {
            "ListenerPortsAndProtocol": {"ListenerPortAndProtocol": [https]},
            "ListenerPorts": {"ListenerPort": [443]},
            "BackendServers": {"BackendServer": [
                {"ServerId": "i-bp1web01", "Weight": 100, "Type": "ecs"},
                {"ServerId": "i-bp1web02", "Weight": 100, "Type": "ecs"},
            ]},
        },
        "lb-bp1int": {
            "ListenerPortsAndProtocol": {"ListenerPortAndProtocol": []},
            "BackendServers": {"BackendServer": []},
        },
    }
    state.lb_health = {
        "lb-bp1api": [
            {"ListenerPort": 443, "Protocol": "https", "ServerId": "i-bp1web01", "ServerIp": "172.16.1.10",
             "Port": 8443, "ServerHealthStatus": "normal"},
            {"ListenerPort": 443, "Protocol": "https", "ServerId": "i-bp1web02", "ServerIp": "172.16.1.11",
             "Port": 8443, "ServerHealthStatus": "abnormal"},
        ],
        "lb-bp1int": [],
    }


def _network(state: AliyunEstateState) -> None:
    state.security_groups[HANGZHOU] = [
        security_group("sg-bp1web", "web-sg", "web tier"),
        security_group("sg-bp1db", "db-sg", "databases"),
        security_group("sg-bp1ops", "ops-sg", "bastion", kind="enterprise"),
    ]
    state.permissions = {
        "sg-bp1web": [
            permission("ingress", "TCP", "443/443", source="0.0.0.0/0"),
            permission("ingress", "TCP", "22/22", source="0.0.0.0/0", description="ssh from anywhere (temporary)"),
            permission("egress", "ALL", "-1/-1", dest="0.0.0.0/0"),
        ],
        "sg-bp1db": [
            permission("ingress", "TCP", "3306/3306", group="sg-bp1web"),
            permission("ingress", "ALL", "-1/-1", source="0.0.0.0/0", policy="Drop", priority="100"),
        ],
        "sg-bp1ops": [permission("ingress", "TCP", "22/22", source="10.10.0.0/16")],
    }
    state.eips[HANGZHOU] = [
        eip("eip-bp1web01", "47.96.1.10", "i-bp1web01", "EcsInstance"),
        eip("eip-bp1nat", "47.96.3.30", "ngw-bp1prod", "Nat"),
        eip("eip-bp1spare", "47.96.3.31", "", ""),
    ]
    nat_ip = {"AllocationId": "eip-bp1nat", "IpAddress": "47.96.3.30", "UsingStatus": "UsedBySnatTable"}
    state.nat_gateways[HANGZHOU] = [
        {
            "NatGatewayId": "ngw-bp1prod", "Name": "prod-nat", "Status": "Available", "VpcId": VPC,
            "RegionId": HANGZHOU, "NatType": "Enhanced", "Spec": "Small", "NetworkType": "internet",
            "CreationTime": "2024-01-12T00:00:00Z", "IpLists": {"IpList": [nat_ip]},
            "NatGatewayPrivateInfo": {"PrivateIpAddress": "172.16.0.9", "VswitchId": "vsw-bp1a"},
            "Tags": {"Tag": []},
        }
    ]


def _dns_buckets_trail(state: AliyunEstateState) -> None:
    state.domains = [{"DomainId": "d-1", "DomainName": "example.com", "RecordCount": 4, "Tags": {"Tag": []}}]
    state.records = {
        "example.com": [
            dns_record("example.com", "api", "A", "47.96.2.20", "r-1"),
            dns_record("example.com", "www", "CNAME", "api.example.com", "r-2"),
            dns_record("example.com", "db", "A", "10.0.3.7", "r-3"),
            dns_record("example.com", "@", "MX", "mx1.example.net", "r-4", priority=10),
        ]
    }
    state.buckets = [
        bucket("example-assets", HANGZHOU, "Standard", "2024-02-01", "public-read"),
        bucket("example-logs", HANGZHOU, "IA", "2024-02-02", "private"),
        bucket("example-backup-bj", "cn-beijing", "Archive", "2024-02-03", "private"),
    ]
    rds = "ACS::RDS::DBInstance"
    state.events[HANGZHOU] = [
        trail_event("StopDBInstance", "rm-bp1db03", rds, "alice", "203.0.113.5", _ago(3)),
        trail_event("DescribeDBInstanceAttribute", "rm-bp1db03", rds, "bob", "198.51.100.7", _ago(2)),
        trail_event("AuthorizeSecurityGroup", "sg-bp1web", "ACS::ECS::SecurityGroup", "carol", "198.51.100.8",
                    _ago(30)),
        trail_event("RestartDBInstance", "rm-bp1db01", rds, "bob", "198.51.100.7", _ago(5), error="Forbidden.RAM"),
    ]


# --- record builders, shaped like the SDK models' to_map() --------------------------------------


def rds_instance(instance_id: str, name: str, status: str, *, engine: str = "MySQL", version: str = "8.0") -> Record:
    """One ``DescribeDBInstances`` ``DBInstance``."""
    return {
        "DBInstanceId": instance_id, "DBInstanceDescription": name, "DBInstanceStatus": status, "Engine": engine,
        "EngineVersion": version, "DBInstanceClass": "mysql.n2.medium.1", "DBInstanceType": "Primary",
        "RegionId": HANGZHOU, "ZoneId": "cn-hangzhou-h", "VpcId": VPC, "VSwitchId": "vsw-bp1a",
        "InstanceNetworkType": "VPC", "ConnectionMode": "Standard", "PayType": "Postpaid",
        "Category": "HighAvailability",
        "CreateTime": "2024-01-15T03:00:00Z", "LockMode": "Unlock",
        "ReadOnlyDBInstanceIds": {"ReadOnlyDBInstanceId": []},
    }


def net_info(host: str, ip: str, port: int, *, ip_type: str = "Private") -> Record:
    """One ``DescribeDBInstanceNetInfo`` ``DBInstanceNetInfo``."""
    return {
        "ConnectionString": host, "IPAddress": ip, "IPType": ip_type, "Port": str(port),
        "ConnectionStringType": "Normal", "VPCId": "vpc-bp1prod" if ip_type == "Private" else "",
        "VSwitchId": "vsw-bp1a" if ip_type == "Private" else "", "Upgradeable": "Disabled",
        "SecurityIPGroups": {"securityIPGroup": []}, "DBInstanceWeights": {"DBInstanceWeight": []},
    }


def slb(lb_id: str, name: str, address: str, address_type: str) -> Record:
    """One ``DescribeLoadBalancers`` ``LoadBalancer``."""
    return {
        "LoadBalancerId": lb_id, "LoadBalancerName": name, "Address": address, "AddressType": address_type,
        "AddressIPVersion": "ipv4", "LoadBalancerStatus": "active", "NetworkType": "vpc", "VpcId": VPC,
        "VSwitchId": "vsw-bp1a" if address_type == "intranet" else "", "RegionId": HANGZHOU,
        "MasterZoneId": "cn-hangzhou-h", "SlaveZoneId": "cn-hangzhou-g", "LoadBalancerSpec": "slb.s2.small",
        "CreateTime": "2024-01-20T00:00Z", "PayType": "PayOnDemand",
        "Tags": {"Tag": [{"TagKey": "env", "TagValue": "prod"}]},
    }


def permission(direction: str, protocol: str, ports: str, *, source: str = "", dest: str = "", group: str = "",
               policy: str = "Accept", priority: str = "1", description: str = "") -> Record:
    """One ``DescribeSecurityGroupAttribute`` ``Permission`` (``Priority`` is a string in the real answer)."""
    return {
        "Direction": direction, "IpProtocol": protocol, "PortRange": ports, "SourceCidrIp": source, "DestCidrIp": dest,
        "SourceGroupId": group, "Ipv6SourceCidrIp": "", "Ipv6DestCidrIp": "", "DestGroupId": "", "Policy": policy,
        "Priority": priority, "NicType": "intranet", "Description": description, "SourcePortRange": "",
        "CreateTime": "2024-01-10T00:00:00Z", "SecurityGroupRuleId": f"sgr-{uuid.uuid4().hex[:12]}",
    }


def security_group(group_id: str, name: str, description: str, *, kind: str = "normal") -> Record:
    """One ``DescribeSecurityGroups`` ``SecurityGroup``."""
    return {
        "SecurityGroupId": group_id, "SecurityGroupName": name, "Description": description, "VpcId": VPC,
        "SecurityGroupType": kind, "CreationTime": "2024-01-10T00:00:00Z", "Tags": {"Tag": []},
    }


def bucket(name: str, region: str, storage_class: str, created: str, acl: str) -> Record:
    """One bucket as the fake keeps it (``ListBuckets`` fields plus its ACL)."""
    created_at = f"{created}T00:00:00.000Z"
    return {"Name": name, "Region": region, "StorageClass": storage_class, "CreationDate": created_at, "Acl": acl}


def eip(allocation_id: str, address: str, instance_id: str, instance_type: str) -> Record:
    """One ``DescribeEipAddresses`` ``EipAddress``."""
    return {
        "AllocationId": allocation_id, "IpAddress": address, "Status": "InUse" if instance_id else "Available",
        "InstanceId": instance_id, "InstanceType": instance_type, "InstanceRegionId": HANGZHOU if instance_id else "",
        "RegionId": HANGZHOU, "Bandwidth": "5", "ISP": "BGP", "InternetChargeType": "PayByTraffic",
        "AllocationTime": "2024-01-12T00:00:00Z", "Name": "", "Tags": {"Tag": []},
        "OperationLocks": {"LockReason": []},
    }


def dns_record(domain: str, rr: str, kind: str, value: str, record_id: str, *, priority: int | None = None) -> Record:
    """One Alidns ``DescribeDomainRecords`` ``Record``."""
    out: Record = {
        "DomainName": domain, "RR": rr, "Type": kind, "Value": value, "RecordId": record_id, "TTL": 600,
        "Line": "default", "Status": "ENABLE", "Locked": False, "Weight": 1,
    }
    if priority is not None:
        out["Priority"] = priority
    return out


def trail_event(name: str, resource: str, resource_type: str, user: str, source_ip: str, when: str, *,
                error: str = "") -> Record:
    """One ActionTrail ``LookupEvents`` event, with the caller's access key id as the real one carries it."""
    event: Record = {
        "eventId": str(uuid.uuid4()), "eventVersion": 1, "eventName": name, "eventType": "ApiCall",
        "eventSource": "rds.aliyuncs.com", "eventTime": when, "acsRegion": HANGZHOU, "resourceName": resource,
        "resourceType": resource_type, "sourceIpAddress": source_ip, "serviceName": "Rds",
        "requestId": str(uuid.uuid4()), "userAgent": "AlibabaCloud (Linux) Python/3.11",
        "userIdentity": {"type": "ram-user", "userName": user, "principalId": f"2038{sum(map(ord, user)):08d}",
                         "accountId": "1234567890123456", "accessKeyId": f"LTAI-{user}-key-id"},
        "requestParameters": {"DBInstanceId": resource, "RegionId": HANGZHOU},
    }
    if error:
        event["errorCode"] = error
        event["errorMessage"] = "User not authorized to operate on the specified resource."
    return event


def acs3_signed(handler: BaseHTTPRequestHandler, body: str, auth: str, secret: str) -> bool:
    """Whether ``auth`` is this request's ``ACS3-HMAC-SHA256`` signature with ``secret`` (as the gateway checks)."""
    fields = dict(part.split("=", 1) for part in auth.removeprefix("ACS3-HMAC-SHA256 ").split(",") if "=" in part)
    signed = fields.get("SignedHeaders", "").split(";")
    payload = handler.headers.get("x-acs-content-sha256", "")
    if payload != hashlib.sha256(body.encode()).hexdigest() or "x-acs-date" not in signed:
        return False
    split = urlsplit(handler.path)
    query = sorted(parse_qsl(split.query, keep_blank_values=True))
    canonical_query = "&".join(f"{k}={quote(v, safe='~')}" for k, v in query)
    headers = "".join(f"{name}:{(handler.headers.get(name) or '').strip()}\n" for name in signed)
    canonical = "\n".join([handler.command, split.path or "/", canonical_query, headers, ";".join(signed), payload])
    to_sign = "ACS3-HMAC-SHA256\n" + hashlib.sha256(canonical.encode()).hexdigest()
    expected = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("Signature", ""))


# --- the server ------------------------------------------------------------------------------------


_OWNER = "<Owner><ID>1234567890123456</ID><DisplayName>1234567890123456</DisplayName></Owner>"


class _FakeOss:
    """OSS's REST side of the fake: ``ListBuckets`` and ``GetBucketAcl``, signed with ``OSS4-HMAC-SHA256``."""

    state: AliyunEstateState
    access_key: str
    page_cap: int
    denied_actions: set[str]
    record: Callable[[dict[str, Any]], None]
    wait: Callable[[], None]

    def _oss(self, handler: BaseHTTPRequestHandler, auth: str) -> None:
        split = urlsplit(handler.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        bucket = unquote(split.path.strip("/"))
        action = "GetBucketAcl" if bucket and "acl" in query else ("ListBuckets" if not bucket else "Unsupported")
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
        region = scope[2] if len(scope) > 2 else ""
        self.record({"time": time.monotonic(), "action": action, "version": "oss", "region": region, "params": query})
        self.wait()
        if not auth.startswith("OSS4-HMAC-SHA256 Credential="):
            return self._oss_error(handler, 403, "AccessDenied", "AccessDenied: the request is not signed.")
        if scope[0] != self.access_key:
            message = "The OSS Access Key Id you provided does not exist in our records."
            return self._oss_error(handler, 403, "InvalidAccessKeyId", message)
        if action in self.denied_actions:
            message = "You have no right to access this object because of bucket acl."
            return self._oss_error(handler, 403, "AccessDenied", message)
        if action == "ListBuckets":
            return self._list_buckets(handler, query)
        found = next((b for b in self.state.buckets if b["Name"] == bucket), None)
        if found is None or action != "GetBucketAcl":
            return self._oss_error(handler, 404, "NoSuchBucket", "The specified bucket does not exist.")
        self._xml(handler, 200, (
            f"<AccessControlPolicy>{_OWNER}"
            f"<AccessControlList><Grant>{escape(found['Acl'])}</Grant></AccessControlList></AccessControlPolicy>"
        ))

    def _list_buckets(self, handler: BaseHTTPRequestHandler, query: Mapping[str, str]) -> None:
        buckets = sorted(self.state.buckets, key=lambda b: b["Name"])
        marker = query.get("marker", "")
        after = [b for b in buckets if b["Name"] > marker]
        size = min(int(query.get("max-keys") or 100), 1000, self.page_cap)
        page, more = after[:size], len(after) > size
        rows = "".join(
            "<Bucket>"
            f"<CreationDate>{b['CreationDate']}</CreationDate>"
            f"<ExtranetEndpoint>oss-{b['Region']}.aliyuncs.com</ExtranetEndpoint>"
            f"<IntranetEndpoint>oss-{b['Region']}-internal.aliyuncs.com</IntranetEndpoint>"
            f"<Location>oss-{b['Region']}</Location><Name>{escape(b['Name'])}</Name>"
            f"<Region>{b['Region']}</Region><StorageClass>{b['StorageClass']}</StorageClass>"
            "</Bucket>"
            for b in page
        )
        truncated = "true" if more else "false"
        paging = f"<Marker>{escape(marker)}</Marker><MaxKeys>{size}</MaxKeys><IsTruncated>{truncated}</IsTruncated>"
        if more:
            paging += f"<NextMarker>{escape(page[-1]['Name'])}</NextMarker>"
        self._xml(handler, 200, (
            f"<ListAllMyBucketsResult>{paging}{_OWNER}<Buckets>{rows}</Buckets></ListAllMyBucketsResult>"
        ))

    def _oss_error(self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        self._xml(handler, status, (
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message><RequestId>{uuid.uuid4().hex}</RequestId>"
            "<HostId>oss-cn-hangzhou.aliyuncs.com</HostId><EC>0003-00000001</EC></Error>"
        ))

    def _xml(self, handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n' + text).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("x-oss-request-id", uuid.uuid4().hex)
        handler.end_headers()
        handler.wfile.write(body)


class FakeAliyunEstate(_FakeOss, FakeCloud):
    """Every estate API of one Alibaba Cloud account, on one loopback port."""

    def __init__(
        self,
        state: AliyunEstateState | None = None,
        *,
        access_key: str = "test-key-id",
        access_secret: str | None = None,
        page_cap: int = 2,
        delay_s: float = 0.0,
        throttle_first: int = 0,
        denied_actions: Iterable[str] = (),
    ) -> None:
        super().__init__({}, access_key=access_key, page_cap=page_cap, delay_s=delay_s)
        self.state = state if state is not None else sample_estate()
        self.access_secret = access_secret
        """When set, OpenAPI signatures are verified with it (``SignatureDoesNotMatch`` otherwise)."""
        self.throttle_left = throttle_first
        """OpenAPI calls still to answer ``Throttling.User``."""
        self.denied_actions = set(denied_actions)
        self.routes: dict[tuple[str, str], Callable[[dict[str, str]], tuple[int, Any]]] = {
            ("DescribeDBInstances", "2014-08-15"): self._databases,
            ("DescribeDBInstanceNetInfo", "2014-08-15"): self._net_info,
            ("DescribeInstances", "2015-01-01"): self._caches,
            ("DescribeLoadBalancers", "2014-05-15"): self._load_balancers,
            ("DescribeLoadBalancerAttribute", "2014-05-15"): self._lb_attribute,
            ("DescribeHealthStatus", "2014-05-15"): self._lb_health,
            ("DescribeEipAddresses", "2016-04-28"): self._eips,
            ("DescribeNatGateways", "2016-04-28"): self._nat_gateways,
            ("DescribeSecurityGroups", "2014-05-26"): self._security_groups,
            ("DescribeSecurityGroupAttribute", "2014-05-26"): self._sg_attribute,
            ("DescribeDomains", "2015-01-09"): self._domains,
            ("DescribeDomainRecords", "2015-01-09"): self._records,
            ("LookupEvents", "2020-07-06"): self._events,
        }

    def actions(self, region: str | None = None) -> list[str]:
        """The actions asked, in order."""
        return [r["action"] for r in self.calls(region)]

    # -- transport ---------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        auth = handler.headers.get("Authorization", "")
        if auth.startswith("OSS4-HMAC-SHA256") or not handler.headers.get("x-acs-action"):
            return self._oss(handler, auth)
        params = dict(parse_qsl(urlsplit(handler.path).query, keep_blank_values=True))
        params.update(dict(parse_qsl(body, keep_blank_values=True)))
        action = handler.headers.get("x-acs-action", "")
        version = handler.headers.get("x-acs-version", "")
        region = params.get("RegionId") or self._region_of(params)
        self.record(
            {"time": time.monotonic(), "action": action, "version": version, "region": region, "params": params}
        )
        self.wait()
        if not auth.startswith("ACS3-HMAC-SHA256 Credential="):
            return self._error(handler, 400, "MissingSignature", "The request signature is missing.")
        if auth.split("Credential=", 1)[1].split(",", 1)[0] != self.access_key:
            return self._error(handler, 404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        if self.access_secret is not None and not acs3_signed(handler, body, auth, self.access_secret):
            return self._error(
                handler, 400, "SignatureDoesNotMatch", "The request signature does not conform to Aliyun standards."
            )
        route = self.routes.get((action, version))
        if route is None:
            message = f"Specified api {action} ({version}) is not found."
            return self._error(handler, 404, "InvalidAction.NotFound", message)
        with self._lock:
            throttled = self.throttle_left > 0
            self.throttle_left -= 1 if throttled else 0
        if throttled:
            return self._error(handler, 400, "Throttling.User", "Request was denied due to user flow control.")
        if action in self.denied_actions:
            return self._error(
                handler, 403, "Forbidden.RAM",
                "User not authorized to operate on the specified resource, or this API doesn't support RAM.",
            )
        status, payload = route(params)
        if status != 200:
            return self._error(handler, status, payload["Code"], payload["Message"])
        payload.setdefault("RequestId", str(uuid.uuid4()))
        return self._send(handler, 200, payload)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        payload = {"RequestId": str(uuid.uuid4()), "HostId": "aliyuncs.com", "Code": code, "Message": message}
        self._send(handler, status, payload)

    def _region_of(self, params: Mapping[str, str]) -> str:
        """Calls without ``RegionId`` (``DescribeDBInstanceNetInfo``) are recorded under their resource's region."""
        wanted = params.get("DBInstanceId", "")
        regions = self.state.databases.items()
        return next((r for r, items in regions if any(i["DBInstanceId"] == wanted for i in items)), "")

    # -- paging ------------------------------------------------------------------------------

    def _numbered(self, params: Mapping[str, str], items: list[Record], outer: str, inner: str,
                  total_key: str = "TotalCount") -> tuple[int, Any]:
        size = min(int(params.get("PageSize") or 10), 100, self.page_cap)
        number = int(params.get("PageNumber") or 1)
        page = items[(number - 1) * size : number * size]
        return 200, {outer: {inner: copy.deepcopy(page)}, total_key: len(items), "PageNumber": number, "PageSize": size}

    def _tokened(self, params: Mapping[str, str], items: list[Record]) -> tuple[list[Record], str] | None:
        size = min(int(params.get("MaxResults") or 10), 100, self.page_cap)
        offset = 0
        if params.get("NextToken"):
            found = self._offset(params["NextToken"])
            if found is None:
                return None
            offset = found
        next_token = self._token(offset + size) if offset + size < len(items) else ""
        return copy.deepcopy(items[offset : offset + size]), next_token

    @staticmethod
    def _bad(code: str, message: str, status: int = 400) -> tuple[int, Any]:
        return status, {"Code": code, "Message": message}

    def _regional(self, table: Mapping[str, list[Record]], params: Mapping[str, str]) -> list[Record] | None:
        region = params.get("RegionId", "")
        return None if not region else list(table.get(region, []))

    # -- OpenAPI actions -------------------------------------------------------------------------

    def _databases(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.databases, params)
        if items is None:
            return self._bad("MissingRegionId", "RegionId is mandatory for this action.")
        status, body = self._numbered(params, items, "Items", "DBInstance", "TotalRecordCount")
        body["PageRecordCount"] = len(body["Items"]["DBInstance"])
        body.pop("PageSize")
        return status, body

    def _net_info(self, params: dict[str, str]) -> tuple[int, Any]:
        wanted = params.get("DBInstanceId", "")
        if wanted not in self.state.net_info:
            return self._bad("InvalidDBInstanceId.NotFound", "Specified instance does not exist.", 404)
        infos = copy.deepcopy(self.state.net_info[wanted])
        return 200, {"InstanceNetworkType": "VPC", "DBInstanceNetInfos": {"DBInstanceNetInfo": infos}}

    def _caches(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.caches, params)
        if items is None:
            return self._bad("MissingRegionId", "RegionId is mandatory for this action.")
        return self._numbered(params, items, "Instances", "KVStoreInstance")

    def _load_balancers(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.load_balancers, params)
        if items is None:
            return self._bad("MissingParameter", "RegionId is mandatory for this action.")
        return self._numbered(params, items, "LoadBalancers", "LoadBalancer")

    def _find_lb(self, params: Mapping[str, str]) -> Record | None:
        wanted = params.get("LoadBalancerId", "")
        regional = self.state.load_balancers.get(params.get("RegionId", ""), [])
        return next((lb for lb in regional if lb["LoadBalancerId"] == wanted), None)

    def _lb_attribute(self, params: dict[str, str]) -> tuple[int, Any]:
        found = self._find_lb(params)
        if found is None:
            return self._bad("InvalidLoadBalancerId.NotFound", "The specified LoadBalancerId does not exist.", 404)
        return 200, {**copy.deepcopy(found), **copy.deepcopy(self.state.lb_attributes.get(found["LoadBalancerId"], {}))}

    def _lb_health(self, params: dict[str, str]) -> tuple[int, Any]:
        found = self._find_lb(params)
        if found is None:
            return self._bad("InvalidLoadBalancerId.NotFound", "The specified LoadBalancerId does not exist.", 404)
        rows = self.state.lb_health.get(found["LoadBalancerId"], [])
        if params.get("ListenerPort"):
            rows = [r for r in rows if str(r["ListenerPort"]) == params["ListenerPort"]]
        return 200, {"BackendServers": {"BackendServer": copy.deepcopy(rows)}}

    def _eips(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.eips, params)
        if items is None:
            return self._bad("MissingRegionId", "RegionId is mandatory for this action.")
        return self._numbered(params, items, "EipAddresses", "EipAddress")

    def _nat_gateways(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.nat_gateways, params)
        if items is None:
            return self._bad("MissingRegionId", "RegionId is mandatory for this action.")
        return self._numbered(params, items, "NatGateways", "NatGateway")

    def _security_groups(self, params: dict[str, str]) -> tuple[int, Any]:
        items = self._regional(self.state.security_groups, params)
        if items is None:
            return self._bad("MissingRegionId", "RegionId is mandatory for this action.")
        if "PageNumber" in params and "MaxResults" not in params:
            return self._numbered(params, items, "SecurityGroups", "SecurityGroup")
        paged = self._tokened(params, items)
        if paged is None:
            return self._bad("InvalidNextToken.Malformed", "The specified parameter NextToken is not valid.")
        page, token = paged
        return 200, {"SecurityGroups": {"SecurityGroup": page}, "NextToken": token, "TotalCount": len(items),
                     "RegionId": params["RegionId"]}

    def _sg_attribute(self, params: dict[str, str]) -> tuple[int, Any]:
        wanted = params.get("SecurityGroupId", "")
        regional = self.state.security_groups.get(params.get("RegionId", ""), [])
        group = next((g for g in regional if g["SecurityGroupId"] == wanted), None)
        if group is None:
            return self._bad("InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId does not exist.", 404)
        rules = self.state.permissions.get(wanted, [])
        direction = params.get("Direction", "all")
        if direction in ("ingress", "egress"):
            rules = [r for r in rules if r["Direction"] == direction]
        return 200, {
            "SecurityGroupId": wanted, "SecurityGroupName": group["SecurityGroupName"],
            "Description": group["Description"],
            "VpcId": group["VpcId"], "RegionId": params["RegionId"], "InnerAccessPolicy": "Accept",
            "Permissions": {"Permission": copy.deepcopy(rules)},
        }

    def _domains(self, params: dict[str, str]) -> tuple[int, Any]:
        return self._numbered(params, list(self.state.domains), "Domains", "Domain")

    def _records(self, params: dict[str, str]) -> tuple[int, Any]:
        domain = params.get("DomainName", "")
        if domain not in self.state.records:
            return self._bad("InvalidDomainName.NoExist", "The specified domain name does not exist.")
        return self._numbered(params, self.state.records[domain], "DomainRecords", "Record")

    def _events(self, params: dict[str, str]) -> tuple[int, Any]:
        # The real API answers for the region of its endpoint; every region's endpoint is this one fake.
        events = [e for region_events in self.state.events.values() for e in region_events]
        attributes = {
            params.get(f"LookupAttribute.{n}.Key", ""): params.get(f"LookupAttribute.{n}.Value", "") for n in (1, 2)
        }
        if "ResourceName" in attributes:
            events = [e for e in events if attributes["ResourceName"] in e["resourceName"].split(";")]
        if "EventName" in attributes:
            events = [e for e in events if e["eventName"] == attributes["EventName"]]
        if params.get("StartTime"):
            events = [e for e in events if e["eventTime"] >= params["StartTime"]]
        if params.get("EndTime"):
            events = [e for e in events if e["eventTime"] <= params["EndTime"]]
        events.sort(key=lambda e: e["eventTime"], reverse=True)
        paged = self._tokened({**params, "MaxResults": params.get("MaxResults") or "20"}, events)
        if paged is None:
            return self._bad("InvalidNextToken", "The NextToken is invalid.")
        page, token = paged
        return 200, {"Events": page, "NextToken": token, "StartTime": params.get("StartTime", ""),
                     "EndTime": params.get("EndTime", "")}
