"""The relationship walk: DNS name → records → load balancer → listeners → backends → security groups.

:func:`trace` starts from a DNS name, an address or a resource and follows
the typed links of what the fan-out found, one hop at a time, into a chain a
person can read top to bottom. Each hop says where the path breaks (a record
pointing nowhere, a listener without backends, an unhealthy backend, a
stopped server, a crashing pod) and each security group shows the rules that
open it to the whole internet. With a port, it answers whether that port is
reachable from 0.0.0.0/0 at the entry point.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tools.estate.matching import Query
from tools.estate.reach import SENSITIVE_PORTS, reach, world_open_rules
from tools.estate.resource import Resource, kind_label

__all__ = ["MAX_HOPS", "Hop", "Walk", "trace"]

MAX_HOPS = 120
"""Most hops one walk shows (a load balancer in front of hundreds of pods is summarized, not listed)."""

_STOPPED = {"stopped", "terminated", "failed", "notready", "degraded", "crashloopbackoff", "error", "deleting", "isolated", "expired"}
_ENTRY_KINDS = ("load_balancer", "ingress", "k8s_service", "server", "ip", "database", "cache", "pod", "bucket")


@dataclass(frozen=True)
class Hop:
    """One step of the chain."""

    depth: int
    """How far from the start (0: what the target resolved to)."""
    via: str
    """How this hop was reached ("CNAME", "listener https:443", "backend :8080", "security group")."""
    resource: Resource | None = None
    """The resource reached; ``None`` for an address the estate does not hold."""
    label: str = ""
    """What the hop shows when there is no resource (an external name or address)."""
    problem: str = ""
    """Where the path breaks here, in a few words; empty when it does not."""
    flags: tuple[str, ...] = ()
    """Warnings that do not break the path (a port open to the internet)."""


@dataclass(frozen=True)
class Walk:
    """A finished walk."""

    hops: tuple[Hop, ...]
    """The chain, in reading order."""
    reach: str = ""
    """The answer to "is the port reachable from 0.0.0.0/0?", when one can be given."""
    cut: bool = False
    """The walk stopped at :data:`MAX_HOPS`."""
    problems: tuple[str, ...] = field(default=())
    """Every break on the path, one line each."""


class _Index:
    """The fan-out's resources, findable by id, address and record name."""

    def __init__(self, resources: Iterable[Resource]) -> None:
        self.by_id: dict[str, list[Resource]] = defaultdict(list)
        self.by_address: dict[str, list[Resource]] = defaultdict(list)
        self.records: dict[str, list[Resource]] = defaultdict(list)
        self.pods: list[Resource] = []
        for r in resources:
            self.by_id[r.id.lower()].append(r)
            if r.kind == "dns_record":
                self.records[r.name.lower().rstrip(".")].append(r)
                continue
            if r.kind == "pod":
                self.pods.append(r)
            for address in r.addresses:
                self.by_address[address.lower().rstrip(".")].append(r)

    def resolve(self, ref: str, *, near: Resource | None = None) -> list[Resource]:
        """Resources with id or address ``ref``, those of ``near``'s account first."""
        key = ref.lower().rstrip(".")
        found = self.by_id.get(key) or self.by_address.get(key) or []
        if near is not None:
            found = sorted(found, key=lambda r: (r.provider != near.provider, r.account != near.account))
        return list(found)

    def selected(self, service: Resource) -> list[Resource]:
        """The pods a Kubernetes service or workload selects by labels, in its namespace and context."""
        selector = dict(p.split("=", 1) for p in service.details.get("selector", "").split(",") if "=" in p)
        if not selector:
            return []
        return [
            p for p in self.pods
            if p.account == service.account and p.region == service.region
            and all(p.tags.get(k) == v for k, v in selector.items())
        ]


