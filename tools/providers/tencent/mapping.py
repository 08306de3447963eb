"""Tencent Cloud's API records (CDB, Redis, CLB, VPC, DNSPod, COS, CloudAudit) mapped into the one estate model.

Pure functions from the raw dicts the SDKs return (``to_json_string`` of the
response models, or the COS SDK's parsed XML) to :class:`Resource` and
:class:`Change`; no SDK is imported here, so these are tested without one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tools.estate.resource import Change, Link, Listener, Resource, Rule
from tools.providers.sdk import as_tuple

__all__ = [
    "PROVIDER",
    "address_to_resource",
    "bucket_endpoint",
    "bucket_to_resource",
    "cache_to_resource",
    "database_to_resource",
    "event_to_change",
    "load_balancer_to_resource",
    "nat_gateway_to_resource",
    "parse_ports",
    "policy_rules",
    "records_to_resources",
    "security_group_to_resource",
]

PROVIDER = "tencent"
"""Provider key of every record mapped here."""

Raw = Mapping[str, Any]

_CDB_STATUS = {0: "creating", 1: "running", 4: "stopping", 5: "stopped"}
"""CDB ``Status``: 0 creating, 1 running, 4 isolating, 5 isolated (what "stopping" a TencentDB instance does)."""
_CDB_STATUS_NAME = {0: "creating", 1: "running", 4: "isolating", 5: "isolated"}
_REDIS_STATUS = {0: "pending", 1: "creating", 2: "running", -2: "stopped", -3: "stopping"}
"""Redis ``Status``: 0 to be initialized, 1 in process, 2 running, -2 isolated, -3 to be deleted."""
_ADDRESS_STATUS = {
    "CREATING": "creating", "BINDING": "pending", "BIND": "in-use", "UNBINDING": "pending", "UNBIND": "available",
    "OFFLINING": "deleting", "BIND_ENI": "in-use", "PRIVATE": "in-use",
}
_NAT_STATE = {"PENDING": "pending", "AVAILABLE": "available", "UPDATING": "pending", "DELETING": "deleting",
              "FAILED": "failed", "DELETED": "deleted"}
_ATTACHED_KIND = {"ins-": "server", "nat-": "nat_gateway", "lb-": "load_balancer", "eni-": "network_interface"}
_WORLD_GROUP = "http://cam.qcloud.com/groups/global/AllUsers"


def _tags(items: Iterable[Raw] | None) -> dict[str, str]:
    """``[{"Key"/"TagKey": k, "Value"/"TagValue": v}]`` as a dict."""
    out: dict[str, str] = {}
    for item in items or ():
        key = item.get("Key", item.get("TagKey"))
        if key:
            out[str(key)] = str(item.get("Value", item.get("TagValue")) or "")
    return out


def _status(table: Mapping[int, str], value: Any) -> str:
    """A numeric status as its word (an unknown number as itself; none as empty)."""
    return table.get(value, str(value)) if isinstance(value, int) else ""


def _kind_of(instance_id: str) -> str:
    return next((kind for prefix, kind in _ATTACHED_KIND.items() if instance_id.startswith(prefix)), "")


def _details(**values: Any) -> dict[str, str]:
    """Only the facts the API gave, as short strings."""
    return {key: str(value) for key, value in values.items() if value not in (None, "", [], {})}


def _vpc_link(vpc: Any) -> tuple[Link, ...]:
    return (Link(rel="in_vpc", target=str(vpc), kind="vpc"),) if vpc else ()


def database_to_resource(item: Raw, account: str, region: str, groups: Sequence[str] = ()) -> Resource:
    """One CDB ``DescribeDBInstances`` item; ``groups`` from ``DescribeDBSecurityGroups`` when read."""
    status = item.get("Status")
    vpc = item.get("UniqVpcId") or ""
    links = tuple(Link(rel="security_group", target=g, kind="security_group") for g in groups) + _vpc_link(vpc)
    return Resource(
        kind="database",
        provider=PROVIDER,
        account=account,
        region=item.get("Region") or region,
        id=item.get("InstanceId") or "",
        name=item.get("InstanceName") or "",
        state=_status(_CDB_STATUS, status),
        private_ips=as_tuple([item.get("Vip")]),
        dns_names=as_tuple([item.get("WanDomain")]),
        tags=_tags(item.get("TagList")),
        links=links,
        details=_details(
            engine=item.get("EngineType") or "MySQL", version=item.get("EngineVersion"), port=item.get("Vport"),
            wan_port=item.get("WanPort") if item.get("WanDomain") else None, status=_status(_CDB_STATUS_NAME, status),
            memory_mb=item.get("Memory"), volume_gb=item.get("Volume"), device_type=item.get("DeviceType"),
            zone=item.get("Zone"), vpc=vpc, created=item.get("CreateTime"),
        ),
    )


def cache_to_resource(item: Raw, account: str, region: str) -> Resource:
    """One Redis ``DescribeInstances`` ``InstanceSet`` item (``WanIp`` is its private VIP despite the name)."""
    status = item.get("Status")
    vpc = item.get("UniqVpcId") or ""
    return Resource(
        kind="cache",
        provider=PROVIDER,
        account=account,
        region=item.get("Region") or region,
        id=item.get("InstanceId") or "",
        name=item.get("InstanceName") or "",
        state=_status(_REDIS_STATUS, status),
        private_ips=as_tuple([item.get("WanIp")]),
        dns_names=as_tuple([item.get("WanAddress", "").rsplit(":", 1)[0] if item.get("WanAddress") else None]),
        tags=_tags(item.get("InstanceTags")),
        links=_vpc_link(vpc),
        details=_details(
            engine="redis", version=item.get("CurrentRedisVersion") or item.get("Engine"), port=item.get("Port"),
            type=item.get("ProductType"), size_mb=item.get("Size"), vpc=vpc, created=item.get("Createtime"),
        ),
    )


def _health_word(target: Raw) -> str:
    detail = str(target.get("HealthStatusDetail") or target.get("HealthStatusDetial") or "")
    by_detail = {"Alive": "healthy", "Dead": "unhealthy", "Unknown": "unknown", "Close": "unused"}
    if detail in by_detail:
        return by_detail[detail]
    status = target.get("HealthStatus")
    return "healthy" if status is True else "unhealthy" if status is False else "unknown"


def _health_index(health: Iterable[Raw]) -> dict[tuple[str, str, int], str]:
    """``DescribeTargetHealth`` ``LoadBalancers[].Listeners[].Rules[].Targets[]`` by (listener, target, port)."""
    out: dict[tuple[str, str, int], str] = {}
    for lb in health:
        for listener in lb.get("Listeners") or []:
            for rule in listener.get("Rules") or []:
                for target in rule.get("Targets") or []:
                    word = _health_word(target)
                    for who in (target.get("TargetId"), target.get("IP")):
                        if who:
                            out[(listener.get("ListenerId") or "", str(who), int(target.get("Port") or 0))] = word
    return out


def _backends(listener_id: str, targets: Iterable[Raw], health: Mapping[tuple[str, str, int], str]) -> list[Link]:
    links: list[Link] = []
    for target in targets:
        instance = target.get("InstanceId") or ""
        address = next(iter(target.get("PrivateIpAddresses") or []), "")
        port = int(target.get("Port") or 0)
        who = instance or address
        word = health.get((listener_id, instance, port)) or health.get((listener_id, address, port)) or "unknown"
        note = target.get("InstanceName") or ""
        links.append(Link(rel="backend", target=who, kind=_kind_of(who), port=port, health=word, note=note))
    return links


def load_balancer_to_resource(
    item: Raw,
    account: str,
    region: str,
    listeners: Iterable[Raw] = (),
    targets: Iterable[Raw] = (),
    health: Iterable[Raw] = (),
) -> Resource:
    """One CLB with its ``DescribeListeners``, ``DescribeTargets`` and ``DescribeTargetHealth`` answers."""
    index = _health_index(health)
    by_listener: dict[str, list[Raw]] = {}
    for entry in targets:  # ListenerBackend: Targets on layer 4, Rules[].Targets on layer 7
        found = list(entry.get("Targets") or [])
        for rule in entry.get("Rules") or []:
            found.extend(rule.get("Targets") or [])
        by_listener.setdefault(entry.get("ListenerId") or "", []).extend(found)
    front = tuple(
        Listener(
            protocol=str(lst.get("Protocol") or "").lower(),
            port=int(lst.get("Port") or 0),
            name=lst.get("ListenerName") or lst.get("ListenerId") or "",
            backends=tuple(_backends(lid, by_listener.get(lid, []), index)),
        )
        for lst in listeners
        for lid in [str(lst.get("ListenerId") or "")]
    )
    public = item.get("LoadBalancerType") == "OPEN"
    vips = as_tuple(item.get("LoadBalancerVips"))
    vpc = item.get("VpcId") or ""
    groups = tuple(Link(rel="security_group", target=g, kind="security_group") for g in item.get("SecureGroups") or [])
    return Resource(
        kind="load_balancer",
        provider=PROVIDER,
        account=account,
        region=region,
        id=item.get("LoadBalancerId") or "",
        name=item.get("LoadBalancerName") or "",
        state=_status({0: "creating", 1: "active"}, item.get("Status")),
        private_ips=() if public else vips,
        public_ips=vips if public else (),
        dns_names=as_tuple([item.get("LoadBalancerDomain"), item.get("Domain")]),
        tags=_tags(item.get("Tags")),
        links=groups + _vpc_link(vpc),
        listeners=front,
        details=_details(
            type="application" if item.get("Forward") == 1 else "classic",
            scheme="internet" if public else "intranet", vpc=vpc, created=item.get("CreateTime"),
        ),
    )


def parse_ports(port: str, protocol: str) -> list[tuple[int, int]]:
    """A VPC policy's ``Port``: ``"22"``, ``"ALL"``, ``"80,443"``, ``"8000-8080"`` → port ranges."""
    text = (port or "").strip()
    if protocol in ("icmp", "icmpv6", "all") or not text or text.lower() == "all":
        return [(0, 65535)]
    out: list[tuple[int, int]] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            out.append((int(low), int(high or low)))
        except ValueError:
            continue
    return out or [(0, 65535)]


