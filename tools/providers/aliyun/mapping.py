"""Alibaba Cloud's API records (``body.to_map()`` dicts) mapped into the estate's :class:`Resource` and :class:`Change`.

Pure functions, one per kind: no SDK import, no I/O. Each takes the raw
records exactly as the OpenAPI answers them (``DescribeDBInstances``'
``Items.DBInstance[]``, ``DescribeHealthStatus``' ``BackendServers.BackendServer[]``…)
plus the account label and region, so a test or the demo can feed them
recorded answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tools.estate.resource import Change, Link, Listener, Resource, Rule
from tools.providers.sdk import as_tuple, first

__all__ = [
    "PROVIDER",
    "iso_utc",
    "to_bucket",
    "to_cache",
    "to_change",
    "to_database",
    "to_dns_records",
    "to_eip",
    "to_load_balancer",
    "to_nat_gateway",
    "to_rules",
    "to_security_group",
]

PROVIDER = "aliyun"

Raw = Mapping[str, Any]

_STATES = {
    "normal": "running",  # KVStore
    "inuse": "in-use",  # EIP
    "inactive": "stopped",  # SLB
    "changing": "modifying",
    "dbinstanceclasschanging": "modifying",
    "enable": "enabled",
    "disable": "disabled",
}
"""States whose Alibaba spelling differs from the normalized one; every other state is only lower-cased."""

_HEALTH = {"normal": "healthy", "abnormal": "unhealthy", "unavailable": "unknown"}
"""SLB ``ServerHealthStatus`` → the estate's backend health."""

_ATTACHED_KIND = {
    "ecsinstance": "server",
    "slbinstance": "load_balancer",
    "nat": "nat_gateway",
    "networkinterface": "network_interface",
    "havip": "havip",
}
"""EIP ``InstanceType`` → the kind of what it is bound to."""

_TRAIL_KINDS = {
    "acs::rds::dbinstance": "database",
    "acs::redis::dbinstance": "cache",
    "acs::kvstore::instance": "cache",
    "acs::ecs::instance": "server",
    "acs::ecs::securitygroup": "security_group",
    "acs::slb::loadbalancer": "load_balancer",
    "acs::vpc::eip": "ip",
    "acs::eip::eipaddress": "ip",
    "acs::vpc::natgateway": "nat_gateway",
    "acs::oss::bucket": "bucket",
}
"""ActionTrail ``resourceType`` → the estate's kind."""

_POINTING_TYPES = frozenset({"A", "AAAA", "CNAME", "NS", "MX", "SRV"})
"""Record types whose value is a name or an address (TXT, CAA and redirects point nowhere)."""

_PEERS = (("", "CidrIp"), ("Ipv6", "CidrIp"), ("", "GroupId"), ("", "PrefixListId"))
"""Where a permission names its peer, in order of preference (``SourceCidrIp``, ``Ipv6SourceCidrIp``…)."""

_PUBLIC_ACLS = frozenset({"public-read", "public-read-write"})


def state_of(value: Any) -> str:
    """``Running`` → ``running``, ``Normal`` → ``running``, ``InUse`` → ``in-use``."""
    text = str(value or "").strip()
    return _STATES.get(text.lower(), text.lower())


