"""A fake Kubernetes API server on 127.0.0.1 for the official ``kubernetes`` client, and a kubeconfig pointing at it.

It serves the read-only list endpoints the estate source calls, core
(``/api/v1/...``), ``apps/v1`` and ``networking.k8s.io/v1``, cluster-wide and
per namespace, and checks what a real API server checks: the bearer token
(401 ``Status`` otherwise), RBAC per namespace (403 ``Status`` whose message
names the verb, resource and namespace, as the real authorizer words it),
field selectors (only the fields the real server supports; others answer 400),
``limit``/``continue`` paging with opaque tokens, and the List shape (``kind``,
``apiVersion``, ``metadata.resourceVersion``, ``metadata.continue``, ``items``).
Options make it throttle (429 with ``Retry-After``), answer slowly, or refuse
cluster-scope lists. Every request is recorded.

:func:`shop_cluster` is a small coherent cluster (three nodes, one NotReady; the
``shop`` namespace's ``orders`` deployment with a crash-looping pod, its
LoadBalancer service and the ``api.example.com`` ingress; events).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

from tests.fakes.loopback import LoopbackFake

__all__ = ["CRASHING_POD", "FakeKubeApi", "node", "pod", "shop_cluster", "staging_cluster", "write_kubeconfig"]

Objects = Mapping[str, Iterable[Mapping[str, Any]]]
"""Objects by resource (``pods``, ``deployments``, ...); namespaced ones carry ``metadata.namespace``."""

_GROUPS = {
    "": ("v1", {"nodes", "pods", "services", "events", "namespaces"}),
    "apps": ("apps/v1", {"deployments", "statefulsets", "daemonsets"}),
    "networking.k8s.io": ("networking.k8s.io/v1", {"ingresses"}),
}
_CLUSTER_SCOPED = {"nodes", "namespaces"}
_LIST_KINDS = {
    "nodes": "NodeList",
    "pods": "PodList",
    "services": "ServiceList",
    "events": "EventList",
    "namespaces": "NamespaceList",
    "deployments": "DeploymentList",
    "statefulsets": "StatefulSetList",
    "daemonsets": "DaemonSetList",
    "ingresses": "IngressList",
}
_FIELDS = {
    "events": {
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.kind",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
        "metadata.name",
        "metadata.namespace",
    },
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"},
}
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z0-9.]+)/(?P<version>v1))"
    r"(?:/namespaces/(?P<ns>[a-z0-9-]+))?/(?P<resource>[a-z]+)/?$"
)


def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class FakeKubeApi(LoopbackFake):
    """One cluster's API server: objects, a bearer token, and the failures a test asks for."""

    def __init__(
        self,
        objects: Objects,
        *,
        token: str = "prod-token-SECRET-do-not-print",
        forbidden_namespaces: Iterable[str] = (),
        cluster_forbidden: bool = False,
        throttle_first: int = 0,
        retry_after_s: int = 1,
        delay_s: float = 0.0,
        git_version: str = "v1.30.2",
    ) -> None:
        self.objects = {resource: [copy.deepcopy(dict(o)) for o in items] for resource, items in objects.items()}
        self.token = token
        self.forbidden_namespaces = set(forbidden_namespaces)
        self.cluster_forbidden = cluster_forbidden
        """Refuse lists at the cluster scope (a user bound to namespaces by RoleBindings only)."""
        self.throttle_first = throttle_first
        """Answer this many authenticated requests with 429 before serving."""
        self.retry_after_s = retry_after_s
        self.delay_s = delay_s
        self.git_version = git_version
        self.requests: list[dict[str, Any]] = []
        """Every request: method, path, namespace, resource, query (decoded), authorized."""
        self._lock = threading.Lock()
    def calls(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Recorded requests, optionally of one resource (``pods``)."""
        with self._lock:
            return [dict(r) for r in self.requests if resource is None or r["resource"] == resource]

    # -- serving ---------------------------------------------------------------------------------

    def _send(
        self, handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: Mapping[str, str] = {}
    ) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        match = _PATH.match(url.path)
        resource = match["resource"] if match else url.path
        namespace = (match["ns"] or "") if match else ""
        authorized = handler.headers.get("Authorization", "") == f"Bearer {self.token}"
        with self._lock:
            self.requests.append(
                {
                    "method": "GET",
                    "path": url.path,
                    "namespace": namespace,
                    "resource": resource,
                    "query": query,
                    "authorized": authorized,
                }
            )
            throttled = authorized and self.throttle_first > 0
            if throttled:
                self.throttle_first -= 1
        if self.delay_s:
            time.sleep(self.delay_s)  # the API's latency, not synchronization
        if not authorized:
            return self._send(handler, 401, _status(401, "Unauthorized", "Unauthorized"))
        if throttled:
            body = _status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                retryAfterSeconds=self.retry_after_s,
            )
            return self._send(handler, 429, body, {"Retry-After": str(self.retry_after_s)})
        if url.path in ("/version", "/version/"):
            return self._send(handler, 200, self._version())
        if match is None:
            return self._send(
                handler, 404, _status(404, "NotFound", "the server could not find the requested resource")
            )
        self._list(handler, match, query)

    def _version(self) -> dict[str, str]:
        major, minor = self.git_version.lstrip("v").split(".")[:2]
        return {"major": major, "minor": minor, "gitVersion": self.git_version, "platform": "linux/amd64"}

    def _list(self, handler: BaseHTTPRequestHandler, match: re.Match[str], query: Mapping[str, str]) -> None:
        group = match["group"] or ""
        resource, namespace = match["resource"], match["ns"] or ""
        api_version, served = _GROUPS.get(group, ("", set()))
        if resource not in served or (namespace and resource in _CLUSTER_SCOPED):
            return self._send(
                handler, 404, _status(404, "NotFound", "the server could not find the requested resource")
            )
        denied = (namespace in self.forbidden_namespaces) if namespace else self.cluster_forbidden
        if denied:
            return self._send(handler, 403, self._forbidden(resource, group, namespace))
        try:
            items = self._select(resource, namespace, query)
        except ValueError as exc:
            return self._send(handler, 400, _status(400, "BadRequest", str(exc)))
        offset = self._offset(query.get("continue", ""))
        if offset is None:
            return self._send(handler, 410, _status(410, "Expired", "The provided continue parameter is too old"))
        limit = int(query.get("limit") or 0)
        page = items[offset : offset + limit] if limit > 0 else items[offset:]
        rest = len(items) - offset - len(page)
        metadata: dict[str, Any] = {"resourceVersion": "48213"}
        if rest > 0:
            metadata["continue"] = self._token(offset + len(page))
            metadata["remainingItemCount"] = rest
        payload = {"kind": _LIST_KINDS[resource], "apiVersion": api_version, "metadata": metadata, "items": page}
        self._send(handler, 200, payload)

    @staticmethod
    def _forbidden(resource: str, group: str, namespace: str) -> dict[str, Any]:
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        message = (
            f'{resource}{"." + group if group else ""} is forbidden: User "system:serviceaccount:ops:botgateway" '
            f'cannot list resource "{resource}" in API group "{group}" {scope}'
        )
        return _status(403, "Forbidden", message, group=group, kind=resource)

    def _select(self, resource: str, namespace: str, query: Mapping[str, str]) -> list[dict[str, Any]]:
        items = [
            o for o in self.objects.get(resource, ()) if not namespace or o["metadata"].get("namespace") == namespace
        ]
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            field, _, value = term.replace("==", "=").partition("=")
            if field not in _FIELDS.get(resource, {"metadata.name", "metadata.namespace"}):
                raise ValueError(f"field label not supported: {field}")
            items = [o for o in items if _field(o, field) == value]
        for term in filter(None, query.get("labelSelector", "").split(",")):
            key, _, value = term.replace("==", "=").partition("=")
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    @staticmethod
    def _token(offset: int) -> str:
        return base64.urlsafe_b64encode(json.dumps({"v": "meta.k8s.io/v1", "start": offset}).encode()).decode()

    @staticmethod
    def _offset(token: str) -> int | None:
        if not token:
            return 0
        try:
            return int(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
        except Exception:
            return None


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def write_kubeconfig(path: Path, fakes: Mapping[str, FakeKubeApi], *, current: str = "") -> Path:
    """A kubeconfig with one context (cluster and token user) per fake, named by the mapping's keys."""
    names = list(fakes)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current or names[0],
        "clusters": [{"name": f"{n}-cluster", "cluster": {"server": f.endpoint}} for n, f in fakes.items()],
        "users": [{"name": f"{n}-user", "user": {"token": f.token}} for n, f in fakes.items()],
        "contexts": [{"name": n, "context": {"cluster": f"{n}-cluster", "user": f"{n}-user"}} for n in names],
    }
    path.write_text(yaml.safe_dump(document))
    return path


