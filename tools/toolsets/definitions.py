"""The toolsets: which resource kinds and tools each one brings, and the question it answers best.

A toolset is enabled in ``tools.toolsets``; it then works with every enabled
provider that can list its kinds. ``find_resource`` and ``list_resources``
search the kinds of every enabled toolset; the other tools come with their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["NUMBER_TOOLSETS", "TOOLSET_SPECS", "ToolsetSpec", "kinds_of"]

NUMBER_TOOLSETS = ("metrics", "cost")
"""The toolsets served by monitoring and billing APIs rather than by the estate's listings."""


@dataclass(frozen=True)
class ToolsetSpec:
    """One toolset."""

    name: str
    """Its config name (``network``)."""
    kinds: tuple[str, ...]
    """The resource kinds it adds to ``find_resource`` and ``list_resources``."""
    tools: tuple[str, ...]
    """The tools it brings besides those two."""
    example: str
    """One question it answers (the README and ``tools list`` show it)."""
    providers: tuple[str, ...]
    """The providers that can serve it."""


TOOLSET_SPECS: Mapping[str, ToolsetSpec] = {
    spec.name: spec
    for spec in (
        ToolsetSpec("servers", ("server",), ("find_server", "list_servers", "search_*_by_ip"),
                    "which server is 10.0.1.100?", ("inventory", "aliyun", "tencent", "aws")),
        ToolsetSpec("network", ("load_balancer", "security_group", "ip", "nat_gateway"), ("trace", "exposed_ports"),
                    "which security group opens 22 to the world?", ("inventory", "aliyun", "tencent", "aws")),
        ToolsetSpec("data", ("database", "cache"), (), "where is the orders Redis?", ("inventory", "aliyun", "tencent", "aws")),
        ToolsetSpec("dns", ("dns_record",), ("trace",), "what's behind api.example.com?", ("inventory", "aliyun", "tencent", "aws")),
        ToolsetSpec("storage", ("bucket",), (), "which buckets are public?", ("inventory", "aliyun", "tencent", "aws")),
        ToolsetSpec("kubernetes", ("k8s_node", "pod", "workload", "k8s_service", "ingress"), ("trace",),
                    "why is the checkout deployment degraded?", ("inventory", "kubernetes")),
        ToolsetSpec("changes", (), ("resource_changes",), "who stopped prod-db-03, and when?",
                    ("inventory", "aliyun", "tencent", "aws", "kubernetes")),
        ToolsetSpec("metrics", (), ("query_metrics", "resource_metrics"), "how is prod-db-01 doing?",
                    ("prometheus", "aliyun", "tencent", "aws")),
        ToolsetSpec("cost", (), ("cost",), "what did prod cost last month, by service?", ("aliyun", "tencent", "aws")),
    )
}
"""Every toolset by name, in ``tools list`` order."""


def kinds_of(toolsets: Iterable[str]) -> tuple[str, ...]:
    """The kinds the enabled ``toolsets`` bring, in order."""
    return tuple(dict.fromkeys(k for name in toolsets if name in TOOLSET_SPECS for k in TOOLSET_SPECS[name].kinds))
