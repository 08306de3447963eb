"""The Kubernetes estate source through the official client, against loopback fake API servers and a real kubeconfig."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import structlog.testing

from botgateway.config import KubeContextConfig, KubernetesConfig
from tests.fakes.kube_api import CRASHING_POD, FakeKubeApi, shop_cluster, staging_cluster, write_kubeconfig
from tests.ports import closed_port
from tools.estate.resource import Listener, Resource
from tools.estate.source import ChangeQuery, SourceError, Target
from tools.providers.kubernetes import KubernetesEstate

PROD_TOKEN = "prod-token-SECRET-do-not-print"
STAGING_TOKEN = "staging-token-SECRET-do-not-print"


@pytest.fixture
def prod() -> Iterator[FakeKubeApi]:
    with FakeKubeApi(shop_cluster(), token=PROD_TOKEN) as fake:
        yield fake


@pytest.fixture
def staging() -> Iterator[FakeKubeApi]:
    with FakeKubeApi(staging_cluster(), token=STAGING_TOKEN) as fake:
        yield fake


@pytest.fixture
def kubeconfig(tmp_path: Path, prod: FakeKubeApi, staging: FakeKubeApi) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", {"prod": prod, "staging": staging})


@pytest.fixture
async def made() -> AsyncIterator[list[KubernetesEstate]]:
    estates: list[KubernetesEstate] = []
    yield estates
    for estate in estates:
        await estate.aclose()


def estate_of(
    made: list[KubernetesEstate], kubeconfig: Path, *contexts: KubeContextConfig, **kw: Any
) -> KubernetesEstate:
    options = {k: kw.pop(k) for k in ("max_per_listing", "page_size") if k in kw}
    config = KubernetesConfig(enabled=True, kubeconfig=str(kubeconfig), contexts=list(contexts), **kw)
    estate = KubernetesEstate(config, **options)
    made.append(estate)
    return estate


def ctx(name: str, *namespaces: str, context: str = "") -> KubeContextConfig:
    return KubeContextConfig(name=name, context=context, namespaces=list(namespaces))


def by_id(resources: tuple[Resource, ...]) -> dict[str, Resource]:
    return {r.id: r for r in resources}


PROD = Target("kubernetes", "prod", "")
SHOP = Target("kubernetes", "prod", "shop")


# -- the fake is honest -------------------------------------------------------------------------------


def test_fake_objects_are_valid_kubernetes_objects() -> None:
    """Every object the fake serves validates (strictly: no unknown field) against the Kubernetes 1.30 schemas."""
    kinds = {
        "nodes": ("Node", "v1"),
        "pods": ("Pod", "v1"),
        "services": ("Service", "v1"),
        "events": ("Event", "v1"),
        "namespaces": ("Namespace", "v1"),
        "deployments": ("Deployment", "apps/v1"),
        "statefulsets": ("StatefulSet", "apps/v1"),
        "daemonsets": ("DaemonSet", "apps/v1"),
        "ingresses": ("Ingress", "networking.k8s.io/v1"),
    }
    for cluster in (shop_cluster(), staging_cluster()):
        for resource, items in cluster.items():
            kind, version = kinds[resource]
            for item in items:
                kubernetes_validate.validate({"kind": kind, "apiVersion": version, **item}, "1.30", strict=True)


# -- each kind through the real client ------------------------------------------------------------------


async def test_targets_are_contexts_by_namespace_and_nodes_are_cluster_scoped(
    made: list[KubernetesEstate], kubeconfig: Path
) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod", "shop", "payments"), ctx("staging"))
    assert estate.name == "kubernetes" and estate.label == "Kubernetes"
    assert estate.kinds() == {"k8s_node", "pod", "workload", "k8s_service", "ingress"}
    assert estate.targets("pod") == [
        Target("kubernetes", "prod", "shop"),
        Target("kubernetes", "prod", "payments"),
        Target("kubernetes", "staging", ""),
    ]
    assert estate.targets("k8s_node") == [Target("kubernetes", "prod", ""), Target("kubernetes", "staging", "")]
    assert estate.api_of("workload") == "apps/v1:deployments+apps/v1:statefulsets+apps/v1:daemonsets"


async def test_nodes(made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"), ctx("staging"))
    await estate.start()
    listing = await estate.list(PROD, "k8s_node")
    nodes = by_id(listing.resources)
    assert sorted(nodes) == ["node-a", "node-b", "node-c"]
    a, c = nodes["node-a"], nodes["node-c"]
    assert (a.kind, a.provider, a.account, a.region, a.state) == ("k8s_node", "kubernetes", "prod", "", "ready")
    assert a.private_ips == ("10.0.1.21",) and a.public_ips == ("203.0.113.21",)
    assert a.details["kubelet"] == "v1.30.2" and a.details["roles"] == "worker" and a.details["zone"] == "us-east-1a"
    assert a.tags["kubernetes.io/hostname"] == "node-a"
    assert c.state == "notready" and c.details["unschedulable"] == "yes" and c.details["kubelet"] == "v1.29.6"
    assert "NodeStatusUnknown" in c.details["condition"]
    assert listing.api == "core/v1:nodes" and not listing.cut
    assert [r["path"] for r in prod.calls()] == ["/api/v1/nodes"]
    # The staging context has its own client, credentials and cluster.
    staging_nodes = await estate.list(Target("kubernetes", "staging", ""), "k8s_node")
    assert [(n.id, n.account) for n in staging_nodes.resources] == [("stg-node-1", "staging")]
    # The client's global default configuration was never touched.
    default = kubernetes.client.Configuration.get_default_copy()
    assert default.host == kubernetes.client.Configuration().host and not default.api_key


async def test_pods(made: list[KubernetesEstate], kubeconfig: Path) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"))
    pods = by_id((await estate.list(PROD, "pod")).resources)
    assert len(pods) == 5 and "payments/ledger-5c4b9d7f6-q9w8e" in pods
    crashing = pods[f"shop/{CRASHING_POD}"]
    assert (crashing.kind, crashing.name, crashing.region, crashing.account) == ("pod", CRASHING_POD, "shop", "prod")
    assert crashing.private_ips == ("10.244.1.17",)
    assert crashing.state == "crashloopbackoff"
    assert crashing.details["reason"] == "CrashLoopBackOff" and crashing.details["restarts"] == "14"
    assert crashing.details["ready"] == "0/1" and crashing.details["phase"] == "Running"
    assert crashing.owner == "Deployment/orders"
    assert [(link.rel, link.target, link.kind) for link in crashing.links] == [
        ("runs_on", "node-a", "k8s_node"),
        ("member_of", "shop/orders", "workload"),
    ]
    healthy = pods["shop/orders-7d9f8c6b5-m8q2z"]
    assert (
        healthy.state == "running"
        and healthy.details["ready"] == "1/1"
        and healthy.links_of("runs_on")[0].target == "node-b"
    )
    redis = pods["shop/redis-0"]
    assert redis.owner == "StatefulSet/redis" and redis.links_of("member_of")[0].target == "shop/redis"


async def test_workloads(made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"))
    listing = await estate.list(PROD, "workload")
    workloads = by_id(listing.resources)
    assert sorted(workloads) == ["kube-system/node-exporter", "payments/ledger", "shop/orders", "shop/redis"]
    orders = workloads["shop/orders"]
    assert (orders.kind, orders.state, orders.region) == ("workload", "degraded", "shop")
    assert orders.details["type"] == "Deployment" and orders.details["replicas"] == "2/3"
    assert orders.details["selector"] == "app=orders"
    assert workloads["shop/redis"].state == "available" and workloads["shop/redis"].details["type"] == "StatefulSet"
    exporter = workloads["kube-system/node-exporter"]
    assert (
        exporter.details["type"] == "DaemonSet"
        and exporter.details["replicas"] == "2/3"
        and exporter.state == "degraded"
    )
    assert {r["path"] for r in prod.calls()} == {
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
    }


async def test_services(made: list[KubernetesEstate], kubeconfig: Path) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"))
    services = by_id((await estate.list(PROD, "k8s_service")).resources)
    orders = services["shop/orders"]
    assert (orders.kind, orders.state) == ("k8s_service", "active")
    assert orders.private_ips == ("10.96.12.34",) and orders.public_ips == ("203.0.113.50",)
    assert orders.listeners == (Listener(protocol="tcp", port=80, name="http target 8080 node port 30080"),)
    assert orders.listeners[0].backends == ()
    assert orders.details["selector"] == "app=orders" and orders.details["type"] == "LoadBalancer"
    ledger = services["payments/ledger"]
    assert ledger.dns_names == ("a1b2c3d4.elb.us-east-1.amazonaws.com",) and ledger.public_ips == ()
    assert ledger.listeners[0].port == 443 and "target https" in ledger.listeners[0].name
    assert services["shop/redis"].details["type"] == "ClusterIP" and services["shop/redis"].public_ips == ()


async def test_ingresses(made: list[KubernetesEstate], kubeconfig: Path) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"))
    listing = await estate.list(SHOP, "ingress")
    assert listing.api == "networking.k8s.io/v1:ingresses"
    (api,) = listing.resources
    assert (api.kind, api.id, api.state) == ("ingress", "shop/api", "active")
    assert api.dns_names == ("api.example.com",) and api.public_ips == ("203.0.113.80",)
    (route,) = api.links
    assert (route.rel, route.target, route.kind, route.port) == ("routes_to", "shop/orders", "k8s_service", 80)
    assert api.details["class"] == "nginx" and api.details["tls"] == "api.example.com"


# -- events as changes ------------------------------------------------------------------------------


async def test_events_of_a_pod_are_its_changes(
    made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi
) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod", "shop"))
    changes = await estate.changes(SHOP, ChangeQuery(resource_name=CRASHING_POD))
    assert [c.action for c in changes] == ["BackOff", "Killing"]
    backoff, killing = changes
    assert backoff.time == "2026-11-30T02:14:09Z" and backoff.principal == "kubelet"
    assert backoff.outcome == "BackOff" and backoff.resource_kind == "pod"
    assert backoff.resource_id == f"shop/{CRASHING_POD}" and backoff.region == "shop" and backoff.account == "prod"
    assert backoff.detail.startswith("Back-off restarting failed container") and "(x42)" in backoff.detail
    assert killing.outcome == "success" and "liveness probe" in killing.detail
    (call,) = prod.calls("events")
    assert call["path"] == "/api/v1/namespaces/shop/events"
    assert call["query"]["fieldSelector"] == f"involvedObject.name={CRASHING_POD}"


async def test_changes_by_namespaced_name_and_event_time(
    made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi
) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"))
    (scaled,) = await estate.changes(PROD, ChangeQuery(resource_id="shop/orders"))
    assert (scaled.action, scaled.principal, scaled.time) == (
        "ScalingReplicaSet",
        "deployment-controller",
        "2026-11-30T01:00:00Z",
    )
    assert scaled.resource_kind == "workload"
    assert prod.calls("events")[0]["path"] == "/api/v1/namespaces/shop/events"
    everything = await estate.changes(PROD, ChangeQuery(since=1796000000.0))  # 2026-11-29T...: all four
    assert [c.time for c in everything] == sorted((c.time for c in everything), reverse=True) and len(everything) == 4
    assert await estate.changes(PROD, ChangeQuery(resource_name="x,involvedObject.kind=Pod")) == []


# -- scopes, failures, paging, throttling -------------------------------------------------------------


async def test_a_context_limited_to_shop_never_calls_other_namespaces(
    made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi
) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod", "shop"))
    for kind in sorted(estate.kinds()):
        for target in estate.targets(kind):
            await estate.list(target, kind)
    await estate.list(Target("kubernetes", "prod", ""), "pod")  # no namespace named: the configured ones
    await estate.changes(Target("kubernetes", "prod", ""), ChangeQuery())
    with pytest.raises(SourceError) as caught:
        await estate.list(Target("kubernetes", "prod", "payments"), "pod")
    assert caught.value.kind == "not_found"
    assert await estate.changes(SHOP, ChangeQuery(resource_id="payments/ledger-5c4b9d7f6-q9w8e")) == []
    calls = prod.calls()
    assert calls and {c["namespace"] for c in calls if c["resource"] != "nodes"} == {"shop"}
    assert [c["path"] for c in calls if not c["namespace"]] == ["/api/v1/nodes"]


async def test_a_forbidden_namespace_names_the_missing_permission(made: list[KubernetesEstate], tmp_path: Path) -> None:
    with FakeKubeApi(
        shop_cluster(), token=PROD_TOKEN, forbidden_namespaces={"payments"}, cluster_forbidden=True
    ) as fake:
        path = write_kubeconfig(tmp_path / "kubeconfig", {"prod": fake})
        estate = estate_of(made, path, ctx("prod", "shop", "payments"))
        assert len((await estate.list(SHOP, "pod")).resources) == 4
        with pytest.raises(SourceError) as caught:
            await estate.list(Target("kubernetes", "prod", "payments"), "pod")
        assert caught.value.kind == "permission"
        assert caught.value.reason.startswith("permission denied: needs list pods in namespace payments (RBAC")
        with pytest.raises(SourceError) as caught:
            await estate.list(Target("kubernetes", "prod", "payments"), "workload")
        assert "needs list deployments.apps in namespace payments" in caught.value.reason
        with pytest.raises(SourceError) as caught:
            await estate.list(Target("kubernetes", "prod", ""), "k8s_node")
        assert caught.value.kind == "permission" and "needs list nodes at cluster scope" in caught.value.reason


async def test_a_wrong_token_is_credentials_and_never_echoed(
    made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi
) -> None:
    prod.token = "the-token-the-cluster-wants"  # the kubeconfig still holds PROD_TOKEN
    estate = estate_of(made, kubeconfig, ctx("prod"))
    with structlog.testing.capture_logs() as logs:
        for call in (estate.list(PROD, "pod"), estate.probe(PROD), estate.changes(PROD, ChangeQuery())):
            with pytest.raises(SourceError) as caught:
                await call
            assert caught.value.kind == "credentials"
            assert "credentials were refused" in caught.value.reason
            assert PROD_TOKEN not in caught.value.reason and "Bearer" not in caught.value.reason
    assert PROD_TOKEN not in repr(logs)
    assert all(not r["authorized"] for r in prod.calls()) and len(prod.calls()) == 3


async def test_an_unreachable_api_server(made: list[KubernetesEstate], tmp_path: Path) -> None:
    fake = FakeKubeApi({}, token=PROD_TOKEN).start()
    path = write_kubeconfig(tmp_path / "kubeconfig", {"prod": fake})
    fake.stop()
    path.write_text(path.read_text().replace(fake.endpoint, f"http://127.0.0.1:{closed_port()}"))
    estate = estate_of(made, path, ctx("prod"), timeout_s=5)
    with pytest.raises(SourceError) as caught:
        await estate.list(PROD, "k8s_node")
    assert caught.value.kind == "unreachable" and "context prod" in caught.value.reason


async def test_paging_follows_continue_and_the_bound_cuts(
    made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi
) -> None:
    paged = estate_of(made, kubeconfig, ctx("prod"), page_size=2)
    listing = await paged.list(PROD, "pod")
    assert len(listing.resources) == 5 and not listing.cut
    calls = prod.calls("pods")
    assert [c["query"].get("limit") for c in calls] == ["2", "2", "2"]
    assert "continue" not in calls[0]["query"] and all(c["query"]["continue"] for c in calls[1:])
    bounded = estate_of(made, kubeconfig, ctx("prod"), page_size=2, max_per_listing=3)
    listing = await bounded.list(PROD, "pod")
    assert len(listing.resources) == 3 and listing.cut
    assert len({r.id for r in listing.resources}) == 3


async def test_a_throttle_is_retried_after_retry_after(made: list[KubernetesEstate], tmp_path: Path) -> None:
    with FakeKubeApi(shop_cluster(), token=PROD_TOKEN, throttle_first=1, retry_after_s=1) as fake:
        estate = estate_of(made, write_kubeconfig(tmp_path / "kubeconfig", {"prod": fake}), ctx("prod"))
        listing = await estate.list(PROD, "k8s_node")
        assert len(listing.resources) == 3
        assert [c["path"] for c in fake.calls()] == ["/api/v1/nodes", "/api/v1/nodes"]


async def test_a_throttle_that_outlasts_the_timeout_says_throttled(
    made: list[KubernetesEstate], tmp_path: Path
) -> None:
    with FakeKubeApi(shop_cluster(), token=PROD_TOKEN, throttle_first=1000, retry_after_s=30) as fake:
        estate = estate_of(made, write_kubeconfig(tmp_path / "kubeconfig", {"prod": fake}), ctx("prod"), timeout_s=5)
        with pytest.raises(SourceError) as caught:
            await estate.list(PROD, "k8s_node")
        assert caught.value.kind == "throttled" and caught.value.retry_after_s == 30
        assert len(fake.calls()) == 1  # Retry-After is past the deadline: no blind retry


# -- prerequisites and probe -----------------------------------------------------------------------------


async def test_prerequisites_name_a_missing_context_with_the_fix(
    made: list[KubernetesEstate], kubeconfig: Path
) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod"), ctx("qa"), ctx("live", context="staging"))
    checks = {p.what: p for p in estate.prerequisites()}
    assert checks["Kubernetes Python client"].ok
    assert checks[f"kubeconfig {kubeconfig}"].ok
    assert checks["Kubernetes context prod"].ok and checks["Kubernetes context live"].ok
    qa = checks["Kubernetes context qa"]
    assert not qa.ok and "'qa' is not in" in qa.fix and "it has: prod, staging" in qa.fix
    assert PROD_TOKEN not in repr(checks)
    with pytest.raises(SourceError) as caught:
        await estate.list(Target("kubernetes", "qa", ""), "pod")
    assert caught.value.kind == "not_found" and "prod, staging" in caught.value.reason


async def test_prerequisites_of_a_missing_kubeconfig(made: list[KubernetesEstate], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "config"
    estate = estate_of(made, missing, ctx("prod"))
    (client, config) = estate.prerequisites()
    assert client.ok and not config.ok
    assert str(missing) in config.fix and "KUBECONFIG" in config.fix


async def test_probe(made: list[KubernetesEstate], kubeconfig: Path, prod: FakeKubeApi) -> None:
    estate = estate_of(made, kubeconfig, ctx("prod", "shop"))
    await estate.probe(SHOP)
    assert [c["path"] for c in prod.calls()] == ["/version/", "/api/v1/namespaces/shop/pods"]
    assert prod.calls()[1]["query"]["limit"] == "1"