# --- the sample cluster ------------------------------------------------------------------------------


def _meta(name: str, namespace: str = "", labels: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{namespace}-{name}",
        "resourceVersion": "4711",
        "creationTimestamp": "2026-11-01T08:00:00Z",
    }
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    meta.update(extra)
    return meta


def node(
    name: str,
    internal_ip: str,
    *,
    ready: bool = True,
    external_ip: str = "",
    unschedulable: bool = False,
    kubelet: str = "v1.30.2",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as ``/api/v1/nodes`` lists it."""
    addresses = [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}]
    if external_ip:
        addresses.append({"type": "ExternalIP", "address": external_ip})
    return {
        "metadata": _meta(name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
        "spec": {
            "podCIDR": "10.244.0.0/24",
            "providerID": f"aws:///us-east-1a/i-0{name.encode().hex()[:16]}",
            **({"unschedulable": True} if unschedulable else {}),
        },
        "status": {
            "addresses": addresses,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                    "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
                    "lastTransitionTime": "2026-11-30T01:58:00Z",
                },
            ],
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "kubeProxyVersion": kubelet,
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.13",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kernelVersion": "6.5.0",
                "machineID": "m",
                "systemUUID": "s",
                "bootID": "b",
            },
        },
    }


def pod(
    name: str,
    namespace: str,
    ip: str,
    node_name: str,
    *,
    owner: tuple[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    restarts: int = 0,
    waiting: str = "",
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod with one container; ``waiting`` is a waiting reason such as ``CrashLoopBackOff``."""
    extra: dict[str, Any] = {}
    if owner:
        extra["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[1]}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    container = name.split("-")[0]
    state: dict[str, Any] = {"running": {"startedAt": "2026-11-30T01:00:00Z"}}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "back-off 5m0s restarting failed container"}}
    return {
        "metadata": _meta(name, namespace, labels, **extra),
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": container, "image": f"registry.example.com/{container}:1.4.2"}],
        },
        "status": {
            "phase": phase,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "10.0.1.21",
            "qosClass": "Burstable",
            "startTime": "2026-11-30T01:00:00Z",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": container,
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                    "image": f"registry.example.com/{container}:1.4.2",
                    "imageID": "",
                    "started": ready,
                }
            ],
        },
    }