def policy_rules(policies: Raw) -> tuple[Rule, ...]:
    """A ``DescribeSecurityGroupPolicies`` ``SecurityGroupPolicySet``: ``Ingress`` and ``Egress``, in order."""
    rules: list[Rule] = []
    for direction, key in (("ingress", "Ingress"), ("egress", "Egress")):
        for policy in policies.get(key) or []:
            protocol = str(policy.get("Protocol") or "ALL").lower()
            source = (policy.get("CidrBlock") or policy.get("Ipv6CidrBlock") or policy.get("SecurityGroupId") or "")
            template = policy.get("AddressTemplate") or {}
            source = source or template.get("AddressId") or template.get("AddressGroupId") or ""
            for low, high in parse_ports(str(policy.get("Port") or ""), protocol):
                rules.append(Rule(
                    direction=direction,  # type: ignore[arg-type]
                    protocol="icmp" if protocol == "icmpv6" else protocol,
                    port_from=low,
                    port_to=high,
                    source=str(source),
                    action="deny" if str(policy.get("Action") or "").upper() == "DROP" else "allow",
                    priority=int(policy.get("PolicyIndex") or 0) + 1,  # index 0 is the first rule; 0 means unordered
                    description=policy.get("PolicyDescription") or "",
                ))
    return tuple(rules)


