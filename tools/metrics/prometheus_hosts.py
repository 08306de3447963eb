"""Hosts' standard metrics from Prometheus: node_exporter PromQL for a resource found by its ``instance`` label.

The static inventory and Kubernetes have no monitoring API of their own; their
hosts are usually scraped by node_exporter (a database by mysqld_exporter or
postgres_exporter). A resource's series are those whose ``instance`` label is
one of its IPs or names, with or without the exporter's port
(``instance=~"10\\\\.0\\\\.3\\\\.7(?::[0-9]+)?"``), the values escaped as
:func:`re.escape` does and quoted as a PromQL string. Each of our metric names
is one expression per instance over the exporters' standard series.

The source reads through a :class:`RangeQuerier`: the real
:class:`~tools.metrics.prometheus.PrometheusSource`, or a recording that
answers the same expressions (:func:`recognize` reads one back).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tools.estate.resource import Resource
from tools.estate.source import FailureKind, SourceError
from tools.metrics.prometheus import MetricsError, RangeResult
from tools.metrics.series import Series

__all__ = [
    "DATABASE_QUERIES",
    "HOST_KINDS",
    "HOST_QUERIES",
    "HostQuery",
    "PrometheusHostSource",
    "RangeQuerier",
    "instance_matcher",
    "instance_pattern",
    "recognize",
]


class RangeQuerier(Protocol):
    """What the host source needs of Prometheus: a range query (:meth:`PrometheusSource.range`)."""

    async def range(self, query: str, start: float, end: float, step_s: int | None = None) -> RangeResult:
        """The series of ``query`` from ``start`` to ``end``; raises :class:`MetricsError`."""
        ...


@dataclass(frozen=True)
class HostQuery:
    """One of our metrics as PromQL: a template over ``{sel}`` (the instance matcher) and ``{window}`` (a rate's)."""

    expr: str
    """The expression, one series per ``instance``; ``{{``/``}}`` are PromQL's braces."""
    unit: str
    """Unit of its values."""
    exporter: str = "node_exporter"
    """Which exporter's series it reads (said when none is found)."""


# Virtual interfaces and stacked block devices (LVM, RAID) carry traffic already counted on the physical ones.
_NICS = 'device!~"lo|veth.*|docker.*|br-.*|virbr.*|cali.*|flannel.*|cni.*|tun.*"'
_DISKS = 'device!~"dm-.*|md.*|loop.*|ram.*|sr.*"'

HOST_QUERIES: Mapping[str, HostQuery] = {
    "cpu": HostQuery('100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle",{sel}}}[{window}])))', "%"),
    "memory": HostQuery("100 * (1 - sum by (instance) (node_memory_MemAvailable_bytes{{{sel}}}) / "
                        "sum by (instance) (node_memory_MemTotal_bytes{{{sel}}}))", "%"),
    "net_in": HostQuery("sum by (instance) (rate(node_network_receive_bytes_total{{" + _NICS + ",{sel}}}[{window}]))",
                        "B/s"),
    "net_out": HostQuery("sum by (instance) (rate(node_network_transmit_bytes_total{{" + _NICS + ",{sel}}}[{window}]))",
                         "B/s"),
    "disk_read": HostQuery("sum by (instance) (rate(node_disk_read_bytes_total{{" + _DISKS + ",{sel}}}[{window}]))",
                           "B/s"),
    "disk_write": HostQuery("sum by (instance) (rate(node_disk_written_bytes_total{{" + _DISKS + ",{sel}}}[{window}]))",
                            "B/s"),
}
"""Our host metric names → node_exporter PromQL."""

DATABASE_QUERIES: Mapping[str, HostQuery] = {
    # mysqld_exporter's and postgres_exporter's standard series; a server runs one of them.
    "connections": HostQuery(
        "sum by (instance) (mysql_global_status_threads_connected{{{sel}}}) or "
        "sum by (instance) (pg_stat_activity_count{{{sel}}})", "count", "mysqld_exporter or postgres_exporter"),
}
"""A database's metrics beyond its host's."""

HOST_KINDS = frozenset({"server", "k8s_node"})
"""Kinds read as hosts (a database adds :data:`DATABASE_QUERIES`)."""

_MIN_RATE_WINDOW_S = 300
"""A rate's window at least (node_exporter is scraped every 15 s to 1 min: a few samples always fall in it)."""
_ERROR_KINDS: Mapping[str, FailureKind] = {"unreachable": "unreachable", "timeout": "timeout"}


def instance_pattern(resource: Resource) -> str:
    """The regular expression an ``instance`` label of ``resource`` matches: an IP, a DNS name or its name (a bare
    name also with a domain), then an optional port."""
    names = [n for n in dict.fromkeys((resource.name, resource.id)) if n and "/" not in n]
    plain = [re.escape(a) for a in dict.fromkeys((*resource.private_ips, *resource.public_ips, *resource.dns_names))]
    # A host is often scraped by its short name or its FQDN: prod-db-01 or prod-db-01.corp.example.
    plain += [re.escape(n) + (r"(?:\.[A-Za-z0-9.-]+)?" if "." not in n else "") for n in names]
    return f"(?:{'|'.join(plain)})(?::[0-9]+)?"


def instance_matcher(resource: Resource) -> str:
    """``instance=~"…"``: :func:`instance_pattern` as a PromQL string (JSON's escapes are PromQL's)."""
    return f"instance=~{json.dumps(instance_pattern(resource))}"


def _rate_window(step_s: int) -> str:
    # At least a step, so consecutive points cover the whole range between them.
    return f"{max(_MIN_RATE_WINDOW_S, step_s)}s"


def _template_pattern(template: str) -> re.Pattern[str]:
    """A template's expressions: the instance matcher captured (once; later copies must be the same)."""
    out, first = [], True
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field == "sel":
            out.append(r'instance=~(?P<sel>"(?:[^"\\]|\\.)*")' if first else "instance=~(?P=sel)")
            first = False
        elif field == "window":
            out.append(r"[0-9]+s")
    return re.compile("".join(out))


_RECOGNIZED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, _template_pattern(q.expr)) for name, q in {**HOST_QUERIES, **DATABASE_QUERIES}.items()
)


