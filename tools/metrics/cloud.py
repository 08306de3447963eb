"""The cloud metric catalog: which namespace, metric and dimension each cloud keeps our standard metrics under.

Our names (``cpu``, ``memory``, ``net_in``, ``net_out``, ``disk_read``,
``disk_write``, ``connections``, ``requests``) are what the model asks for;
each cloud files them under its own names. A :class:`MetricSource` reads one
of them for one resource; the catalog says where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from tools.estate.resource import Resource
from tools.metrics.series import Series

__all__ = ["CATALOG", "METRIC_KINDS", "MetricSource", "MetricSpec", "catalog_of", "dimension_value", "series_labels"]


@dataclass(frozen=True)
class MetricSpec:
    """Where one cloud keeps one of our metrics for one kind."""

    namespace: str
    """``AWS/EC2``, ``acs_ecs_dashboard``, ``QCE/CVM``."""
    metric: str
    """The cloud's metric name (``CPUUtilization``)."""
    dimension: str
    """The dimension naming the resource (``InstanceId``, ``instanceId``)."""
    unit: str = ""
    """Unit of the values (``%``, ``B``, ``bit/s``, ``count``)."""
    statistic: str = "Average"
    """The statistic read (CloudWatch's ``Stat``; the CMS datapoint field)."""
    value: Literal["id", "arn_suffix", "ip"] = "id"
    """What the dimension's value is: the resource id, the part of an ARN after ``loadbalancer/``, its first IP."""


class MetricSource(Protocol):
    """One cloud's monitoring API, read for one resource's metric at a time."""

    @property
    def name(self) -> str:
        """Provider key (``aws``, ``aliyun``, ``tencent``)."""
        ...

    @property
    def label(self) -> str:
        """Human name of the cloud."""
        ...

    @property
    def metric_api(self) -> str:
        """The API read, as provenance names it (``cloudwatch:GetMetricData``)."""
        ...

    async def series(self, resource: Resource, metric: str, start: float, end: float, step_s: int) -> list[Series]:
        """``metric`` (our name) of ``resource`` from ``start`` to ``end`` at ``step_s``; raises ``SourceError``."""
        ...


_P, _B, _BPS, _N = "%", "B", "bit/s", "count"

CATALOG: Mapping[tuple[str, str], Mapping[str, MetricSpec]] = {
    ("aws", "server"): {
        "cpu": MetricSpec("AWS/EC2", "CPUUtilization", "InstanceId", _P),
        "net_in": MetricSpec("AWS/EC2", "NetworkIn", "InstanceId", _B),
        "net_out": MetricSpec("AWS/EC2", "NetworkOut", "InstanceId", _B),
        "disk_read": MetricSpec("AWS/EC2", "EBSReadBytes", "InstanceId", _B),
        "disk_write": MetricSpec("AWS/EC2", "EBSWriteBytes", "InstanceId", _B),
    },
    ("aws", "database"): {
        "cpu": MetricSpec("AWS/RDS", "CPUUtilization", "DBInstanceIdentifier", _P),
        "connections": MetricSpec("AWS/RDS", "DatabaseConnections", "DBInstanceIdentifier", _N),
    },
    ("aws", "load_balancer"): {
        "requests": MetricSpec("AWS/ApplicationELB", "RequestCount", "LoadBalancer", _N, "Sum", "arn_suffix"),
        "connections": MetricSpec("AWS/ApplicationELB", "ActiveConnectionCount", "LoadBalancer", _N, "Sum",
                                  "arn_suffix"),
    },
    ("aliyun", "server"): {
        "cpu": MetricSpec("acs_ecs_dashboard", "CPUUtilization", "instanceId", _P),
        "memory": MetricSpec("acs_ecs_dashboard", "memory_usedutilization", "instanceId", _P),
        "net_in": MetricSpec("acs_ecs_dashboard", "IntranetInRate", "instanceId", _BPS),
        "net_out": MetricSpec("acs_ecs_dashboard", "IntranetOutRate", "instanceId", _BPS),
        "disk_read": MetricSpec("acs_ecs_dashboard", "DiskReadBPS", "instanceId", "B/s"),
        "disk_write": MetricSpec("acs_ecs_dashboard", "DiskWriteBPS", "instanceId", "B/s"),
    },
    ("aliyun", "database"): {
        "cpu": MetricSpec("acs_rds_dashboard", "CpuUsage", "instanceId", _P),
        "connections": MetricSpec("acs_rds_dashboard", "ConnectionUsage", "instanceId", _P),
    },
    ("aliyun", "load_balancer"): {
        "connections": MetricSpec("acs_slb_dashboard", "ActiveConnection", "instanceId", _N),
        "requests": MetricSpec("acs_slb_dashboard", "Qps", "instanceId", "req/s"),
    },
    ("tencent", "server"): {
        "cpu": MetricSpec("QCE/CVM", "CPUUsage", "InstanceId", _P),
        "memory": MetricSpec("QCE/CVM", "MemUsage", "InstanceId", _P),
        "net_in": MetricSpec("QCE/CVM", "LanIntraffic", "InstanceId", "Mbit/s"),
        "net_out": MetricSpec("QCE/CVM", "LanOuttraffic", "InstanceId", "Mbit/s"),
    },
    ("tencent", "database"): {
        "cpu": MetricSpec("QCE/CDB", "CpuUseRate", "InstanceId", _P),
        "connections": MetricSpec("QCE/CDB", "ThreadsConnected", "InstanceId", _N),
    },
    ("tencent", "load_balancer"): {
        "connections": MetricSpec("QCE/LB_PUBLIC", "ClientConnum", "vip", _N, value="ip"),
        "requests": MetricSpec("QCE/LB_PUBLIC", "TotalReq", "vip", _N, value="ip"),
    },
}
"""(provider, kind) → our metric name → where that cloud keeps it."""

METRIC_KINDS: tuple[str, ...] = ("server", "database", "load_balancer", "k8s_node")
"""The kinds with standard metrics (a Kubernetes node's come from Prometheus)."""


def catalog_of(resource: Resource) -> Mapping[str, MetricSpec]:
    """The standard metrics of ``resource``'s cloud and kind (empty when it has none)."""
    return CATALOG.get((resource.provider, resource.kind), {})


def dimension_value(resource: Resource, spec: MetricSpec) -> str:
    """The value ``spec``'s dimension takes for ``resource``."""
    if spec.value == "arn_suffix":
        return resource.id.split(":loadbalancer/", 1)[-1]
    if spec.value == "ip":
        return next(iter((*resource.public_ips, *resource.private_ips)), resource.id)
    return resource.id


def series_labels(resource: Resource, metric: str, spec: MetricSpec) -> dict[str, str]:
    """The labels of a cloud series: our metric name, the resource, and where the cloud keeps it."""
    return {
        "__name__": metric,
        "resource": resource.name or resource.id,
        "id": resource.id,
        "source": f"{spec.namespace}/{spec.metric}",
    }
