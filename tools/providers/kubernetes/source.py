"""The Kubernetes estate source: nodes, pods, workloads, services, ingresses and events of kube contexts, read-only.

Each configured context gets its own ``ApiClient`` from
``kubernetes.config.new_client_from_config`` (never the client's global default
configuration, so two clusters never share credentials). Like the cloud
sources (:mod:`tools.estate.sdk_source`), the blocking client runs on the
source's own thread pool under the configured timeout; every API call first
draws from the context's call budget (``api_qps``), a 429 is retried with
backoff while the deadline allows, and lists are paged with ``limit`` and
``continue`` up to a bound, the listing saying when it was cut.

The client's exceptions carry the response's headers and body, so no message
here is built from ``str(exc)``: each failure is classified from its status and
the API's ``Status`` message, and the kubeconfig's tokens can never leak.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib
import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import structlog

from botgateway.budget import RateBudget, RateLimit
from botgateway.config import KubeContextConfig, KubernetesConfig
from tools.estate.budgeted import call_within_budget
from tools.estate.resource import Change, Resource
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, Listing, Prerequisite, SourceError, Target
from tools.providers.kubernetes import mapping

__all__ = ["KIND_APIS", "SDK_MODULES", "KubernetesEstate", "classify", "kubeconfig_path", "new_client"]

log = structlog.get_logger(__name__)

V = TypeVar("V")

SDK_MODULES = ("kubernetes",)
"""What the source imports (the ``kubernetes`` extra)."""

FIX_SDK = "pip install 'botgateway[kubernetes]'"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
"""An object name a field selector may carry (Kubernetes names are DNS subdomains; anything else matches nothing)."""
_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)"(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]+)")?'
)


@dataclass(frozen=True)
class KubeApi:
    """One list endpoint: where it lives in the client, and how its objects map."""

    name: str
    """Provenance name (``core/v1:pods``)."""
    group: str
    """The client's API class (``CoreV1Api``)."""
    all_namespaces: str
    """The method listing every namespace (or a cluster-scoped resource)."""
    namespaced: str
    """The method listing one namespace; empty for cluster-scoped resources."""
    resource: str
    """The resource's plural, as RBAC names it (``pods``, ``deployments.apps``)."""
    mapper: Callable[[Mapping[str, Any], str], Resource] | None = None
    """Maps one object (raw JSON) and the context's name into a resource."""


def _api(name: str, group: str, singular: str, resource: str, mapper: Any = None) -> KubeApi:
    return KubeApi(name, group, f"list_{singular}_for_all_namespaces", f"list_namespaced_{singular}", resource, mapper)


KIND_APIS: Mapping[str, tuple[KubeApi, ...]] = {
    "k8s_node": (KubeApi("core/v1:nodes", "CoreV1Api", "list_node", "", "nodes", mapping.node_resource),),
    "pod": (_api("core/v1:pods", "CoreV1Api", "pod", "pods", mapping.pod_resource),),
    "workload": (
        _api(
            "apps/v1:deployments",
            "AppsV1Api",
            "deployment",
            "deployments.apps",
            partial(mapping.workload_resource, kind_name="Deployment"),
        ),
        _api(
            "apps/v1:statefulsets",
            "AppsV1Api",
            "stateful_set",
            "statefulsets.apps",
            partial(mapping.workload_resource, kind_name="StatefulSet"),
        ),
        _api(
            "apps/v1:daemonsets",
            "AppsV1Api",
            "daemon_set",
            "daemonsets.apps",
            partial(mapping.workload_resource, kind_name="DaemonSet"),
        ),
    ),
    "k8s_service": (_api("core/v1:services", "CoreV1Api", "service", "services", mapping.service_resource),),
    "ingress": (
        _api(
            "networking.k8s.io/v1:ingresses",
            "NetworkingV1Api",
            "ingress",
            "ingresses.networking.k8s.io",
            mapping.ingress_resource,
        ),
    ),
}
"""The list endpoints of each kind, in the order they are read."""