def security_group_to_resource(item: Raw, account: str, region: str, policies: Raw | None = None) -> Resource:
    """One ``DescribeSecurityGroups`` item with its policy set (Tencent groups are not tied to one VPC)."""
    return Resource(
        kind="security_group",
        provider=PROVIDER,
        account=account,
        region=region,
        id=item.get("SecurityGroupId") or "",
        name=item.get("SecurityGroupName") or "",
        state="available",
        tags=_tags(item.get("TagSet")),
        rules=policy_rules(policies or {}),
        details=_details(description=item.get("SecurityGroupDesc"), default="yes" if item.get("IsDefault") else None,
                         created=item.get("CreatedTime")),
    )


def address_to_resource(item: Raw, account: str, region: str) -> Resource:
    """One EIP of ``DescribeAddresses``; ``InstanceId`` (a CVM, NAT or CLB) is what it is attached to."""
    attached = item.get("InstanceId") or ""
    links = (Link(rel="attached_to", target=attached, kind=_kind_of(attached)),) if attached else ()
    status = str(item.get("AddressStatus") or "")
    return Resource(
        kind="ip",
        provider=PROVIDER,
        account=account,
        region=region,
        id=item.get("AddressId") or "",
        name=item.get("AddressName") or "",
        state=_ADDRESS_STATUS.get(status, status.lower()),
        private_ips=as_tuple([item.get("PrivateAddressIp")]),
        public_ips=as_tuple([item.get("AddressIp")]),
        tags=_tags(item.get("TagSet")),
        links=links,
        details=_details(type=item.get("AddressType"), isp=item.get("InternetServiceProvider"),
                         bandwidth_mbps=item.get("Bandwidth"), created=item.get("CreatedTime")),
    )


