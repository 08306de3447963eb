"""The one record every provider maps its resources into: :class:`Resource`, its links, listeners, rules, and changes.

Cloud APIs disagree on everything: an RDS instance has an endpoint, an SLB a
VIP, a pod an IP, a DNS record a value. Each provider translates its SDK's
shapes into :class:`Resource` in one module of its own; everything after that
(:func:`find_resource <tools.estate.matching>`, the relationship walk, cards,
the demo, the eval suite) reads only this module's records.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

__all__ = [
    "KINDS",
    "KIND_LABELS",
    "WORLD",
    "Change",
    "Kind",
    "Link",
    "LinkRel",
    "Listener",
    "Resource",
    "Rule",
    "kind_label",
    "kinds_label",
]

Kind = Literal[
    "server",
    "database",
    "cache",
    "load_balancer",
    "security_group",
    "ip",
    "nat_gateway",
    "dns_record",
    "bucket",
    "k8s_node",
    "pod",
    "workload",
    "k8s_service",
    "ingress",
]
"""What a resource is; ``ip`` is an elastic/public address, ``workload`` a Deployment, StatefulSet or DaemonSet."""

KINDS: tuple[str, ...] = get_args(Kind)
"""Every kind, in the order results list them."""

KIND_LABELS: Mapping[str, str] = {
    "server": "server",
    "database": "database",
    "cache": "cache",
    "load_balancer": "load balancer",
    "security_group": "security group",
    "ip": "elastic IP",
    "nat_gateway": "NAT gateway",
    "dns_record": "DNS record",
    "bucket": "bucket",
    "k8s_node": "Kubernetes node",
    "pod": "pod",
    "workload": "workload",
    "k8s_service": "Kubernetes service",
    "ingress": "ingress",
}
"""How a kind reads in a sentence ("a load balancer")."""

LinkRel = Literal["backend", "security_group", "attached_to", "points_to", "in_vpc", "runs_on", "selects", "routes_to", "member_of"]
"""How a resource relates to another.

``backend``: a load balancer (listener) or service sends traffic to it; ``security_group``: its traffic is filtered by
that group; ``attached_to``: an elastic IP or NAT sits on it; ``points_to``: a DNS record's value (a name or address);
``in_vpc``: its network; ``runs_on``: a pod's node; ``selects``: a service's or workload's pods; ``routes_to``: an
ingress rule's service; ``member_of``: a replica's cluster or a pod's workload.
"""

WORLD = ("0.0.0.0/0", "::/0")
"""Sources that mean "anyone on the internet"."""


def kind_label(kind: str) -> str:
    """``load_balancer`` → "load balancer"."""
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def kinds_label(kind: str) -> str:
    """The plural: "load balancers", "ingresses", "elastic IPs"."""
    label = kind_label(kind)
    return label + ("es" if label.endswith(("s", "ss")) else "s")


@dataclass(frozen=True, kw_only=True)
class Link:
    """A typed reference from one resource to another (which may live at another provider, or be only an address)."""

    rel: LinkRel
    """How the two relate."""
    target: str
    """The related resource's id, or, for ``points_to``, the DNS name or address a record resolves to."""
    kind: str = ""
    """The related resource's kind, when the provider knows it ("server", "pod")."""
    port: int | None = None
    """The port traffic goes to (a backend's port), when one."""
    health: str = ""
    """A backend's health as the load balancer sees it: ``healthy``, ``unhealthy``, ``unused``, ``unknown`` or empty."""
    note: str = ""
    """A short remark the provider gave (a health check's reason, a weight)."""


@dataclass(frozen=True, kw_only=True)
class Listener:
    """One front port of a load balancer (or a Kubernetes service port) and where it sends traffic."""

    protocol: str
    """``tcp``, ``udp``, ``http``, ``https``, … in lower case."""
    port: int
    """The port clients connect to."""
    backends: tuple[Link, ...] = ()
    """Where the traffic goes (``rel="backend"``), each with its port and health."""
    state: str = ""
    """``running`` or ``stopped`` when the provider reports it; empty when it does not."""
    name: str = ""
    """The listener's or target group's name or id, when it has one."""


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One security group rule, normalized."""

    direction: Literal["ingress", "egress"]
    """Inbound or outbound."""
    protocol: str
    """``tcp``, ``udp``, ``icmp`` or ``all``."""
    port_from: int = 0
    """First port of the range (0 with ``port_to`` 65535: every port)."""
    port_to: int = 65535
    """Last port of the range."""
    source: str = ""
    """A CIDR (``0.0.0.0/0``), another group's id, or a prefix list: where the traffic may come from (or go to)."""
    action: Literal["allow", "deny"] = "allow"
    """Allow or deny (Alibaba and Tencent groups have deny rules)."""
    priority: int = 0
    """Lower wins where the cloud orders rules (Alibaba 1-100; Tencent by position); 0 when unordered (AWS)."""
    description: str = ""
    """The rule's description, when one."""

    @property
    def open_to_world(self) -> bool:
        """An allow rule from anyone on the internet."""
        return self.action == "allow" and self.source in WORLD

    def covers(self, port: int, protocol: str = "tcp") -> bool:
        """Whether this rule matches traffic to ``port`` over ``protocol``."""
        if self.protocol not in ("all", protocol.lower()):
            return False
        return self.port_from <= port <= self.port_to

    def matches_source(self, address: str) -> bool:
        """Whether traffic from ``address`` (an IP or CIDR; ``0.0.0.0/0`` for "anyone") falls under :attr:`source`."""
        try:
            rule = ipaddress.ip_network(self.source, strict=False)
            asked = ipaddress.ip_network(address, strict=False)
        except ValueError:
            return False
        return asked.version == rule.version and asked.subnet_of(rule)  # type: ignore[arg-type]

    def render(self) -> str:
        """``allow tcp 22 from 0.0.0.0/0``."""
        ports = "all ports" if (self.port_from, self.port_to) in ((0, 65535), (1, 65535), (-1, -1)) else (
            str(self.port_from) if self.port_from == self.port_to else f"{self.port_from}-{self.port_to}"
        )
        way = "from" if self.direction == "ingress" else "to"
        return f"{self.action} {self.protocol} {ports} {way} {self.source or '?'}"