EVENTS = _api("core/v1:events", "CoreV1Api", "event", "events")
"""Where :meth:`KubernetesEstate.changes` reads."""


def kubeconfig_path(config: KubernetesConfig) -> str:
    """The kubeconfig the source reads: the config's path, else ``$KUBECONFIG`` (may list several), else the default."""
    raw = config.kubeconfig or os.environ.get("KUBECONFIG", "") or "~/.kube/config"
    return os.pathsep.join(str(Path(p).expanduser()) for p in raw.split(os.pathsep) if p)


def _installed() -> bool:
    try:
        return importlib.util.find_spec("kubernetes") is not None
    except (ModuleNotFoundError, ValueError):
        return False


class KubernetesEstate:
    """Every configured kube context × namespace, read through the official client."""

    name: ClassVar[str] = "kubernetes"
    """Provider key."""
    label: ClassVar[str] = "Kubernetes"
    """Human name."""

    def __init__(
        self,
        config: KubernetesConfig,
        *,
        budget: RateBudget | None = None,
        max_per_listing: int = MAX_PER_LISTING,
        page_size: int = 500,
    ) -> None:
        self.config = config
        self.timeout_s = config.timeout_s
        self.budget = budget if budget is not None else RateBudget()
        self.max_per_listing = max_per_listing
        self.page_size = page_size
        self.limit = RateLimit(rate_per_s=config.api_qps, burst=max(1, int(config.api_qps)))
        self._contexts = {c.name: c for c in config.contexts}
        pairs = sum(max(1, len(c.namespaces)) for c in config.contexts)
        self._executor = ThreadPoolExecutor(
            max_workers=min(32, 2 * pairs + 2), thread_name_prefix="bg-estate-kubernetes"
        )
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._closed = False

    # -- what the fan-out asks ---------------------------------------------------------

    def kinds(self) -> frozenset[str]:
        """Every Kubernetes kind, once the client is installed."""
        return frozenset(KIND_APIS) if _installed() else frozenset()

    def targets(self, kind: str = "") -> builtins.list[Target]:
        """One target per context × namespace (namespace "" for all); nodes are cluster-scoped: one per context."""
        out: builtins.list[Target] = []
        for ctx in self.config.contexts:
            namespaces = [""] if kind == "k8s_node" else (ctx.namespaces or [""])
            out.extend(Target(self.name, ctx.name, namespace) for namespace in namespaces)
        return out

    def api_of(self, kind: str) -> str:
        """``core/v1:pods``; the three of a workload listing joined by ``+``."""
        return "+".join(api.name for api in KIND_APIS.get(kind, ())) or kind

    async def list(self, target: Target, kind: str) -> Listing:
        """Every object of ``kind`` at ``target`` (each configured namespace when the target names none)."""
        apis = KIND_APIS.get(kind)
        if apis is None:
            raise SourceError("not_found", f"Kubernetes has no {kind} listing")
        ctx = self._context(target)
        namespaces = [""] if kind == "k8s_node" else self._namespaces(ctx, target)
        deadline = time.monotonic() + self.timeout_s
        resources: builtins.list[Resource] = []
        cut = False
        for api in apis:
            for namespace in namespaces:
                room = self.max_per_listing - len(resources)
                if room <= 0:
                    return Listing(tuple(resources), True, self.api_of(kind))
                items, more = await self._paginate(target, api, namespace, deadline, bound=room)
                assert api.mapper is not None
                resources.extend(api.mapper(item, ctx.name) for item in items)
                cut = cut or more
        return Listing(tuple(resources), cut, self.api_of(kind))

    async def changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """Recent events of the target's namespaces (of one object when the query names one), newest first."""
        ctx = self._context(target)
        asked = query.resource_id or query.resource_name
        namespace, _, name = asked.rpartition("/") if "/" in asked else ("", "", asked)
        if name and not _NAME.match(name):
            return []  # no Kubernetes object has such a name
        namespaces = self._namespaces(ctx, target)
        if namespace:
            if namespaces != [""] and namespace not in namespaces:
                return []
            namespaces = [namespace]
        selector = {"field_selector": f"involvedObject.name={name}"} if name else {}
        deadline = time.monotonic() + self.timeout_s
        found: builtins.list[Change] = []
        for ns in namespaces:
            items, _ = await self._paginate(target, EVENTS, ns, deadline, bound=self.max_per_listing, extra=selector)
            found.extend(mapping.event_change(item, ctx.name) for item in items)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(query.since)) if query.since else ""
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(query.until)) if query.until else ""
        kept = [c for c in found if c.time >= since and (not until or c.time < until)]
        kept.sort(key=lambda c: c.time, reverse=True)
        return kept[: max(0, query.limit)]

    def prerequisites(self) -> builtins.list[Prerequisite]:
        """The client installed, the kubeconfig found, and each configured context in it; nothing remote is called."""
        installed = _installed()
        out = [Prerequisite("Kubernetes Python client", installed, "" if installed else FIX_SDK)]
        path = kubeconfig_path(self.config)
        found = any(Path(p).is_file() for p in path.split(os.pathsep))
        fix = f"create {path}, or set kubernetes.kubeconfig (or KUBECONFIG) to the kubeconfig's path"
        out.append(Prerequisite(f"kubeconfig {path}", found, "" if found else fix))
        if not (installed and found and self.config.contexts):
            return out
        try:
            from kubernetes import config as kube_config

            contexts, _ = kube_config.list_kube_config_contexts(config_file=path)
            known = [str(c.get("name")) for c in contexts or []]
        except Exception as exc:  # a broken file: say so without echoing its content
            broken = f"the kubeconfig could not be read ({type(exc).__name__}); fix its YAML"
            return [*out, Prerequisite(f"contexts of {path}", False, broken)]
        for ctx in self.config.contexts:
            wanted = ctx.context or ctx.name
            ok = wanted in known
            fix = (
                f"context {wanted!r} is not in {path}; it has: {', '.join(known) or 'none'}"
                " (set kubernetes.contexts[].context)"
            )
            out.append(Prerequisite(f"Kubernetes context {ctx.name}", ok, "" if ok else fix))
        return out

    async def probe(self, target: Target) -> None:
        """Ask the version endpoint (reachability and credentials), then list one pod of a named namespace (RBAC)."""
        self._context(target)
        deadline = time.monotonic() + self.timeout_s
        await self._call(target, "version", _version, deadline=deadline)
        if target.region:
            pods = KIND_APIS["pod"][0]
            await self._call(
                target, pods.name, partial(_page, pods, target.region, "", 1, {}), api=pods, deadline=deadline
            )

    async def start(self) -> None:
        """Import the client on the pool now, outside any request's timeout."""
        if not _installed():
            return
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self._executor, _import_client), 60)
        except Exception as exc:  # a client that fails to import is reported by each call again
            log.warning("estate_source_start_failed", provider=self.name, error=type(exc).__name__)

    async def aclose(self) -> None:
        """Close the clients' connection pools and stop the thread pool."""
        self._closed = True
        with self._clients_lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                client.close()
            except Exception:  # closing is best effort; the pool dies with the process anyway
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- plumbing ---------------------------------------------------------------------------

    def _context(self, target: Target) -> KubeContextConfig:
        if not _installed():
            raise SourceError("error", f"the Kubernetes client is not installed; run: {FIX_SDK}")
        ctx = self._contexts.get(target.account)
        if ctx is None:
            raise SourceError("not_found", f"no Kubernetes context {target.account!r} is configured")
        return ctx

    def _namespaces(self, ctx: KubeContextConfig, target: Target) -> builtins.list[str]:
        """The namespaces to read at ``target``: its own (when configured), else the configured ones, else all ("")."""
        if target.region:
            if ctx.namespaces and target.region not in ctx.namespaces:
                raise SourceError("not_found", f"namespace {target.region} is not configured for context {ctx.name}")
            return [target.region]
        return list(ctx.namespaces) or [""]

    async def _paginate(
        self,
        target: Target,
        api: KubeApi,
        namespace: str,
        deadline: float,
        *,
        bound: int,
        extra: Mapping[str, str] = {},
    ) -> tuple[builtins.list[Mapping[str, Any]], bool]:
        """Every object ``api`` lists in ``namespace`` ("" for all), up to ``bound``; (objects, cut)."""
        items: builtins.list[Mapping[str, Any]] = []
        token = ""
        while True:
            size = min(self.page_size, bound - len(items))
            fetch = partial(_page, api, namespace, token, size, dict(extra))
            page, token = await self._call(target, api.name, fetch, api=api, deadline=deadline)
            items.extend(page)
            if len(items) >= bound:
                return items[:bound], bool(token) or len(items) > bound
            if not token:
                return items, False

    async def _call(
        self, target: Target, name: str, fn: Callable[[Any, float], V], *, api: KubeApi | None = None, deadline: float
    ) -> V:
        """Run ``fn(client, timeout_s)`` on the pool within the context's budget; retry throttles until ``deadline``."""
        if self._closed:
            raise SourceError("error", "provider is shut down")
        return await call_within_budget(
            self.budget, f"{self.name}:{target.account}", self.limit, lambda: self._run(target, fn, api, deadline),
            deadline=deadline, api=name, timeout_s=self.timeout_s,
        )

    async def _run(self, target: Target, fn: Callable[[Any, float], V], api: KubeApi | None, deadline: float) -> V:
        loop = asyncio.get_running_loop()

        def blocking() -> V:
            return fn(self._client(target.account), max(0.05, deadline - time.monotonic()))

        try:
            return await asyncio.wait_for(
                loop.run_in_executor(self._executor, blocking), max(0.01, deadline - time.monotonic())
            )
        except TimeoutError:
            raise SourceError("timeout", f"timed out after {self.timeout_s:g} s") from None
        except SourceError:
            raise
        except Exception as exc:  # client errors of every shape become a short, secret-free reason
            raise classify(exc, target, api) from None

    def _client(self, account: str) -> Any:
        """The context's own ``ApiClient`` (blocking: reads the kubeconfig, may run an exec credential plugin)."""
        with self._clients_lock:
            client = self._clients.get(account)
            if client is None:
                client = self._clients[account] = new_client(self.config, self._contexts[account])
            return client


