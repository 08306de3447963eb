"""Build the estate from ``config.tools``: one source per enabled provider, the fan-out over them, and its tools.

Cloud, Kubernetes and inventory sources are imported here, on demand, so a
provider module's own import never needs its SDK.
"""

from __future__ import annotations

from collections.abc import Sequence

from botgateway.budget import RateBudget
from botgateway.config import ToolsConfig
from botgateway.tooling import Tool
from tools.estate.fanout import Estate, SourceSettings
from tools.estate.servers import ServerSource
from tools.estate.source import EstateSource
from tools.providers.base import Provider
from tools.toolsets.definitions import kinds_of
from tools.toolsets.estate_tools import build_estate_tools

__all__ = ["build_estate", "estate_sources", "estate_tools"]


def estate_sources(config: ToolsConfig, server_providers: Sequence[Provider], *, budget: RateBudget) -> list[EstateSource]:
    """The sources of every enabled provider (servers only when the ``servers`` toolset is on)."""
    sources: list[EstateSource] = []
    if "servers" in config.toolsets:
        sources.extend(ServerSource(p) for p in server_providers)
    if config.inventory.enabled:
        from tools.providers.inventory_estate import InventoryEstate

        sources.append(InventoryEstate(config.inventory))
    if config.aliyun.enabled:
        from tools.providers.aliyun.estate import AliyunEstate

        sources.append(AliyunEstate(config.aliyun, budget=budget))
    if config.tencent.enabled:
        from tools.providers.tencent.estate import TencentEstate

        sources.append(TencentEstate(config.tencent, budget=budget))
    if config.aws.enabled:
        from tools.providers.aws.estate import AwsEstate

        sources.append(AwsEstate(config.aws, budget=budget))
    if config.kubernetes.enabled:
        from tools.providers.kubernetes import KubernetesEstate

        sources.append(KubernetesEstate(config.kubernetes, budget=budget))
    return sources


def build_estate(config: ToolsConfig, sources: Sequence[EstateSource]) -> Estate:
    """The fan-out over ``sources``, with each provider's cache TTL and timeout."""
    settings = {"inventory": SourceSettings(cache_ttl_s=5.0, timeout_s=5.0)}
    for key in ("aliyun", "tencent", "aws"):
        section = getattr(config, key)
        # Paging and throttle retries happen inside one listing: give them room past one call's timeout.
        settings[key] = SourceSettings(cache_ttl_s=section.cache_ttl_s, timeout_s=2 * section.timeout_s + 5)
    kube = config.kubernetes
    settings["kubernetes"] = SourceSettings(cache_ttl_s=kube.cache_ttl_s, timeout_s=2 * kube.timeout_s + 5, narrows_to_scopes=True,
                                            unregioned_kinds=frozenset({"k8s_node"}))
    return Estate(sources, settings=settings)


def estate_tools(config: ToolsConfig, estate: Estate, *, timeout_s: float | None) -> list[Tool]:
    """The estate tools of the enabled toolsets."""
    return build_estate_tools(estate, kinds_of(config.toolsets), config.toolsets, timeout_s=timeout_s)