@dataclass(frozen=True, kw_only=True)
class Resource:
    """One thing in the estate, whatever it is and wherever it lives."""

    kind: Kind
    """What it is."""
    provider: str
    """Provider key: ``aliyun``, ``tencent``, ``aws``, ``kubernetes`` or ``inventory``."""
    account: str
    """Account label from the config (a kube context for Kubernetes, the inventory's name for the inventory)."""
    region: str
    """Region (a namespace for namespaced Kubernetes objects; a data centre in the inventory); empty when global."""
    id: str
    """The provider's id for it (instance id, ARN-less id, ``namespace/name`` for Kubernetes, the FQDN+type for DNS)."""
    name: str = ""
    """Its name, when it has one apart from the id."""
    state: str = ""
    """Normalized state in lower case (``running``, ``stopped``, ``available``, ``active``, ``pending``, ``failed``)."""
    private_ips: tuple[str, ...] = ()
    """Private addresses (a VIP, an endpoint's address, a pod IP)."""
    public_ips: tuple[str, ...] = ()
    """Public addresses (elastic IPs, internet-facing VIPs)."""
    dns_names: tuple[str, ...] = ()
    """DNS names it answers to (an RDS endpoint, an ELB's name, a bucket's endpoint, a record's FQDN, ingress hosts)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags or labels."""
    owner: str = ""
    """Who owns it (an ``owner`` tag, the inventory's owner, a pod's workload), when known."""
    links: tuple[Link, ...] = ()
    """Typed references to related resources."""
    listeners: tuple[Listener, ...] = ()
    """A load balancer's or Kubernetes service's listeners."""
    rules: tuple[Rule, ...] = ()
    """A security group's rules."""
    details: Mapping[str, str] = field(default_factory=dict)
    """Kind-specific facts, short strings: ``engine``, ``version``, ``port``, ``class``, ``type`` and ``value`` of a record,
    ``public`` of a bucket, ``zone``, ``vpc``, ``created``…"""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity across queries: provider, account, kind, id."""
        return (self.provider, self.account, self.kind, self.id)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every address and DNS name, private first."""
        return self.private_ips + self.public_ips + self.dns_names

    @property
    def title(self) -> str:
        """``prod-db-01 [rm-bp1abc]`` or the id alone."""
        return f"{self.name} [{self.id}]" if self.name and self.name != self.id else (self.name or self.id)

    def links_of(self, rel: str) -> tuple[Link, ...]:
        """The links of one relation, in order."""
        return tuple(link for link in self.links if link.rel == rel)


@dataclass(frozen=True, kw_only=True)
class Change:
    """One recorded action on a resource, from a cloud's audit trail or the cluster's events."""

    time: str
    """When, ISO 8601 in UTC (``2026-11-30T02:14:09Z``)."""
    provider: str
    """Provider key."""
    account: str
    """Account label (kube context)."""
    region: str
    """Region (namespace) where it happened; empty when global."""
    action: str
    """The API call or event reason (``StopDBInstance``, ``StopInstances``, ``BackOff``)."""
    principal: str
    """Who did it: user, role or service (``alice@corp``, ``AssumedRole/ops-automation``, ``kubelet``)."""
    resource_id: str = ""
    """The changed resource's id."""
    resource_name: str = ""
    """The changed resource's name, when the trail gives one."""
    resource_kind: str = ""
    """Its kind, when known."""
    source_ip: str = ""
    """Where the call came from, when the trail records it."""
    outcome: str = ""
    """``success``, or the error the call failed with (``AccessDenied``)."""
    detail: str = ""
    """A short free-text message (a Kubernetes event's message), when one."""

    def render(self) -> str:
        """``2026-11-30T02:14:09Z StopDBInstance by alice@corp on prod-db-03 [rm-x] from 1.2.3.4 (success)``."""
        text = f"{self.time} {self.action} by {self.principal or 'unknown'}"
        target = self.resource_name or self.resource_id
        if target:
            text += f" on {target}" + (f" [{self.resource_id}]" if self.resource_name and self.resource_id else "")
        if self.source_ip:
            text += f" from {self.source_ip}"
        if self.outcome and self.outcome != "success":
            text += f" (failed: {self.outcome})"
        if self.detail:
            text += f": {self.detail}"
        return text