class _Walker:
    def __init__(self, index: _Index, port: int | None) -> None:
        self.index = index
        self.port = port
        self.hops: list[Hop] = []
        self.seen: set[tuple[str, str, str, str]] = set()
        self.cut = False

    def add(self, hop: Hop) -> bool:
        if len(self.hops) >= MAX_HOPS:
            self.cut = True
            return False
        self.hops.append(hop)
        return True

    def visit(self, resource: Resource, via: str, depth: int, problem: str = "") -> None:
        if resource.key in self.seen:
            self.add(Hop(depth, via, resource, problem=problem, flags=("shown above",)))
            return
        self.seen.add(resource.key)
        state = resource.state.lower()
        if not problem and state in _STOPPED:
            problem = f"{kind_label(resource.kind)} is {state}"
        flags = tuple(self._open_rules(resource)) if resource.kind == "security_group" else ()
        if not self.add(Hop(depth, via, resource, problem=problem, flags=flags)):
            return
        handler = getattr(self, f"_after_{resource.kind}", None)
        if handler is not None:
            handler(resource, depth + 1)
        self._groups(resource, depth + 1)

    # -- per kind ---------------------------------------------------------------------

    def _after_dns_record(self, record: Resource, depth: int) -> None:
        for link in record.links_of("points_to"):
            value = link.target.lower().rstrip(".")
            rtype = record.details.get("type", "record")
            chained = self.index.records.get(value)
            if chained:
                for next_record in chained:
                    self.visit(next_record, rtype, depth)
                continue
            owners = self.index.resolve(value, near=record)
            if not owners:
                self.add(Hop(depth, rtype, label=value, problem="" if "." in value and not value[0].isdigit() else
                             "address not found in the estate"))
            for owner in owners:
                self.visit(owner, f"{rtype} {value}", depth)

    def _after_ip(self, eip: Resource, depth: int) -> None:
        for link in eip.links_of("attached_to"):
            for owner in self.index.resolve(link.target, near=eip) or []:
                self.visit(owner, "attached to", depth)

    def _after_load_balancer(self, lb: Resource, depth: int) -> None:
        listeners = [li for li in lb.listeners if self.port is None or li.port == self.port]
        if self.port is not None and not listeners:
            ports = ", ".join(f"{li.protocol}:{li.port}" for li in lb.listeners) or "none"
            self.add(Hop(depth, "listener", label=f"port {self.port}", problem=f"no listener on port {self.port} (listeners: {ports})"))
            return
        if not lb.listeners:
            self.add(Hop(depth, "listener", label="(none)", problem="the load balancer has no listener"))
        for listener in listeners:
            label = f"{listener.protocol}:{listener.port}" + (f" ({listener.name})" if listener.name else "")
            problem = "listener stopped" if listener.state in _STOPPED else ""
            if not listener.backends and lb.kind == "load_balancer":
                problem = problem or "no backend"
            self.add(Hop(depth, "listener", label=label, problem=problem))
            for backend in listener.backends:
                health = backend.health
                via = f"backend :{backend.port}" if backend.port else "backend"
                via += f" {health}" if health else ""
                bad = f"backend {health}" if health in ("unhealthy",) else ""
                owners = self.index.resolve(backend.target, near=lb)
                if not owners:
                    self.add(Hop(depth + 1, via, label=backend.target, problem=bad))
                for owner in owners[:1]:
                    self.visit(owner, via, depth + 1, problem=bad)

    def _after_k8s_service(self, service: Resource, depth: int) -> None:
        pods = self.index.selected(service)
        if service.details.get("selector") and not pods:
            self.add(Hop(depth, "selects", label=service.details["selector"], problem="the selector matches no pod"))
        for pod in pods:
            self.visit(pod, "selects", depth)

    def _after_workload(self, workload: Resource, depth: int) -> None:
        pods = self.index.selected(workload)
        if workload.details.get("selector") and not pods:
            self.add(Hop(depth, "runs", label=workload.details["selector"], problem="no pod matches the workload"))
        for pod in pods:
            self.visit(pod, "runs", depth)

    def _after_ingress(self, ingress: Resource, depth: int) -> None:
        for link in ingress.links_of("routes_to"):
            services = [s for s in self.index.resolve(link.target, near=ingress) if s.kind == "k8s_service"]
            if not services:
                self.add(Hop(depth, f"routes to :{link.port}" if link.port else "routes to", label=link.target,
                             problem="service not found"))
            for service in services[:1]:
                self.visit(service, f"routes to :{link.port}" if link.port else "routes to", depth)

    def _after_pod(self, pod: Resource, depth: int) -> None:
        for link in pod.links_of("runs_on"):
            for node in self.index.resolve(link.target, near=pod)[:1]:
                self.visit(node, "runs on", depth)

    def _groups(self, resource: Resource, depth: int) -> None:
        for link in resource.links_of("security_group"):
            groups = [g for g in self.index.resolve(link.target, near=resource) if g.kind == "security_group"]
            if not groups:
                self.add(Hop(depth, "security group", label=link.target))
            for group in groups[:1]:
                self.visit(group, "security group", depth)

    def _open_rules(self, group: Resource) -> list[str]:
        flags = []
        for rule in world_open_rules(group):
            ports = range(rule.port_from, rule.port_to + 1) if rule.port_to - rule.port_from < 100 else ()
            sensitive = [f"{p} ({SENSITIVE_PORTS[p]})" for p in ports if p in SENSITIVE_PORTS]
            if rule.port_from <= 0 and rule.port_to >= 65535:
                sensitive = ["every port"]
            if sensitive:
                flags.append(f"open to the internet: {rule.render()}" + (f" — {', '.join(sensitive)}" if sensitive else ""))
        return flags