def new_client(config: KubernetesConfig, ctx: KubeContextConfig) -> Any:
    """An ``ApiClient`` of its own for one context (blocking); raises :class:`SourceError` naming what is wrong."""
    from kubernetes import client as kube
    from kubernetes import config as kube_config
    from urllib3.util.retry import Retry

    path = kubeconfig_path(config)
    wanted = ctx.context or ctx.name
    configuration = kube.Configuration()
    # urllib3 would otherwise sleep out a 429's Retry-After inside the thread, past the deadline and the budget.
    configuration.retries = Retry(
        total=2,
        connect=2,
        read=0,
        redirect=0,
        status=0,
        other=0,
        respect_retry_after_header=False,
        raise_on_status=False,
    )
    try:
        return kube_config.new_client_from_config(
            config_file=path, context=wanted, persist_config=False, client_configuration=configuration
        )
    except Exception:  # the loader's messages may quote the file; ours name only the path and context
        pass
    try:
        contexts, _ = kube_config.list_kube_config_contexts(config_file=path)
        known = [str(c.get("name")) for c in contexts or []]
    except Exception:
        raise SourceError("error", f"the kubeconfig {path} could not be read") from None
    if wanted not in known:
        raise SourceError(
            "not_found", f"context {wanted!r} is not in the kubeconfig {path} (it has: {', '.join(known)})"
        )
    raise SourceError(
        "credentials", f"context {wanted!r} of {path} could not be loaded: check its cluster and user entries"
    )