def nat_gateway_to_resource(item: Raw, account: str, region: str) -> Resource:
    """One ``DescribeNatGateways`` item; its EIPs are in ``PublicIpAddressSet``."""
    vpc = item.get("VpcId") or ""
    state = str(item.get("State") or "")
    return Resource(
        kind="nat_gateway",
        provider=PROVIDER,
        account=account,
        region=region,
        id=item.get("NatGatewayId") or "",
        name=item.get("NatGatewayName") or "",
        state=_NAT_STATE.get(state, state.lower()),
        public_ips=as_tuple(a.get("PublicIpAddress") for a in item.get("PublicIpAddressSet") or []),
        tags=_tags(item.get("TagSet")),
        links=_vpc_link(vpc) + tuple(
            Link(rel="security_group", target=g, kind="security_group") for g in item.get("SecurityGroupSet") or []
        ),
        details=_details(vpc=vpc, zone=item.get("Zone"), subnet=item.get("SubnetId"),
                         bandwidth_mbps=item.get("InternetMaxBandwidthOut"), created=item.get("CreatedTime")),
    )


def _fqdn(sub: str, zone: str) -> str:
    sub = (sub or "@").strip().rstrip(".").lower()
    zone = zone.strip().rstrip(".").lower()
    return zone if sub in ("@", "") else f"{sub}.{zone}"


def records_to_resources(records: Sequence[Raw], zone: str, account: str) -> list[Resource]:
    """A DNSPod zone's ``DescribeRecordList`` records, one resource each; same name and type: id gets the record id."""
    keys = [(_fqdn(r.get("Name") or "", zone), str(r.get("Type") or "").upper()) for r in records]
    counts = Counter(keys)
    out: list[Resource] = []
    for record, (fqdn, rtype) in zip(records, keys, strict=True):
        value = str(record.get("Value") or "").strip()
        target = value.rstrip(".").lower() if rtype in ("CNAME", "NS", "MX", "PTR", "SRV") else value
        rid = f"{fqdn} {rtype}" + (f" {record.get('RecordId')}" if counts[(fqdn, rtype)] > 1 else "")
        status = str(record.get("Status") or "ENABLE").upper()
        out.append(Resource(
            kind="dns_record",
            provider=PROVIDER,
            account=account,
            region="",
            id=rid,
            name=fqdn,
            state="active" if status == "ENABLE" else "disabled",
            dns_names=(fqdn,),
            links=(Link(rel="points_to", target=target),) if target else (),
            details=_details(type=rtype, value=value, ttl=record.get("TTL"), zone=zone.rstrip(".").lower(),
                             line=record.get("Line"), record_id=record.get("RecordId"),
                             updated=record.get("UpdatedOn")),
        ))
    return out