def _workload(
    kind: str, name: str, namespace: str, desired: int, ready: int, selector: Mapping[str, str]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": dict(selector)},
        "template": {
            "metadata": {"labels": dict(selector)},
            "spec": {"containers": [{"name": name, "image": f"registry.example.com/{name}:1.4.2"}]},
        },
    }
    if kind == "DaemonSet":
        status: dict[str, Any] = {
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "currentNumberScheduled": desired,
            "numberMisscheduled": 0,
        }
    else:
        spec["replicas"] = desired
        status = {"replicas": desired, "readyReplicas": ready, "availableReplicas": ready}
        if kind == "StatefulSet":
            spec["serviceName"] = name
    return {"metadata": _meta(name, namespace, selector), "spec": spec, "status": status}


def _service(
    name: str,
    namespace: str,
    cluster_ip: str,
    ports: list[dict[str, Any]],
    *,
    selector: Mapping[str, str],
    lb: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "LoadBalancer" if lb else "ClusterIP",
        "clusterIP": cluster_ip,
        "clusterIPs": [cluster_ip],
        "ports": ports,
        "selector": dict(selector),
    }
    status: dict[str, Any] = {"loadBalancer": {"ingress": [dict(lb)]} if lb else {}}
    return {"metadata": _meta(name, namespace, selector), "spec": spec, "status": status}


