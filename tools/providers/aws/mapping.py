"""Map raw ``boto3`` answers (RDS, ElastiCache, ELBv2, EC2, Route 53, S3, CloudTrail) into the one estate model.

Pure functions: each takes the dicts ``boto3`` returned (and the account and
region they came from) and gives :class:`~tools.estate.resource.Resource` or
:class:`~tools.estate.resource.Change` records. Nothing here calls AWS, so
every shape can be tested from a literal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tools.estate.resource import Change, Link, Listener, Resource, Rule
from tools.providers.sdk import as_tuple

__all__ = [
    "PROVIDER",
    "acl_is_public",
    "bucket_hosts",
    "iso_time",
    "to_address",
    "to_bucket",
    "to_cache",
    "to_change",
    "to_database",
    "to_db_cluster",
    "to_load_balancer",
    "to_nat_gateway",
    "to_records",
    "to_security_group",
]

PROVIDER = "aws"

_PROTOCOLS = {"-1": "all", "6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}
_HEALTH = {"healthy": "healthy", "unhealthy": "unhealthy", "unused": "unused", "draining": "unused"}
_LB_STATE = {"active": "active", "provisioning": "creating", "active_impaired": "impaired", "failed": "failed"}
_RESOURCE_KINDS = {
    "AWS::RDS::DBInstance": "database",
    "AWS::RDS::DBCluster": "database",
    "AWS::ElastiCache::ReplicationGroup": "cache",
    "AWS::ElastiCache::CacheCluster": "cache",
    "AWS::ElasticLoadBalancingV2::LoadBalancer": "load_balancer",
    "AWS::EC2::SecurityGroup": "security_group",
    "AWS::EC2::EIP": "ip",
    "AWS::EC2::NatGateway": "nat_gateway",
    "AWS::EC2::Instance": "server",
    "AWS::S3::Bucket": "bucket",
    "AWS::Route53::HostedZone": "dns_record",
}
_Health = Mapping[str, Sequence[Mapping[str, Any]]]
"""Target health descriptions by target group ARN."""
_PUBLIC_GRANTEES = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)


def iso_time(value: Any) -> str:
    """A ``datetime`` or Unix time as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC; empty when there is none."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    elif isinstance(value, int | float) and value > 0:
        moment = datetime.fromtimestamp(value, UTC)
    else:
        return str(value or "")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tags(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t.get("Key", "")): str(t.get("Value", "")) for t in items or () if t.get("Key")}


def _owner(tags: Mapping[str, str]) -> str:
    return next((v for k, v in tags.items() if k.lower() in ("owner", "team")), "")


def _details(**values: Any) -> dict[str, str]:
    """Only the facts that are known, as strings."""
    return {k: str(v) for k, v in values.items() if v not in (None, "", [], {})}


def _sg_links(ids: Iterable[Any], vpc: str = "") -> tuple[Link, ...]:
    links = [Link(rel="security_group", target=i, kind="security_group") for i in as_tuple(ids)]
    if vpc:
        links.append(Link(rel="in_vpc", target=vpc, kind="vpc"))
    return tuple(links)


# --- databases and caches ---------------------------------------------------------------------------