def _import_client() -> None:
    """Import the client's modules (slow: hundreds of generated models) before any request needs them."""
    importlib.import_module("kubernetes.client")
    importlib.import_module("kubernetes.config")


def _page(
    api: KubeApi, namespace: str, token: str, limit: int, extra: Mapping[str, str], client: Any, timeout_s: float
) -> tuple[list[Mapping[str, Any]], str]:
    """One page of ``api`` (blocking): its items as raw JSON and the continue token ("" at the end)."""
    from kubernetes import client as kube

    group = getattr(kube, api.group)(client)
    kwargs: dict[str, Any] = {"limit": limit, "_preload_content": False, "_request_timeout": timeout_s, **extra}
    if token:
        kwargs["_continue"] = token
    if namespace and api.namespaced:
        response = getattr(group, api.namespaced)(namespace, **kwargs)
    else:
        response = getattr(group, api.all_namespaces)(**kwargs)
    try:
        body = json.loads(response.data)
    finally:
        response.release_conn()
    return list(body.get("items") or []), str((body.get("metadata") or {}).get("continue") or "")


def _version(client: Any, timeout_s: float) -> str:
    from kubernetes import client as kube

    version: Any = kube.VersionApi(client)
    response = version.get_code(_preload_content=False, _request_timeout=timeout_s)
    try:
        return str(json.loads(response.data).get("gitVersion") or "")
    finally:
        response.release_conn()


