"""The inventory file's estate sections as validated models, and their mapping into :class:`Resource` (in one place)."""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from tools.estate.resource import Change, Link, Listener, Resource, Rule
from tools.providers.inventory import InventoryEntry
from tools.providers.inventory_cluster import Cluster

__all__ = ["SECTION_KINDS", "EstateFile"]

SECTION_KINDS: Mapping[str, str] = {
    "databases": "database", "caches": "cache", "load_balancers": "load_balancer", "security_groups": "security_group",
    "ips": "ip", "nat_gateways": "nat_gateway", "dns": "dns_record", "buckets": "bucket",
}
"""Top-level section → the kind of its entries (``kubernetes`` and ``changes`` are read apart)."""


def _ip(value: str) -> str:
    return str(ipaddress.ip_address(value.strip())) if value.strip() else ""


class _Entry(InventoryEntry):
    @field_validator("ip", "public_ip", check_fields=False)
    @classmethod
    def _address(cls, value: str) -> str:
        return _ip(value)


class DataStore(_Entry):
    """A database or cache."""

    name: str = Field(min_length=1)
    id: str = ""
    engine: str = ""
    ip: str = ""
    public_ip: str = ""
    dns: str = ""
    port: int | None = None
    datacenter: str = ""
    status: str = "running"
    security_groups: list[str] = Field(default_factory=list)
    owner: str = ""
    env: str = ""
    tags: dict[str, str] = Field(default_factory=dict)

    def to_resource(self, kind: Any, account: str) -> Resource:
        tags = dict(self.tags) | ({"env": self.env} if self.env else {})
        engine, _, version = self.engine.partition(" ")
        return Resource(
            kind=kind, provider="inventory", account=account, region=self.datacenter, id=self.id or self.name, name=self.name,
            state=self.status.lower(), private_ips=(self.ip,) if self.ip else (), public_ips=(self.public_ip,) if self.public_ip else (),
            dns_names=(self.dns.lower(),) if self.dns else (), tags=tags, owner=self.owner,
            links=tuple(Link(rel="security_group", target=g, kind="security_group") for g in self.security_groups),
            details={k: v for k, v in (("engine", engine), ("version", version), ("port", str(self.port or ""))) if v},
        )


class Backend(_Entry):
    """One backend of a listener: a host name or id, or an address."""

    target: str = Field(min_length=1)
    port: int | None = None
    health: Literal["healthy", "unhealthy", "unknown", "unused", ""] = ""


class ListenerEntry(_Entry):
    """One listener."""

    protocol: str = "tcp"
    port: int = Field(ge=1, le=65535)
    backends: list[Backend] = Field(default_factory=list)
    status: str = ""


class Balancer(_Entry):
    """A load balancer."""

    name: str = Field(min_length=1)
    id: str = ""
    ip: str = ""
    public_ip: str = ""
    dns: str = ""
    scheme: str = "intranet"
    datacenter: str = ""
    status: str = "active"
    security_groups: list[str] = Field(default_factory=list)
    listeners: list[ListenerEntry] = Field(default_factory=list)
    owner: str = ""
    tags: dict[str, str] = Field(default_factory=dict)

    def to_resource(self, kind: Any, account: str) -> Resource:
        listeners = tuple(
            Listener(protocol=li.protocol.lower(), port=li.port, state=li.status.lower(), backends=tuple(
                Link(rel="backend", target=b.target, port=b.port, health=b.health) for b in li.backends))
            for li in self.listeners
        )
        return Resource(
            kind=kind, provider="inventory", account=account, region=self.datacenter, id=self.id or self.name, name=self.name,
            state=self.status.lower(), private_ips=(self.ip,) if self.ip else (), public_ips=(self.public_ip,) if self.public_ip else (),
            dns_names=(self.dns.lower(),) if self.dns else (), tags=dict(self.tags), owner=self.owner, listeners=listeners,
            links=tuple(Link(rel="security_group", target=g, kind="security_group") for g in self.security_groups),
            details={"scheme": self.scheme},
        )


class RuleEntry(_Entry):
    """One rule; ``ports`` is ``22``, ``80-443`` or ``all``."""

    direction: Literal["ingress", "egress"] = "ingress"
    protocol: Literal["tcp", "udp", "icmp", "all"] = "tcp"
    ports: str = "all"
    source: str = Field(min_length=1)
    action: Literal["allow", "deny"] = "allow"
    priority: int = 0
    description: str = ""

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: str) -> str:
        text = str(value).strip().lower()
        if text == "all":
            return text
        low, _, high = text.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or not 0 <= int(low) <= int(high or low) <= 65535:
            raise ValueError(f"ports {value!r}: give a port (22), a range (8000-8080) or all")
        return text

    def to_rule(self) -> Rule:
        low, _, high = self.ports.partition("-")
        first, last = (0, 65535) if self.ports == "all" else (int(low), int(high or low))
        return Rule(direction=self.direction, protocol=self.protocol, port_from=first, port_to=last, source=self.source,
                    action=self.action, priority=self.priority, description=self.description)