def _event(
    name: str,
    namespace: str,
    reason: str,
    message: str,
    obj: tuple[str, str],
    *,
    type_: str = "Normal",
    component: str = "",
    last: str = "",
    event_time: str = "",
    count: int = 1,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "metadata": _meta(name, namespace),
        "involvedObject": {
            "kind": obj[0],
            "namespace": namespace,
            "name": obj[1],
            "uid": f"uid-{obj[1]}",
            "apiVersion": "v1" if obj[0] == "Pod" else "apps/v1",
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "count": count,
        "source": {"component": component, "host": "node-a"} if component else {},
        "firstTimestamp": last or None,
        "lastTimestamp": last or None,
    }
    if event_time:
        event.update(
            eventTime=event_time, reportingComponent="deployment-controller", reportingInstance="", action="Scale"
        )
    return event


CRASHING_POD = "orders-7d9f8c6b5-x2k4p"
"""The ``shop`` pod in CrashLoopBackOff (IP 10.244.1.17, on node-a)."""


def _shop_pods() -> list[dict[str, Any]]:
    app = {"app": "orders", "pod-template-hash": "7d9f8c6b5"}
    rs = ("ReplicaSet", "orders-7d9f8c6b5")
    return [
        pod(
            CRASHING_POD,
            "shop",
            "10.244.1.17",
            "node-a",
            owner=rs,
            labels=app,
            ready=False,
            restarts=14,
            waiting="CrashLoopBackOff",
        ),
        pod("orders-7d9f8c6b5-m8q2z", "shop", "10.244.2.9", "node-b", owner=rs, labels=app),
        pod("orders-7d9f8c6b5-p5r7t", "shop", "10.244.1.18", "node-a", owner=rs, labels=app),
        pod("redis-0", "shop", "10.244.2.10", "node-b", owner=("StatefulSet", "redis"), labels={"app": "redis"}),
        pod(
            "ledger-5c4b9d7f6-q9w8e",
            "payments",
            "10.244.1.30",
            "node-a",
            owner=("ReplicaSet", "ledger-5c4b9d7f6"),
            labels={"app": "ledger", "pod-template-hash": "5c4b9d7f6"},
        ),
    ]


def _shop_services() -> list[dict[str, Any]]:
    return [
        _service(
            "orders",
            "shop",
            "10.96.12.34",
            [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080}],
            selector={"app": "orders"},
            lb={"ip": "203.0.113.50"},
        ),
        _service(
            "redis",
            "shop",
            "10.96.40.2",
            [{"protocol": "TCP", "port": 6379, "targetPort": 6379}],
            selector={"app": "redis"},
        ),
        _service(
            "ledger",
            "payments",
            "10.96.50.7",
            [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https", "nodePort": 31443}],
            selector={"app": "ledger"},
            lb={"hostname": "a1b2c3d4.elb.us-east-1.amazonaws.com"},
        ),
    ]


def _shop_ingresses() -> list[dict[str, Any]]:
    return [
        {
            "metadata": _meta("api", "shop", {"app": "orders"}),
            "spec": {
                "ingressClassName": "nginx",
                "tls": [{"hosts": ["api.example.com"], "secretName": "api-tls"}],
                "rules": [
                    {
                        "host": "api.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "orders", "port": {"number": 80}}},
                                },
                            ]
                        },
                    }
                ],
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.80"}]}},
        }
    ]


def _shop_events() -> list[dict[str, Any]]:
    return [
        _event(
            f"{CRASHING_POD}.backoff",
            "shop",
            "BackOff",
            f"Back-off restarting failed container orders in pod {CRASHING_POD}",
            ("Pod", CRASHING_POD),
            type_="Warning",
            component="kubelet",
            last="2026-11-30T02:14:09Z",
            count=42,
        ),
        _event(
            f"{CRASHING_POD}.killing",
            "shop",
            "Killing",
            "Container orders failed liveness probe, will be restarted",
            ("Pod", CRASHING_POD),
            component="kubelet",
            last="2026-11-30T02:10:00Z",
            count=14,
        ),
        _event(
            "orders.scaled",
            "shop",
            "ScalingReplicaSet",
            "Scaled up replica set orders-7d9f8c6b5 to 3",
            ("Deployment", "orders"),
            event_time="2026-11-30T01:00:00.000000Z",
        ),
        _event(
            "ledger.pulled",
            "payments",
            "Pulled",
            "Container image already present on machine",
            ("Pod", "ledger-5c4b9d7f6-q9w8e"),
            component="kubelet",
            last="2026-11-30T01:30:00Z",
        ),
    ]


def shop_cluster() -> dict[str, list[dict[str, Any]]]:
    """The prod cluster: nodes, namespaces ``shop`` and ``payments`` with workloads, services, an ingress, events."""
    return {
        "namespaces": [
            {"metadata": _meta(n), "status": {"phase": "Active"}} for n in ("kube-system", "payments", "shop")
        ],
        "nodes": [
            node(
                "node-a",
                "10.0.1.21",
                external_ip="203.0.113.21",
                labels={"topology.kubernetes.io/zone": "us-east-1a", "node-role.kubernetes.io/worker": ""},
            ),
            node("node-b", "10.0.1.22"),
            node("node-c", "10.0.1.23", ready=False, unschedulable=True, kubelet="v1.29.6"),
        ],
        "pods": _shop_pods(),
        "deployments": [
            _workload("Deployment", "orders", "shop", 3, 2, {"app": "orders"}),
            _workload("Deployment", "ledger", "payments", 1, 1, {"app": "ledger"}),
        ],
        "statefulsets": [_workload("StatefulSet", "redis", "shop", 1, 1, {"app": "redis"})],
        "daemonsets": [_workload("DaemonSet", "node-exporter", "kube-system", 3, 2, {"app": "node-exporter"})],
        "services": _shop_services(),
        "ingresses": _shop_ingresses(),
        "events": _shop_events(),
    }


def staging_cluster() -> dict[str, list[dict[str, Any]]]:
    """The staging cluster: one node and one pod in ``shop``."""
    return {
        "namespaces": [{"metadata": _meta("shop"), "status": {"phase": "Active"}}],
        "nodes": [node("stg-node-1", "10.1.1.5")],
        "pods": [pod("orders-6f5d4c3b2-aaaaa", "shop", "10.245.0.4", "stg-node-1", labels={"app": "orders"})],
    }