def classify(exc: Exception, target: Target, api: KubeApi | None = None) -> SourceError:
    """A short, secret-free :class:`SourceError` for a client error (never from ``str(exc)``: it quotes headers)."""
    from kubernetes.client.exceptions import ApiException

    where = f"context {target.account}"
    if isinstance(exc, ApiException):
        return _classify_status(exc, target, api)
    import urllib3.exceptions as u3

    if isinstance(exc, (u3.ReadTimeoutError, TimeoutError)):
        return SourceError("timeout", f"the API server of {where} did not answer in time")
    if isinstance(exc, u3.MaxRetryError) and isinstance(exc.reason, u3.ReadTimeoutError):
        return SourceError("timeout", f"the API server of {where} did not answer in time")
    if isinstance(exc, (u3.HTTPError, OSError)):
        cause = exc.reason if isinstance(exc, u3.MaxRetryError) and exc.reason is not None else exc
        return SourceError("unreachable", f"the API server of {where} is unreachable ({type(cause).__name__})")
    return SourceError("error", f"the Kubernetes client failed for {where} ({type(exc).__name__})")


def _classify_status(exc: Any, target: Target, api: KubeApi | None) -> SourceError:
    status = int(exc.status or 0)
    where = f"context {target.account}"
    if status == 0:
        return SourceError("unreachable", f"the TLS connection to the API server of {where} failed")
    if status == 401:
        return SourceError("credentials", f"the kubeconfig's credentials were refused by {where} (401)")
    if status == 403:
        return SourceError("permission", _permission_reason(_status_message(exc), target, api))
    if status == 429:
        return SourceError(
            "throttled", f"the API server of {where} is throttling (429)", retry_after_s=_retry_after(exc)
        )
    if status == 404:
        what = api.resource if api else "the endpoint"
        return SourceError("not_found", f"the API server of {where} does not serve {what} (404)")
    if status == 410:
        return SourceError("error", f"the listing changed while it was paged ({where}); try again")
    return SourceError("error", f"the API server of {where} answered HTTP {status}")


def _status_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        return ""


def _permission_reason(message: str, target: Target, api: KubeApi | None) -> str:
    """``permission denied: needs list pods in namespace shop (RBAC)``, from the Status message when it says."""
    found = _FORBIDDEN.search(message)
    if found:
        group = found["group"] or ""
        resource = found["resource"] + (f".{group}" if group and "." not in found["resource"] else "")
        verb, namespace = found["verb"], found["namespace"] or ""
    else:
        resource, verb, namespace = (api.resource if api else "this resource"), "list", target.region
    scope = f"in namespace {namespace}" if namespace else "at cluster scope"
    return f"permission denied: needs {verb} {resource} {scope} (RBAC, context {target.account})"


def _retry_after(exc: Any) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value else None
    except ValueError:
        return None