class Group(_Entry):
    """A security group."""

    id: str = Field(min_length=1)
    name: str = ""
    description: str = ""
    datacenter: str = ""
    rules: list[RuleEntry] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    def to_resource(self, kind: Any, account: str) -> Resource:
        return Resource(kind=kind, provider="inventory", account=account, region=self.datacenter, id=self.id, name=self.name,
                        tags=dict(self.tags), rules=tuple(r.to_rule() for r in self.rules),
                        details={"description": self.description} if self.description else {})


class Address(_Entry):
    """An elastic / public IP."""

    ip: str
    id: str = ""
    attached_to: str = ""
    datacenter: str = ""
    status: str = "in-use"

    def to_resource(self, kind: Any, account: str) -> Resource:
        links = (Link(rel="attached_to", target=self.attached_to),) if self.attached_to else ()
        return Resource(kind=kind, provider="inventory", account=account, region=self.datacenter, id=self.id or self.ip,
                        name=self.ip, state=self.status.lower(), public_ips=(self.ip,), links=links)


class Nat(_Entry):
    """A NAT gateway."""

    id: str = Field(min_length=1)
    name: str = ""
    public_ips: list[str] = Field(default_factory=list)
    datacenter: str = ""
    status: str = "available"

    def to_resource(self, kind: Any, account: str) -> Resource:
        return Resource(kind=kind, provider="inventory", account=account, region=self.datacenter, id=self.id, name=self.name,
                        state=self.status.lower(), public_ips=tuple(_ip(i) for i in self.public_ips))


class Record(_Entry):
    """A DNS record."""

    name: str = Field(min_length=1)
    type: Literal["A", "AAAA", "CNAME", "ALIAS", "MX", "TXT", "NS", "SRV"] = "A"
    value: str = Field(min_length=1)
    ttl: int = 600
    zone: str = ""

    def to_resource(self, kind: Any, account: str) -> Resource:
        fqdn = self.name.lower().rstrip(".")
        value = self.value.rstrip(".")
        return Resource(kind=kind, provider="inventory", account=account, region="", id=f"{fqdn} {self.type}", name=fqdn,
                        dns_names=(fqdn,), links=(Link(rel="points_to", target=value.lower()),),
                        details={"type": self.type, "value": value, "ttl": str(self.ttl), "zone": self.zone})


class Bucket(_Entry):
    """An object storage bucket."""

    name: str = Field(min_length=1)
    region: str = ""
    public: bool = False
    acl: str = ""
    storage_class: str = ""
    endpoint: str = ""
    owner: str = ""
    tags: dict[str, str] = Field(default_factory=dict)

    def to_resource(self, kind: Any, account: str) -> Resource:
        details = {"public": "yes" if self.public else "no", "acl": self.acl, "storage_class": self.storage_class}
        return Resource(kind=kind, provider="inventory", account=account, region=self.region, id=self.name, name=self.name,
                        dns_names=(self.endpoint.lower(),) if self.endpoint else (), tags=dict(self.tags), owner=self.owner,
                        details={k: v for k, v in details.items() if v})


_AGO = re.compile(r"^-(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?$")


class ChangeEntry(_Entry):
    """One line of the change log; ``time`` is ISO 8601 UTC, or an age such as ``-2d`` or ``-1d22h`` (a demo that
    stays current: the age is counted from when the file is read)."""

    time: str = Field(min_length=2)

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        text = str(value).strip()
        match = _AGO.match(text)
        if match and any(match.groups()):
            days, hours, minutes = (int(g or 0) for g in match.groups())
            at = time.time() - days * 86400 - hours * 3600 - minutes * 60
            return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"time {text!r}: give an ISO 8601 time (2026-11-30T02:14:09Z) or an age (-2d, -1d22h)") from None
        return text
    resource: str = Field(min_length=1)
    action: str = Field(min_length=1)
    principal: str = ""
    source_ip: str = ""
    outcome: str = "success"
    detail: str = ""
    region: str = ""

    def to_change(self, account: str) -> Change:
        return Change(time=self.time, provider="inventory", account=account, region=self.region, action=self.action,
                      principal=self.principal, resource_id=self.resource, resource_name=self.resource,
                      source_ip=self.source_ip, outcome=self.outcome, detail=self.detail)


class EstateFile(_Entry):
    """Every estate section of the file."""

    databases: list[DataStore] = Field(default_factory=list)
    caches: list[DataStore] = Field(default_factory=list)
    load_balancers: list[Balancer] = Field(default_factory=list)
    security_groups: list[Group] = Field(default_factory=list)
    ips: list[Address] = Field(default_factory=list)
    nat_gateways: list[Nat] = Field(default_factory=list)
    dns: list[Record] = Field(default_factory=list)
    buckets: list[Bucket] = Field(default_factory=list)
    kubernetes: Cluster | None = None
    changes: list[ChangeEntry] = Field(default_factory=list)

    def resources(self, account: str) -> dict[str, tuple[Resource, ...]]:
        """Every resource, by kind."""
        out: dict[str, list[Resource]] = {}
        for section, kind in SECTION_KINDS.items():
            for entry in getattr(self, section):
                out.setdefault(kind, []).append(entry.to_resource(kind, account))
        if self.kubernetes is not None:
            for resource in self.kubernetes.resources():
                out.setdefault(resource.kind, []).append(resource)
        return {kind: tuple(found) for kind, found in out.items()}

    def change_log(self, account: str) -> tuple[Change, ...]:
        """The change log."""
        return tuple(c.to_change(account) for c in self.changes)