def bucket_endpoint(name: str, region: str) -> str:
    """``name-appid.cos.ap-guangzhou.myqcloud.com``."""
    return f"{name}.cos.{region}.myqcloud.com"


def acl_public(acl: Raw | None) -> str:
    """``yes`` when the ACL grants AllUsers READ or WRITE, ``no`` when it does not, ``unknown`` without one."""
    if acl is None:
        return "unknown"
    grants = (acl.get("AccessControlList") or {}).get("Grant") or []
    for grant in grants if isinstance(grants, list) else [grants]:
        if (grant.get("Grantee") or {}).get("URI") == _WORLD_GROUP and grant.get("Permission") in ("READ", "WRITE",
                                                                                                 "FULL_CONTROL"):
            return "yes"
    return "no"


def bucket_to_resource(item: Raw, account: str, acl: Raw | None = None) -> Resource:
    """One ``list_buckets`` bucket (``Name``, ``Location``, ``CreationDate``), with its ACL when read."""
    name = str(item.get("Name") or "")
    region = str(item.get("Location") or "")
    return Resource(
        kind="bucket",
        provider=PROVIDER,
        account=account,
        region=region,
        id=name,
        name=name,
        state="available",
        dns_names=(bucket_endpoint(name, region),) if region else (),
        details=_details(
            public=acl_public(acl), acl=(acl or {}).get("CannedACL"), type=item.get("BucketType"),
            created=item.get("CreationDate"),
        ),
    )


def _iso(value: Any) -> str:
    try:
        return datetime.fromtimestamp(int(value), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError):
        return str(value or "")


def _instance_id(event: Raw) -> str:
    """The id the call acted on, from ``CloudAuditEvent``'s ``requestParameters`` (a JSON text in a JSON text)."""
    try:
        detail = json.loads(event.get("CloudAuditEvent") or "{}")
        params = detail.get("requestParameters") or {}
        params = json.loads(params) if isinstance(params, str) else params
    except (ValueError, AttributeError):
        return ""
    if not isinstance(params, dict):
        return ""
    found = params.get("InstanceId") or next(iter(params.get("InstanceIds") or []), "")
    return str(found or "")


def event_to_change(event: Raw, account: str, region: str, *, resource_id: str = "") -> Change:
    """One CloudAudit ``LookUpEvents`` event (never its ``SecretId``); ``ErrorCode`` 0 is success."""
    resources = event.get("Resources") or {}
    name = str(resources.get("ResourceName") or "") if isinstance(resources, Mapping) else ""
    code = event.get("ErrorCode")
    the_id = _instance_id(event) or resource_id
    return Change(
        time=_iso(event.get("EventTime")),
        provider=PROVIDER,
        account=account,
        region=str(event.get("ResourceRegion") or event.get("EventRegion") or region),
        action=str(event.get("EventName") or ""),
        principal=str(event.get("Username") or ""),
        resource_id=the_id,
        resource_name=name if name != the_id else "",
        resource_kind={"cdb": "database", "redis": "cache", "clb": "load_balancer", "cvm": "server"}.get(
            str(resources.get("ResourceType") or "") if isinstance(resources, Mapping) else "", ""
        ),
        source_ip=str(event.get("SourceIPAddress") or ""),
        outcome="success" if code in (0, "0", None) else str(code),
    )