def iso_utc(value: Any) -> str:
    """An API time (``2026-11-30T02:14:09Z``, ``2024-05-20T08:00Z``, a datetime, epoch ms) in ISO 8601 UTC."""
    if value in (None, ""):
        return ""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    elif isinstance(value, (int, float)) or str(value).isdigit():
        number = float(value)
        moment = datetime.fromtimestamp(number / 1000 if number > 1e11 else number, UTC)
    else:
        text = str(value).strip().replace("Z", "+00:00")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return str(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _list(raw: Any, *path: str) -> list[Mapping[str, Any]]:
    """``raw[a][b]`` as a list of dicts (the APIs wrap every list: ``{"Tags": {"Tag": [...]}}``)."""
    node = raw
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    if isinstance(node, Mapping):
        return [node]
    return [item for item in node or [] if isinstance(item, Mapping)]


def _tags(raw: Raw) -> dict[str, str]:
    """Tags in either spelling (``TagKey``/``TagValue`` or ``Key``/``Value``)."""
    out: dict[str, str] = {}
    for tag in _list(raw, "Tags", "Tag"):
        key = first(tag.get("TagKey"), tag.get("Key"))
        if key:
            out[str(key)] = str(first(tag.get("TagValue"), tag.get("Value")) or "")
    return out


def _details(**values: Any) -> dict[str, str]:
    """Non-empty values as short strings."""
    return {key: str(value) for key, value in values.items() if value not in (None, "", [], {})}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _vpc_link(vpc: Any) -> tuple[Link, ...]:
    return (Link(rel="in_vpc", target=str(vpc), kind="vpc"),) if vpc else ()


def _owner(tags: Mapping[str, str]) -> str:
    return next((value for key, value in tags.items() if key.lower() == "owner"), "")


# --- data ------------------------------------------------------------------------------------


def to_database(item: Raw, net_infos: Sequence[Raw] | None, account: str, region: str, *, note: str = "") -> Resource:
    """One ``DescribeDBInstances`` ``DBInstance`` with its ``DescribeDBInstanceNetInfo`` addresses (when read)."""
    private: list[str] = []
    public: list[str] = []
    names = [item.get("ConnectionString")]
    port = None
    for info in net_infos or ():
        names.append(info.get("ConnectionString"))
        port = port or info.get("Port")
        if str(info.get("IPType") or "").lower() == "public":
            public.append(str(info.get("IPAddress") or ""))
        else:  # "Private" (VPC) and "Inner" (classic network) are both internal
            private.append(str(info.get("IPAddress") or ""))
    tags = _tags(item)
    return Resource(
        kind="database",
        provider=PROVIDER,
        account=account,
        region=str(item.get("RegionId") or region),
        id=str(item.get("DBInstanceId") or ""),
        name=str(item.get("DBInstanceDescription") or item.get("DBInstanceId") or ""),
        state=state_of(item.get("DBInstanceStatus")),
        private_ips=as_tuple(private),
        public_ips=as_tuple(public),
        dns_names=as_tuple(str(n).lower() for n in names if n),
        tags=tags,
        owner=_owner(tags),
        links=_vpc_link(item.get("VpcId")),
        details=_details(
            engine=str(item.get("Engine") or "").lower(),
            version=item.get("EngineVersion"),
            **{"class": item.get("DBInstanceClass")},
            type=str(item.get("DBInstanceType") or "").lower(),
            port=port,
            zone=item.get("ZoneId"),
            vpc=item.get("VpcId"),
            category=item.get("Category"),
            created=iso_utc(item.get("CreateTime")),
            addresses=note,
        ),
    )


def to_cache(item: Raw, account: str, region: str) -> Resource:
    """One ``r-kvstore`` ``DescribeInstances`` ``KVStoreInstance`` (Tair / Redis OSS-compatible / Memcache)."""
    tags = _tags(item)
    return Resource(
        kind="cache",
        provider=PROVIDER,
        account=account,
        region=str(item.get("RegionId") or region),
        id=str(item.get("InstanceId") or ""),
        name=str(item.get("InstanceName") or item.get("InstanceId") or ""),
        state=state_of(item.get("InstanceStatus")),
        private_ips=as_tuple([item.get("PrivateIp")]),
        dns_names=as_tuple([str(item.get("ConnectionDomain") or "").lower()]),
        tags=tags,
        owner=_owner(tags),
        links=_vpc_link(item.get("VpcId")),
        details=_details(
            engine=str(item.get("InstanceType") or "redis").lower(),
            version=item.get("EngineVersion"),
            **{"class": item.get("InstanceClass")},
            architecture=item.get("ArchitectureType"),
            port=item.get("Port"),
            zone=item.get("ZoneId"),
            vpc=item.get("VpcId"),
            network=item.get("NetworkType"),
            created=iso_utc(item.get("CreateTime")),
        ),
    )


# --- network ---------------------------------------------------------------------------------


def _backend(row: Raw) -> Link:
    server = str(row.get("ServerId") or row.get("ServerIp") or "")
    kind = "server" if server.startswith("i-") else ("network_interface" if server.startswith("eni-") else "")
    status = str(row.get("ServerHealthStatus") or "").lower()
    weight = row.get("Weight")
    return Link(
        rel="backend",
        target=server,
        kind=kind,
        port=_int(row.get("Port")),
        health=_HEALTH.get(status, "unknown"),
        note=f"weight {weight}" if weight not in (None, "") else "",
    )


def _listeners(attribute: Raw, health: Sequence[Raw] | None) -> tuple[Listener, ...]:
    fronts = [
        (str(first(p.get("ListenerProtocol"), p.get("ListenerProtocal")) or "").lower(), _int(p.get("ListenerPort")))
        for p in _list(attribute, "ListenerPortsAndProtocol", "ListenerPortAndProtocol")
        or _list(attribute, "ListenerPortsAndProtocal", "ListenerPortAndProtocal")
    ]
    default_servers = _list(attribute, "BackendServers", "BackendServer")
    out: list[Listener] = []
    for protocol, port in fronts:
        if port is None:
            continue
        rows = [r for r in health or () if _int(r.get("ListenerPort")) == port]
        if rows:
            backends = tuple(_backend(r) for r in rows)
            stopped = all(str(r.get("ServerHealthStatus") or "").lower() == "unavailable" for r in rows)
        else:  # health not read: the default server group, health unknown
            backends = tuple(
                Link(rel="backend", target=link.target, kind=link.kind, health="unknown", note=link.note)
                for link in (_backend(server) for server in default_servers)
            )
            stopped = False
        out.append(Listener(protocol=protocol, port=port, backends=backends, state="stopped" if stopped else "",
                            name=f"{protocol}:{port}"))
    return tuple(out)


def to_load_balancer(
    item: Raw, attribute: Raw | None, health: Sequence[Raw] | None, account: str, region: str, *, note: str = ""
) -> Resource:
    """One SLB (CLB) ``LoadBalancer`` with its ``DescribeLoadBalancerAttribute`` listeners and ``DescribeHealthStatus``.

    The VIP is public when ``AddressType`` is ``internet``; ``health`` rows carry each backend's
    port and health per listener port.
    """
    merged = {**item, **(attribute or {})}
    address = merged.get("Address")
    internet = str(merged.get("AddressType") or "").lower() == "internet"
    tags = _tags(item) or _tags(attribute or {})
    return Resource(
        kind="load_balancer",
        provider=PROVIDER,
        account=account,
        region=str(merged.get("RegionId") or region),
        id=str(merged.get("LoadBalancerId") or ""),
        name=str(merged.get("LoadBalancerName") or merged.get("LoadBalancerId") or ""),
        state=state_of(merged.get("LoadBalancerStatus")),
        private_ips=() if internet else as_tuple([address]),
        public_ips=as_tuple([address]) if internet else (),
        tags=tags,
        owner=_owner(tags),
        links=_vpc_link(merged.get("VpcId")),
        listeners=_listeners(attribute or {}, health),
        details=_details(
            type="classic",
            scheme="internet" if internet else "intranet",
            spec=merged.get("LoadBalancerSpec"),
            network=merged.get("NetworkType"),
            vpc=merged.get("VpcId"),
            zone=merged.get("MasterZoneId"),
            created=iso_utc(merged.get("CreateTime")),
            listeners=note or ("not read" if attribute is None else ""),
        ),
    )


def _ports(text: Any) -> tuple[int, int]:
    """``22/22`` → (22, 22); ``-1/-1`` (every port, or a protocol without ports) → (0, 65535)."""
    low, _, high = str(text or "-1/-1").partition("/")
    start, end = _int(low), _int(high or low)
    if start is None or end is None or start < 0 or end < 0:
        return 0, 65535
    return start, end


def to_rules(permissions: Iterable[Raw]) -> tuple[Rule, ...]:
    """``DescribeSecurityGroupAttribute`` ``Permissions.Permission[]`` as normalized rules, by priority."""
    out: list[Rule] = []
    for perm in permissions:
        ingress = str(perm.get("Direction") or "ingress").lower() != "egress"
        side = "Source" if ingress else "Dest"
        peer = first(*(perm.get(f"{prefix}{side}{suffix}") for prefix, suffix in _PEERS))
        protocol = str(perm.get("IpProtocol") or "all").lower()
        port_from, port_to = _ports(perm.get("PortRange"))
        out.append(
            Rule(
                direction="ingress" if ingress else "egress",
                protocol="icmp" if protocol == "icmpv6" else protocol,
                port_from=port_from,
                port_to=port_to,
                source=str(peer or ""),
                action="deny" if str(perm.get("Policy") or "accept").lower() == "drop" else "allow",
                priority=_int(perm.get("Priority")) or 1,
                description=str(perm.get("Description") or ""),
            )
        )
    return tuple(sorted(out, key=lambda rule: (rule.direction != "ingress", rule.priority)))


def to_security_group(group: Raw, attribute: Raw | None, account: str, region: str, *, note: str = "") -> Resource:
    """One ECS ``SecurityGroup`` with the rules of its ``DescribeSecurityGroupAttribute`` (when read)."""
    tags = _tags(group)
    vpc = group.get("VpcId") or (attribute or {}).get("VpcId")
    return Resource(
        kind="security_group",
        provider=PROVIDER,
        account=account,
        region=region,
        id=str(group.get("SecurityGroupId") or ""),
        name=str(group.get("SecurityGroupName") or group.get("SecurityGroupId") or ""),
        state="available",
        tags=tags,
        owner=_owner(tags),
        links=_vpc_link(vpc),
        rules=to_rules(_list(attribute or {}, "Permissions", "Permission")),
        details=_details(
            vpc=vpc,
            description=group.get("Description"),
            type=group.get("SecurityGroupType"),
            inner_access=(attribute or {}).get("InnerAccessPolicy"),
            created=iso_utc(group.get("CreationTime")),
            rules=note or ("" if attribute is not None else "not read"),
        ),
    )


def to_eip(item: Raw, account: str, region: str) -> Resource:
    """One VPC ``DescribeEipAddresses`` ``EipAddress``; ``attached_to`` what it is bound to."""
    instance = item.get("InstanceId")
    kind = _ATTACHED_KIND.get(str(item.get("InstanceType") or "").lower(), str(item.get("InstanceType") or "").lower())
    tags = _tags(item)
    return Resource(
        kind="ip",
        provider=PROVIDER,
        account=account,
        region=str(item.get("RegionId") or region),
        id=str(item.get("AllocationId") or ""),
        name=str(item.get("Name") or item.get("IpAddress") or ""),
        state=state_of(item.get("Status")),
        public_ips=as_tuple([item.get("IpAddress")]),
        private_ips=as_tuple([item.get("PrivateIpAddress")]),
        tags=tags,
        owner=_owner(tags),
        links=(Link(rel="attached_to", target=str(instance), kind=kind),) if instance else (),
        details=_details(
            bandwidth=item.get("Bandwidth"),
            isp=item.get("ISP"),
            charge=item.get("InternetChargeType"),
            instance_type=item.get("InstanceType"),
            created=iso_utc(item.get("AllocationTime")),
        ),
    )


def to_nat_gateway(item: Raw, account: str, region: str) -> Resource:
    """One VPC ``DescribeNatGateways`` ``NatGateway``: its EIPs are its public addresses."""
    tags = _tags(item)
    private = (item.get("NatGatewayPrivateInfo") or {}).get("PrivateIpAddress")
    return Resource(
        kind="nat_gateway",
        provider=PROVIDER,
        account=account,
        region=str(item.get("RegionId") or region),
        id=str(item.get("NatGatewayId") or ""),
        name=str(item.get("Name") or item.get("NatGatewayId") or ""),
        state=state_of(item.get("Status")),
        public_ips=as_tuple(ip.get("IpAddress") for ip in _list(item, "IpLists", "IpList")),
        private_ips=as_tuple([private]),
        tags=tags,
        owner=_owner(tags),
        links=_vpc_link(item.get("VpcId")),
        details=_details(
            type=item.get("NatType"),
            spec=item.get("Spec"),
            network=item.get("NetworkType"),
            vpc=item.get("VpcId"),
            description=item.get("Description"),
            created=iso_utc(item.get("CreationTime")),
        ),
    )


# --- DNS and storage ---------------------------------------------------------------------------


def _fqdn(record: Raw, zone: str) -> str:
    rr = str(record.get("RR") or "@").strip().lower()
    zone = zone.strip().rstrip(".").lower()
    return zone if rr in ("@", "") else f"{rr}.{zone}"


def _target(kind: str, value: str) -> str:
    """What a record's value points to: the address, or the name without its trailing dot (SRV: the last field)."""
    text = value.strip().split()[-1] if kind == "SRV" and value.strip() else value.strip()
    return text.rstrip(".").lower() if kind != "A" and kind != "AAAA" else text


def to_dns_records(records: Sequence[Raw], zone: str, account: str) -> list[Resource]:
    """Alidns ``DescribeDomainRecords`` ``Record[]`` of one domain: one resource each.

    Alidns answers each value as its own record, so where one name and type has
    several, each id carries its value (``api.example.com A 47.96.2.20``).
    """
    fqdns = [(_fqdn(r, str(r.get("DomainName") or zone)), str(r.get("Type") or "").upper()) for r in records]
    repeated = Counter(fqdns)
    out: list[Resource] = []
    for record, (fqdn, kind) in zip(records, fqdns, strict=True):
        value = str(record.get("Value") or "")
        record_id = f"{fqdn} {kind}" + (f" {value}" if repeated[(fqdn, kind)] > 1 else "")
        points = (Link(rel="points_to", target=_target(kind, value)),) if kind in _POINTING_TYPES and value else ()
        out.append(
            Resource(
                kind="dns_record",
                provider=PROVIDER,
                account=account,
                region="",
                id=record_id,
                name=fqdn,
                state=state_of(record.get("Status")),
                dns_names=(fqdn,),
                links=points,
                details=_details(
                    type=kind,
                    value=value,
                    ttl=record.get("TTL"),
                    zone=str(record.get("DomainName") or zone).lower(),
                    line=record.get("Line"),
                    priority=record.get("Priority") if kind == "MX" else None,
                    record_id=record.get("RecordId"),
                    locked="yes" if record.get("Locked") else "",
                ),
            )
        )
    return out


def to_bucket(info: Raw, acl: str, account: str, *, note: str = "") -> Resource:
    """One OSS bucket (``ListBuckets`` fields: ``Name``, ``Region``, ``Location``, ``ExtranetEndpoint``…) and its ACL.

    ``acl`` is ``GetBucketAcl``'s grant, or empty when it could not be read (public then reads ``unknown``).
    """
    name = str(info.get("Name") or "")
    region = str(info.get("Region") or str(info.get("Location") or "").removeprefix("oss-"))
    endpoint = str(info.get("ExtranetEndpoint") or (f"oss-{region}.aliyuncs.com" if region else ""))
    public = "yes" if acl in _PUBLIC_ACLS else ("no" if acl else "unknown")
    return Resource(
        kind="bucket",
        provider=PROVIDER,
        account=account,
        region=region,
        id=name,
        name=name,
        state="available",
        dns_names=as_tuple([f"{name}.{endpoint}" if endpoint else ""]),
        details=_details(
            public=public,
            acl=acl or note or "not read",
            storage_class=str(info.get("StorageClass") or "").lower(),
            created=iso_utc(info.get("CreationDate")),
            intranet=f"{name}.{info['IntranetEndpoint']}" if info.get("IntranetEndpoint") else "",
        ),
    )


# --- changes -------------------------------------------------------------------------------------


def _principal(identity: Raw) -> str:
    """The user or role name as ActionTrail gives it (``alice``, ``AssumedRole/ops-automation``)."""
    name = first(identity.get("userName"), identity.get("sessionName"))
    kind = str(identity.get("type") or "")
    if kind.lower() == "assumed-role" and name:
        return f"AssumedRole/{name}"
    return str(name or first(identity.get("principalId"), kind) or "")


def to_change(event: Raw, account: str, region: str, *, wanted_id: str = "", wanted_name: str = "") -> Change:
    """One ActionTrail ``LookupEvents`` event (the ``userIdentity`` access key is never read)."""
    resources = [r for r in str(event.get("resourceName") or "").split(";") if r]
    resource_id = wanted_id if wanted_id and wanted_id in resources else (resources[0] if resources else "")
    error = event.get("errorCode")
    return Change(
        time=iso_utc(event.get("eventTime")),
        provider=PROVIDER,
        account=account,
        region=str(event.get("acsRegion") or region),
        action=str(event.get("eventName") or ""),
        principal=_principal(event.get("userIdentity") or {}),
        resource_id=resource_id,
        resource_name=wanted_name if wanted_name and resource_id in (wanted_id, wanted_name) else "",
        resource_kind=_TRAIL_KINDS.get(str(event.get("resourceType") or "").lower(), ""),
        source_ip=str(event.get("sourceIpAddress") or ""),
        outcome=str(error) if error else "success",
        detail=str(event.get("errorMessage") or "")[:200],
    )