def to_database(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """An RDS ``DBInstance`` (``describe_db_instances``)."""
    endpoint = item.get("Endpoint") or {}
    subnets = item.get("DBSubnetGroup") or {}
    tags = _tags(item.get("TagList"))
    groups = (g.get("VpcSecurityGroupId") for g in item.get("VpcSecurityGroups") or [])
    links = list(_sg_links(groups, subnets.get("VpcId") or ""))
    if item.get("DBClusterIdentifier"):
        links.append(Link(rel="member_of", target=item["DBClusterIdentifier"], kind="database"))
    name = item.get("DBInstanceIdentifier") or ""
    return Resource(
        kind="database", provider=PROVIDER, account=account, region=region, id=name, name=name,
        state=str(item.get("DBInstanceStatus") or "").lower(),
        dns_names=as_tuple([endpoint.get("Address")]),
        tags=tags, owner=_owner(tags), links=tuple(links),
        details=_details(
            engine=item.get("Engine"), version=item.get("EngineVersion"), **{"class": item.get("DBInstanceClass")},
            port=endpoint.get("Port") or item.get("DbInstancePort"), zone=item.get("AvailabilityZone"),
            vpc=subnets.get("VpcId"), multi_az="yes" if item.get("MultiAZ") else "", arn=item.get("DBInstanceArn"),
            created=iso_time(item.get("InstanceCreateTime")), cluster=item.get("DBClusterIdentifier"),
        ),
    )


def to_db_cluster(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """An Aurora/Multi-AZ ``DBCluster`` (``describe_db_clusters``): its writer and reader endpoints."""
    tags = _tags(item.get("TagList"))
    name = item.get("DBClusterIdentifier") or ""
    members = [m.get("DBInstanceIdentifier") for m in item.get("DBClusterMembers") or []]
    links = _sg_links(g.get("VpcSecurityGroupId") for g in item.get("VpcSecurityGroups") or [])
    return Resource(
        kind="database", provider=PROVIDER, account=account, region=region, id=name, name=name,
        state=str(item.get("Status") or "").lower(),
        dns_names=as_tuple([item.get("Endpoint"), item.get("ReaderEndpoint")]),
        tags=tags, owner=_owner(tags),
        links=links,
        details=_details(
            type="cluster", engine=item.get("Engine"), version=item.get("EngineVersion"), port=item.get("Port"),
            **{"class": item.get("DBClusterInstanceClass")}, arn=item.get("DBClusterArn"),
            created=iso_time(item.get("ClusterCreateTime")), members=",".join(as_tuple(members)),
        ),
    )


def to_cache(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """An ElastiCache ``ReplicationGroup``: primary, reader, configuration and node endpoints."""
    groups = item.get("NodeGroups") or []
    primary = [(g.get("PrimaryEndpoint") or {}) for g in groups]
    readers = [(g.get("ReaderEndpoint") or {}) for g in groups]
    nodes = [(m.get("ReadEndpoint") or {}) for g in groups for m in g.get("NodeGroupMembers") or []]
    config = item.get("ConfigurationEndpoint") or {}
    endpoints = [config, *primary, *readers, *nodes]
    port = next((e.get("Port") for e in endpoints if e.get("Port")), None)
    name = item.get("ReplicationGroupId") or ""
    members = tuple(Link(rel="member_of", target=m, kind="cache") for m in as_tuple(item.get("MemberClusters")))
    return Resource(
        kind="cache", provider=PROVIDER, account=account, region=region, id=name, name=name,
        state=str(item.get("Status") or "").lower(),
        dns_names=as_tuple(e.get("Address") for e in endpoints),
        links=members,
        details=_details(
            engine=item.get("Engine") or "redis", type=item.get("CacheNodeType"), port=port,
            description=item.get("Description"), arn=item.get("ARN"), cluster_mode=item.get("ClusterMode"),
            primary=next((e.get("Address") for e in primary if e.get("Address")), ""),
            reader=next((e.get("Address") for e in readers if e.get("Address")), ""),
            created=iso_time(item.get("ReplicationGroupCreateTime")),
        ),
    )


# --- load balancers ---------------------------------------------------------------------------------


def _backend(health: Mapping[str, Any], target_type: str) -> Link:
    target = health.get("Target") or {}
    state = (health.get("TargetHealth") or {})
    kind = {"instance": "server", "alb": "load_balancer"}.get(target_type, "")
    note = state.get("Description") or state.get("Reason") or ""
    return Link(
        rel="backend", target=str(target.get("Id") or ""), kind=kind, port=target.get("Port"),
        health=_HEALTH.get(str(state.get("State") or ""), "unknown"), note=str(note),
    )


def _forwarded_groups(listener: Mapping[str, Any]) -> list[str]:
    """The target groups a listener's default actions forward to (simple or weighted forward)."""
    arns: list[str] = []
    for action in listener.get("DefaultActions") or []:
        if action.get("Type") != "forward":
            continue
        if action.get("TargetGroupArn"):
            arns.append(action["TargetGroupArn"])
        arns.extend(g.get("TargetGroupArn", "") for g in (action.get("ForwardConfig") or {}).get("TargetGroups") or [])
    return list(as_tuple(arns))


def _listener(listener: Mapping[str, Any], groups: Mapping[str, Mapping[str, Any]], health: _Health) -> Listener:
    arns = _forwarded_groups(listener)
    backends = tuple(
        _backend(h, str(groups.get(arn, {}).get("TargetType") or "instance"))
        for arn in arns
        for h in health.get(arn) or ()
    )
    if arns:
        name = ",".join(str(groups.get(arn, {}).get("TargetGroupName") or arn.rsplit("/", 2)[-2]) for arn in arns)
    else:  # redirects and fixed responses send traffic nowhere behind the balancer
        name = ",".join(str(a.get("Type") or "") for a in listener.get("DefaultActions") or [])
    protocol = str(listener.get("Protocol") or "").lower()
    return Listener(protocol=protocol, port=int(listener.get("Port") or 0), backends=backends, name=name)


def to_load_balancer(
    item: Mapping[str, Any],
    listeners: Sequence[Mapping[str, Any]],
    groups: Mapping[str, Mapping[str, Any]],
    health: _Health,
    account: str,
    region: str,
) -> Resource:
    """An ELBv2 load balancer with its listeners; ``groups`` and ``health`` are by target group ARN."""
    scheme = "internet" if item.get("Scheme") == "internet-facing" else "intranet"
    addresses = [a for z in item.get("AvailabilityZones") or [] for a in z.get("LoadBalancerAddresses") or []]
    state = str((item.get("State") or {}).get("Code") or "")
    ordered = sorted(listeners, key=lambda x: int(x.get("Port") or 0))
    return Resource(
        kind="load_balancer", provider=PROVIDER, account=account, region=region,
        id=str(item.get("LoadBalancerArn") or ""), name=str(item.get("LoadBalancerName") or ""),
        state=_LB_STATE.get(state, state),
        private_ips=as_tuple(a.get("PrivateIPv4Address") for a in addresses),
        public_ips=as_tuple(a.get("IpAddress") for a in addresses),
        dns_names=as_tuple([str(item.get("DNSName") or "").lower()]),
        links=_sg_links(item.get("SecurityGroups") or (), item.get("VpcId") or ""),
        listeners=tuple(_listener(lst, groups, health) for lst in ordered),
        details=_details(
            type=item.get("Type"), scheme=scheme, vpc=item.get("VpcId"), created=iso_time(item.get("CreatedTime")),
            zones=",".join(as_tuple(z.get("ZoneName") for z in item.get("AvailabilityZones") or [])),
            hosted_zone=item.get("CanonicalHostedZoneId"),
        ),
    )


# --- network ----------------------------------------------------------------------------------------


def _rules(permissions: Iterable[Mapping[str, Any]], direction: str) -> list[Rule]:
    out: list[Rule] = []
    for perm in permissions:
        protocol = _PROTOCOLS.get(str(perm.get("IpProtocol")), str(perm.get("IpProtocol") or "all").lower())
        low, high = perm.get("FromPort"), perm.get("ToPort")
        if protocol in ("all", "icmp", "icmpv6") or low in (None, -1):
            low, high = 0, 65535  # ICMP's "ports" are types and codes: the rule admits the protocol whole
        sources = [(r.get("CidrIp"), r.get("Description")) for r in perm.get("IpRanges") or []]
        sources += [(r.get("CidrIpv6"), r.get("Description")) for r in perm.get("Ipv6Ranges") or []]
        sources += [(g.get("GroupId"), g.get("Description")) for g in perm.get("UserIdGroupPairs") or []]
        sources += [(p.get("PrefixListId"), p.get("Description")) for p in perm.get("PrefixListIds") or []]
        out.extend(
            Rule(
                direction=direction,  # type: ignore[arg-type]
                protocol=protocol, port_from=int(low), port_to=int(high if high is not None else low),
                source=str(source), description=str(note or ""),
            )
            for source, note in sources if source
        )
    return out


def to_security_group(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """An EC2 security group with its ingress and egress rules."""
    tags = _tags(item.get("Tags"))
    vpc = str(item.get("VpcId") or "")
    return Resource(
        kind="security_group", provider=PROVIDER, account=account, region=region,
        id=str(item.get("GroupId") or ""), name=str(item.get("GroupName") or ""), state="available",
        tags=tags, owner=_owner(tags),
        links=(Link(rel="in_vpc", target=vpc, kind="vpc"),) if vpc else (),
        rules=tuple(
            _rules(item.get("IpPermissions") or [], "ingress") + _rules(item.get("IpPermissionsEgress") or [], "egress")
        ),
        details=_details(vpc=vpc, description=item.get("Description"), owner_id=item.get("OwnerId")),
    )


def to_address(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """An Elastic IP (``describe_addresses``): attached to an instance, else to a network interface."""
    tags = _tags(item.get("Tags"))
    if item.get("InstanceId"):
        links: tuple[Link, ...] = (Link(rel="attached_to", target=item["InstanceId"], kind="server"),)
    elif item.get("NetworkInterfaceId"):
        links = (Link(rel="attached_to", target=item["NetworkInterfaceId"], kind="network_interface"),)
    else:
        links = ()
    ip = str(item.get("PublicIp") or "")
    return Resource(
        kind="ip", provider=PROVIDER, account=account, region=region,
        id=str(item.get("AllocationId") or ip), name=tags.get("Name", ip),
        state="in_use" if item.get("AssociationId") or links else "available",
        public_ips=as_tuple([ip]), tags=tags, owner=_owner(tags), links=links,
        details=_details(
            private_ip=item.get("PrivateIpAddress"), domain=item.get("Domain"), association=item.get("AssociationId"),
            interface=item.get("NetworkInterfaceId"),
        ),
    )


def to_nat_gateway(item: Mapping[str, Any], account: str, region: str) -> Resource:
    """A NAT gateway with the public (Elastic) and private addresses it translates through."""
    tags = _tags(item.get("Tags"))
    addresses = item.get("NatGatewayAddresses") or []
    vpc = str(item.get("VpcId") or "")
    allocations = as_tuple(a.get("AllocationId") for a in addresses)
    return Resource(
        kind="nat_gateway", provider=PROVIDER, account=account, region=region,
        id=str(item.get("NatGatewayId") or ""), name=tags.get("Name", ""),
        state=str(item.get("State") or "").lower(),
        private_ips=as_tuple(a.get("PrivateIp") for a in addresses),
        public_ips=as_tuple(a.get("PublicIp") for a in addresses),
        tags=tags, owner=_owner(tags),
        links=((Link(rel="in_vpc", target=vpc, kind="vpc"),) if vpc else ()),
        details=_details(
            vpc=vpc, subnet=item.get("SubnetId"), type=item.get("ConnectivityType"),
            eips=",".join(allocations), created=iso_time(item.get("CreateTime")),
        ),
    )


# --- DNS ----------------------------------------------------------------------------------------------


def _fqdn(name: str) -> str:
    """Route 53 escapes ``*`` and other characters as ``\\NNN`` (octal); names end with a dot."""
    text = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), name)
    return text.rstrip(".").lower()


def to_records(item: Mapping[str, Any], zone: Mapping[str, Any], account: str) -> list[Resource]:
    """A Route 53 record set: one resource per value; an alias points to its target's DNS name."""
    fqdn = _fqdn(str(item.get("Name") or ""))
    rtype = str(item.get("Type") or "")
    alias = item.get("AliasTarget") or {}
    if alias:
        values = [_fqdn(str(alias.get("DNSName") or ""))]
    else:
        values = [str(r.get("Value") or "").rstrip(".") for r in item.get("ResourceRecords") or []]
    base = f"{fqdn} {rtype}" + (f" {item['SetIdentifier']}" if item.get("SetIdentifier") else "")
    zone_name = _fqdn(str(zone.get("Name") or ""))
    private = (zone.get("Config") or {}).get("PrivateZone")
    zone_id = str(zone.get("Id") or "").rsplit("/", 1)[-1]
    out = []
    for value in (v for v in values if v):
        rid = f"{base} {value}" if len(values) > 1 else base
        out.append(Resource(
            kind="dns_record", provider=PROVIDER, account=account, region="", id=rid, name=fqdn,
            state="active", dns_names=(fqdn,),
            links=(Link(rel="points_to", target=value, kind="load_balancer" if ".elb." in value else ""),),
            details=_details(
                type=rtype, value=value, ttl=item.get("TTL"), zone=zone_name, zone_id=zone_id,
                alias="yes" if alias else "", private_zone="yes" if private else "", set=item.get("SetIdentifier"),
            ),
        ))
    return out


# --- storage ------------------------------------------------------------------------------------------


def bucket_hosts(name: str, region: str) -> tuple[str, ...]:
    """The virtual-hosted endpoint names a bucket answers on (the global one alone when its region is unknown)."""
    hosts = [f"{name}.s3.{region}.amazonaws.com"] if region else []
    if region in ("us-east-1", ""):
        hosts.append(f"{name}.s3.amazonaws.com")
    return tuple(hosts)


def acl_is_public(grants: Iterable[Mapping[str, Any]]) -> bool:
    """Whether an ACL grants anything to everyone (or to every AWS account)."""
    return any((g.get("Grantee") or {}).get("URI") in _PUBLIC_GRANTEES for g in grants)


def to_bucket(item: Mapping[str, Any], facts: Mapping[str, Any], account: str) -> Resource:
    """An S3 bucket from ``list_buckets`` plus ``facts`` (``region``, ``public`` yes/no/unknown, ``acl``, ``why``)."""
    name = str(item.get("Name") or "")
    region = str(facts.get("region") or "")
    return Resource(
        kind="bucket", provider=PROVIDER, account=account, region=region, id=name, name=name, state="available",
        dns_names=bucket_hosts(name, region),
        details=_details(
            public=facts.get("public") or "unknown", acl=facts.get("acl"), public_by=facts.get("why"),
            created=iso_time(item.get("CreationDate")), storage_class=facts.get("storage_class"),
        ),
    )


# --- changes ------------------------------------------------------------------------------------------


def _principal(identity: Mapping[str, Any], fallback: str) -> str:
    kind = str(identity.get("type") or "")
    if kind == "AssumedRole":
        issuer = ((identity.get("sessionContext") or {}).get("sessionIssuer") or {}).get("userName") or ""
        session = str(identity.get("arn") or "").rsplit("/", 1)[-1]
        role = f"AssumedRole/{issuer}" if issuer else "AssumedRole"
        return f"{role} ({session})" if session and session != issuer else role
    if kind == "Root":
        return "root"
    if kind == "AWSService":
        return str(identity.get("invokedBy") or "AWS service")
    return str(identity.get("userName") or fallback or str(identity.get("arn") or "").rsplit("/", 1)[-1] or kind)


def to_change(event: Mapping[str, Any], account: str, region: str, wanted: Sequence[str] = ()) -> Change:
    """A CloudTrail ``LookupEvents`` event; ``wanted`` are the ids/names asked about (to pick the right resource)."""
    try:
        detail = json.loads(event.get("CloudTrailEvent") or "{}")
    except (TypeError, ValueError):
        detail = {}
    resources = event.get("Resources") or []
    chosen = next((r for r in resources if r.get("ResourceName") in wanted), resources[0] if resources else {})
    rname = str(chosen.get("ResourceName") or "")
    return Change(
        time=iso_time(event.get("EventTime")),
        provider=PROVIDER, account=account, region=str(detail.get("awsRegion") or region),
        action=str(event.get("EventName") or detail.get("eventName") or ""),
        principal=_principal(detail.get("userIdentity") or {}, str(event.get("Username") or "")),
        resource_id=rname, resource_name=rname if rname and not rname.startswith("arn:") else "",
        resource_kind=_RESOURCE_KINDS.get(str(chosen.get("ResourceType") or ""), ""),
        source_ip=str(detail.get("sourceIPAddress") or ""),
        outcome=str(detail.get("errorCode") or "success"),
        detail=str(detail.get("errorMessage") or "")[:200],
    )