def recognize(query: str) -> tuple[str, re.Pattern[str]] | None:
    """Which of our metrics ``query`` is (an expression this module wrote) and the instance pattern it selects;
    ``None`` for any other expression. A recording of evaluated series answers queries through this."""
    for name, pattern in _RECOGNIZED:
        match = pattern.fullmatch(query)
        if match:
            try:
                return name, re.compile(json.loads(match.group("sel")))
            except (ValueError, re.error):
                return None
    return None


class PrometheusHostSource:
    """A host's standard metrics read from Prometheus, for the providers that have no monitoring API."""

    name = "prometheus"
    """Source key."""

    def __init__(self, querier: RangeQuerier, *, label: str = "Prometheus", metric_api: str = "query_range",
                 timeout_s: float = 10.0) -> None:
        self._querier = querier
        self._label = label
        self._api = metric_api
        self.timeout_s = timeout_s
        """How long one query may take (the tool's timeout leaves room for it)."""

    @property
    def label(self) -> str:
        """Human name of the source ("Prometheus")."""
        return self._label

    @property
    def metric_api(self) -> str:
        """What is read, as provenance names it."""
        return self._api

    def catalog(self, resource: Resource) -> Mapping[str, HostQuery]:
        """The metrics known for ``resource``'s kind: a host's, a database's host and connections, else none."""
        if resource.kind in HOST_KINDS:
            return HOST_QUERIES
        if resource.kind == "database":
            return {**HOST_QUERIES, **DATABASE_QUERIES}
        return {}

    async def series(self, resource: Resource, metric: str, start: float, end: float, step_s: int) -> list[Series]:
        """``metric`` of ``resource``, one series per matching instance; raises :class:`SourceError`."""
        query = self.catalog(resource).get(metric)
        if query is None:
            raise SourceError("not_found", f"no {metric} metric for a {resource.kind}")
        expr = query.expr.format(sel=instance_matcher(resource), window=_rate_window(step_s))
        try:
            result = await self._querier.range(expr, start, end, step_s)
        except MetricsError as exc:
            raise SourceError(_ERROR_KINDS.get(exc.kind, "error"), exc.reason) from None
        if not result.series:
            shown = "|".join(dict.fromkeys((*resource.private_ips, *resource.public_ips, resource.name or resource.id)))
            raise SourceError("not_found", f"no {query.exporter} series with instance {shown}")
        who = resource.name or resource.id
        return [
            Series({"__name__": metric, "resource": who, "instance": s.labels.get("instance", "")}, s.points,
                   query.unit)
            for s in result.series
        ]
