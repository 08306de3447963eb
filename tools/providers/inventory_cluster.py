"""The inventory file's ``kubernetes:`` section: a static cluster (nodes, pods, workloads, services, ingresses).

The demo and on-prem estates without API access describe a cluster here; its
objects map into the same :class:`Resource` shapes the Kubernetes provider
gives (id ``namespace/name``, the context as account, the namespace as region).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pydantic import Field

from tools.estate.resource import Link, Listener, Resource
from tools.providers.inventory import InventoryEntry

__all__ = ["Cluster"]


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Node(InventoryEntry):
    """A node."""

    name: str = Field(min_length=1)
    ip: str = ""
    status: str = "ready"
    labels: dict[str, str] = Field(default_factory=dict)


class Pod(InventoryEntry):
    """A pod; ``status`` is its phase or its waiting reason (``CrashLoopBackOff``)."""

    name: str = Field(min_length=1)
    namespace: str = "default"
    ip: str = ""
    node: str = ""
    status: str = "running"
    workload: str = ""
    restarts: int = 0
    labels: dict[str, str] = Field(default_factory=dict)


class Workload(InventoryEntry):
    """A Deployment, StatefulSet or DaemonSet."""

    name: str = Field(min_length=1)
    namespace: str = "default"
    kind: str = "Deployment"
    replicas: int = 1
    ready: int = 1
    selector: dict[str, str] = Field(default_factory=dict)


class ServicePort(InventoryEntry):
    """One port of a service."""

    port: int = Field(ge=1, le=65535)
    protocol: str = "tcp"
    target_port: int | None = None


class Service(InventoryEntry):
    """A service."""

    name: str = Field(min_length=1)
    namespace: str = "default"
    type: str = "ClusterIP"
    cluster_ip: str = ""
    external_ip: str = ""
    ports: list[ServicePort] = Field(default_factory=list)
    selector: dict[str, str] = Field(default_factory=dict)


class Route(InventoryEntry):
    """Where an ingress sends a host's traffic."""

    service: str = Field(min_length=1)
    port: int | None = None


class Ingress(InventoryEntry):
    """An ingress."""

    name: str = Field(min_length=1)
    namespace: str = "default"
    hosts: list[str] = Field(default_factory=list)
    ip: str = ""
    routes: list[Route] = Field(default_factory=list)


class Cluster(InventoryEntry):
    """A cluster under one context."""

    context: str = Field(min_length=1)
    nodes: list[Node] = Field(default_factory=list)
    pods: list[Pod] = Field(default_factory=list)
    workloads: list[Workload] = Field(default_factory=list)
    services: list[Service] = Field(default_factory=list)
    ingresses: list[Ingress] = Field(default_factory=list)

    def resources(self) -> Iterator[Resource]:
        """Every object as a :class:`Resource`."""
        ctx = self.context
        for n in self.nodes:
            yield Resource(kind="k8s_node", provider="inventory", account=ctx, region="", id=n.name, name=n.name,
                           state=n.status.lower(), private_ips=(n.ip,) if n.ip else (), tags=dict(n.labels))
        for p in self.pods:
            links = ((Link(rel="runs_on", target=p.node, kind="k8s_node"),) if p.node else ()) + (
                (Link(rel="member_of", target=f"{p.namespace}/{p.workload}", kind="workload"),) if p.workload else ())
            yield Resource(kind="pod", provider="inventory", account=ctx, region=p.namespace, id=f"{p.namespace}/{p.name}",
                           name=p.name, state=p.status.lower(), private_ips=(p.ip,) if p.ip else (), tags=dict(p.labels),
                           owner=p.workload, links=links,
                           details={k: v for k, v in (("node", p.node), ("restarts", str(p.restarts) if p.restarts else "")) if v})
        for w in self.workloads:
            state = "available" if w.ready >= w.replicas else "degraded"
            yield Resource(kind="workload", provider="inventory", account=ctx, region=w.namespace, id=f"{w.namespace}/{w.name}",
                           name=w.name, state=state,
                           details={"type": w.kind, "replicas": f"{w.ready}/{w.replicas} ready", "selector": _selector(w.selector)})
        for s in self.services:
            yield Resource(kind="k8s_service", provider="inventory", account=ctx, region=s.namespace,
                           id=f"{s.namespace}/{s.name}", name=s.name, state="active",
                           private_ips=(s.cluster_ip,) if s.cluster_ip else (), public_ips=(s.external_ip,) if s.external_ip else (),
                           listeners=tuple(Listener(protocol=sp.protocol.lower(), port=sp.port,
                                                    name=f"target {sp.target_port}" if sp.target_port else "") for sp in s.ports),
                           details={"type": s.type, "selector": _selector(s.selector)})
        for i in self.ingresses:
            yield Resource(kind="ingress", provider="inventory", account=ctx, region=i.namespace, id=f"{i.namespace}/{i.name}",
                           name=i.name, state="active", public_ips=(i.ip,) if i.ip else (),
                           dns_names=tuple(h.lower() for h in i.hosts),
                           links=tuple(Link(rel="routes_to", target=f"{i.namespace}/{r.service}", kind="k8s_service", port=r.port)
                                       for r in i.routes))