def trace(target: Query, resources: Sequence[Resource], *, port: int | None = None) -> Walk:
    """Walk from ``target`` through ``resources`` (everything the fan-out found that the asker may see)."""
    index = _Index(resources)
    walker = _Walker(index, port)
    key = target.folded
    starts = index.records.get(key) or index.resolve(key)
    if not starts:
        starts = [r for r in resources if r.name.lower() == key]
    if not starts:
        return Walk((Hop(0, "start", label=target.text, problem="not found in the estate you may see"),),
                    problems=(f"{target.text}: not found",))
    for start in starts[:4]:
        walker.visit(start, "start", 0)
    problems = tuple(_problem_line(h) for h in walker.hops if h.problem)
    return Walk(tuple(walker.hops), _reachability(walker.hops, index, port), walker.cut, problems)


def _problem_line(hop: Hop) -> str:
    what = hop.resource.title if hop.resource is not None else hop.label
    return f"{what}: {hop.problem}"


def _reachability(hops: Sequence[Hop], index: _Index, port: int | None) -> str:
    """Whether the port is reachable from 0.0.0.0/0 at the first entry point on the path that has one."""
    entry = next((h.resource for h in hops if h.resource is not None and h.resource.kind in _ENTRY_KINDS), None)
    if entry is None:
        return ""
    ports = [port] if port is not None else sorted({li.port for li in entry.listeners})
    if not ports:
        return ""
    groups = [g for link in entry.links_of("security_group") for g in index.resolve(link.target, near=entry)
              if g.kind == "security_group"]
    public = bool(entry.public_ips) or entry.details.get("scheme") in ("internet", "internet-facing", "public") or (
        entry.kind == "ingress")
    lines = []
    for p in ports[:6]:
        listening = not entry.listeners or any(li.port == p for li in entry.listeners)
        if not public:
            lines.append(f"port {p}: not reachable from 0.0.0.0/0 ({entry.title} has no public address)")
        elif not listening:
            lines.append(f"port {p}: not reachable from 0.0.0.0/0 (no listener on {entry.title})")
        elif groups:
            verdict = reach(groups, p)
            lines.append(f"{'reachable' if verdict.allowed else 'not reachable'} on {entry.title}: "
                         + verdict.describe(p, "0.0.0.0/0"))
        else:
            lines.append(f"port {p}: reachable from 0.0.0.0/0 ({entry.title} is public and has no security group)")
    return "; ".join(lines)
