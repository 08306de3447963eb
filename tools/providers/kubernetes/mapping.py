"""Kubernetes API objects (the JSON the API server lists) mapped into :class:`Resource` and :class:`Change`.

The source asks the client for raw JSON (``_preload_content=False``), so these
functions read the API's own camelCase shapes: what ``kubectl get -o json``
shows. Namespaced objects get the id ``<namespace>/<name>`` and the namespace
as their region; nodes keep their name. Annotations are never copied: they can
hold whole manifests (``last-applied-configuration``), secrets included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from tools.estate.resource import Change, Link, Listener, Resource

__all__ = [
    "PROVIDER",
    "event_change",
    "ingress_resource",
    "iso_utc",
    "node_resource",
    "pod_resource",
    "selector_text",
    "service_resource",
    "workload_resource",
]

PROVIDER = "kubernetes"
"""Provider key of every record mapped here."""

_KIND_OF = {
    "Pod": "pod",
    "Node": "k8s_node",
    "Service": "k8s_service",
    "Ingress": "ingress",
    "Deployment": "workload",
    "StatefulSet": "workload",
    "DaemonSet": "workload",
    "ReplicaSet": "workload",
}
_STARTING = {"ContainerCreating", "PodInitializing"}
"""Waiting reasons of a pod on its way up, not a failure."""
_DETAIL_MOST = 300
"""Longest event message kept (messages can quote whole command lines)."""

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in (_meta(obj).get("labels") or {}).items()}


def _uniq(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(v) for v in values if v and v != "None"))


def iso_utc(value: Any) -> str:
    """``2026-11-30T02:14:09Z`` from the API's RFC 3339 times (``MicroTime`` fractions dropped); "" when absent."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def selector_text(selector: Mapping[str, Any] | None) -> str:
    """``app=orders,tier=web`` from a plain selector or a ``LabelSelector``'s ``matchLabels``/``matchExpressions``."""
    if not selector:
        return ""
    plain = selector.get("matchLabels") if ("matchLabels" in selector or "matchExpressions" in selector) else selector
    parts = [f"{k}={v}" for k, v in sorted((plain or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        values = ",".join(expr.get("values") or [])
        parts.append(f"{expr.get('key')} {str(expr.get('operator', '')).lower()} ({values})".replace(" ()", ""))
    return ",".join(parts)


def _base(obj: Obj, kind: str, account: str) -> dict[str, Any]:
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "")
    name = str(meta.get("name") or "")
    return {
        "kind": kind,
        "provider": PROVIDER,
        "account": account,
        "region": namespace,
        "id": f"{namespace}/{name}" if namespace else name,
        "name": name,
        "tags": _labels(obj),
    }


def node_resource(obj: Obj, account: str) -> Resource:
    """A Node: its addresses, Ready condition (``ready``/``notready``), kubelet version, labels as tags."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    addresses = status.get("addresses") or []

    def of(*types: str) -> tuple[str, ...]:
        return _uniq(a.get("address") for a in addresses if a.get("type") in types)

    ready: Mapping[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    info = status.get("nodeInfo") or {}
    labels = _labels(obj)
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    details = {
        "kubelet": info.get("kubeletVersion") or "",
        "os": info.get("osImage") or "",
        "runtime": info.get("containerRuntimeVersion") or "",
        "unschedulable": "yes" if spec.get("unschedulable") else "no",
        "roles": ",".join(roles),
        "zone": labels.get("topology.kubernetes.io/zone", ""),
        "instance_type": labels.get("node.kubernetes.io/instance-type", ""),
        "provider_id": spec.get("providerID") or "",
        "hostname": ",".join(of("Hostname")),
    }
    if ready.get("status") != "True":
        details["condition"] = f"Ready={ready.get('status', 'Unknown')}: {ready.get('reason') or ''}".rstrip(": ")
    return Resource(
        **_base(obj, "k8s_node", account),
        state="ready" if ready.get("status") == "True" else "notready",
        private_ips=of("InternalIP"),
        public_ips=of("ExternalIP"),
        dns_names=of("InternalDNS", "ExternalDNS"),
        details={k: v for k, v in details.items() if v},
    )


def _pod_state(status: Mapping[str, Any], deleting: bool) -> tuple[str, str]:
    """(state, waiting reason): ``running``, ``notready``, a failing waiting reason in lower case, or the phase."""
    phase = str(status.get("phase") or "Unknown")
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    reasons = [str(((s.get("state") or {}).get("waiting") or {}).get("reason") or "") for s in statuses]
    reasons += [
        str(((s.get("state") or {}).get("terminated") or {}).get("reason") or "")
        for s in statuses
        if not s.get("ready")
    ]
    failing = next((r for r in reasons if r and r not in _STARTING and r != "Completed"), "")
    if deleting:
        return "terminating", failing
    if failing:
        return failing.lower(), failing
    if phase == "Running":
        ready = all(s.get("ready") for s in status.get("containerStatuses") or [])
        return ("running" if ready else "notready"), ""
    return phase.lower(), ""


def _workload_of(meta: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str, str]:
    """The controlling workload (kind, name): a ReplicaSet with a pod-template hash stands for its Deployment."""
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if not ref:
        return "", ""
    kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
    suffix = "-" + labels.get("pod-template-hash", "\0")
    if kind == "ReplicaSet" and name.endswith(suffix):
        return "Deployment", name[: -len(suffix)]
    return kind, name


def pod_resource(obj: Obj, account: str) -> Resource:
    """A Pod: its IPs, state (``running``, ``notready``, ``crashloopbackoff``...), node and workload as links."""
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    base = _base(obj, "pod", account)
    state, reason = _pod_state(status, bool(meta.get("deletionTimestamp")))
    containers = list(status.get("containerStatuses") or [])
    ready = sum(1 for c in containers if c.get("ready"))
    total = len(containers) or len(spec.get("containers") or [])
    links: list[Link] = []
    node = str(spec.get("nodeName") or "")
    if node:
        links.append(Link(rel="runs_on", target=node, kind="k8s_node"))
    owner_kind, owner_name = _workload_of(meta, base["tags"])
    if owner_name:
        links.append(
            Link(
                rel="member_of",
                target=f"{base['region']}/{owner_name}",
                kind="workload" if owner_kind in _KIND_OF else owner_kind.lower(),
                note=owner_kind,
            )
        )
    details = {
        "phase": str(status.get("phase") or ""),
        "ready": f"{ready}/{total}",
        "restarts": str(sum(int(c.get("restartCount") or 0) for c in containers)),
        "reason": reason or str(status.get("reason") or ""),
        "node": node,
        "host_ip": str(status.get("hostIP") or ""),
        "images": ",".join(_uniq(c.get("image") for c in spec.get("containers") or [])),
        "started": iso_utc(status.get("startTime")),
    }
    return Resource(
        **base,
        state=state,
        private_ips=_uniq([status.get("podIP")] + [p.get("ip") for p in status.get("podIPs") or []]),
        owner=f"{owner_kind}/{owner_name}" if owner_name else "",
        links=tuple(links),
        details={k: v for k, v in details.items() if v},
    )


def workload_resource(obj: Obj, account: str, kind_name: str) -> Resource:
    """A Deployment, StatefulSet or DaemonSet: ready/desired replicas, ``available`` or ``degraded``, its selector."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind_name == "DaemonSet":
        desired, ready = int(status.get("desiredNumberScheduled") or 0), int(status.get("numberReady") or 0)
    else:
        replicas = spec.get("replicas")
        desired = 1 if replicas is None else int(replicas)
        ready = int(status.get("readyReplicas") or 0)
    template = (spec.get("template") or {}).get("spec") or {}
    details = {
        "type": kind_name,
        "replicas": f"{ready}/{desired}",
        "ready": str(ready),
        "desired": str(desired),
        "selector": selector_text(spec.get("selector")),
        "images": ",".join(_uniq(c.get("image") for c in template.get("containers") or [])),
        "created": iso_utc(_meta(obj).get("creationTimestamp")),
    }
    return Resource(
        **_base(obj, "workload", account),
        state="available" if ready >= desired else "degraded",
        details={k: v for k, v in details.items() if v},
    )


def _ports(spec: Mapping[str, Any]) -> tuple[Listener, ...]:
    out = []
    for port in spec.get("ports") or []:
        parts = [str(port.get("name") or ""), f"target {port.get('targetPort', port.get('port'))}"]
        if port.get("nodePort"):
            parts.append(f"node port {port['nodePort']}")
        out.append(
            Listener(
                protocol=str(port.get("protocol") or "TCP").lower(),
                port=int(port.get("port") or 0),
                name=" ".join(p for p in parts if p),
            )
        )
    return tuple(out)


def _lb_ingress(status: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    entries = (status.get("loadBalancer") or {}).get("ingress") or []
    return _uniq(e.get("ip") for e in entries), _uniq(e.get("hostname") for e in entries)


def service_resource(obj: Obj, account: str) -> Resource:
    """A Service: cluster IPs, a LoadBalancer's ingress IP or hostname, ports as listeners, its selector."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    kind = str(spec.get("type") or "ClusterIP")
    lb_ips, lb_names = _lb_ingress(status)
    state = "pending" if kind == "LoadBalancer" and not (lb_ips or lb_names) else "active"
    details = {
        "type": kind,
        "selector": selector_text(spec.get("selector")),
        "external_name": str(spec.get("externalName") or ""),
        "created": iso_utc(_meta(obj).get("creationTimestamp")),
    }
    external = [spec.get("externalName")] if kind == "ExternalName" else []
    return Resource(
        **_base(obj, "k8s_service", account),
        state=state,
        private_ips=_uniq([spec.get("clusterIP"), *(spec.get("clusterIPs") or [])]),
        public_ips=_uniq([*lb_ips, *(spec.get("externalIPs") or [])]),
        dns_names=_uniq([*lb_names, *external]),
        listeners=_ports(spec),
        details={k: v for k, v in details.items() if v},
    )


def _route(namespace: str, backend: Mapping[str, Any], note: str) -> Link | None:
    service = backend.get("service") or {}
    if not service.get("name"):
        return None
    port = service.get("port") or {}
    number = int(port.get("number") or 0)
    named = f" (port {port['name']})" if port.get("name") else ""
    return Link(
        rel="routes_to",
        target=f"{namespace}/{service['name']}",
        kind="k8s_service",
        port=number or None,
        note=note + named,
    )


def ingress_resource(obj: Obj, account: str) -> Resource:
    """An Ingress: rule hosts and the load balancer's address, and a ``routes_to`` link per service backend."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    base = _base(obj, "ingress", account)
    lb_ips, lb_names = _lb_ingress(status)
    hosts = [r.get("host") for r in spec.get("rules") or []]
    tls_hosts = [h for t in spec.get("tls") or [] for h in t.get("hosts") or []]
    links = []
    default = spec.get("defaultBackend")
    if default:
        links.append(_route(base["region"], default, "default backend"))
    for rule in spec.get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            links.append(
                _route(base["region"], path.get("backend") or {}, f"{rule.get('host') or '*'}{path.get('path') or '/'}")
            )
    details = {
        "class": str(spec.get("ingressClassName") or ""),
        "tls": ",".join(_uniq(tls_hosts)) or "no",
        "created": iso_utc(_meta(obj).get("creationTimestamp")),
    }
    return Resource(
        **base,
        state="active" if (lb_ips or lb_names) else "pending",
        public_ips=lb_ips,
        dns_names=_uniq([h.lower() for h in hosts + tls_hosts if h] + list(lb_names)),
        links=tuple(link for link in links if link is not None),
        details={k: v for k, v in details.items() if v},
    )


def event_change(obj: Obj, account: str) -> Change:
    """A core/v1 Event: reason as the action, the reporting component as the principal, Warning reasons as outcome."""
    involved = obj.get("involvedObject") or {}
    namespace = str(involved.get("namespace") or _meta(obj).get("namespace") or "")
    name = str(involved.get("name") or "")
    source = obj.get("source") or {}
    when = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or _meta(obj).get("creationTimestamp")
    )
    reason = str(obj.get("reason") or "")
    message = " ".join(str(obj.get("message") or "").split())
    count = int(obj.get("count") or (obj.get("series") or {}).get("count") or 1)
    if count > 1:
        message = f"{message} (x{count})"
    return Change(
        time=iso_utc(when),
        provider=PROVIDER,
        account=account,
        region=namespace,
        action=reason,
        principal=str(source.get("component") or obj.get("reportingComponent") or obj.get("reportingController") or ""),
        resource_id=f"{namespace}/{name}" if namespace else name,
        resource_name=name,
        resource_kind=_KIND_OF.get(str(involved.get("kind") or ""), str(involved.get("kind") or "").lower()),
        outcome="success" if obj.get("type", "Normal") == "Normal" else (reason or "Warning"),
        detail=message[:_DETAIL_MOST],
    )
