"""Whether each toolset can work here: its providers' prerequisites (SDK, credentials) and, on request, a live probe.

``botgateway tools list`` shows it per toolset, probing each source's API once;
``check-config`` shows the failed checks without calling anything. Every
failed check carries the exact fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from botgateway.config import ToolsConfig
from tools.demo.recorded_metrics import is_sample_estate
from tools.estate.fanout import Estate
from tools.estate.source import EstateSource, Prerequisite, SourceError, Target
from tools.metrics.prometheus import MetricsError, PrometheusSource
from tools.server_record import provider_label
from tools.toolsets.definitions import NUMBER_TOOLSETS, TOOLSET_SPECS

__all__ = ["ToolsetStatus", "number_providers", "probe_prometheus", "probe_sources", "toolset_status"]


@dataclass(frozen=True)
class ToolsetStatus:
    """One toolset, checked."""

    name: str
    """Its name."""
    enabled: bool
    """Listed in ``tools.toolsets``."""
    example: str
    """A question it answers."""
    providers: tuple[str, ...]
    """Providers serving it here."""
    checks: tuple[Prerequisite, ...]
    """What it needs, checked."""

    @property
    def ready(self) -> bool:
        """Enabled, served and every check holds."""
        return self.enabled and bool(self.providers) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> tuple[Prerequisite, ...]:
        """The checks that do not hold."""
        return tuple(c for c in self.checks if not c.ok)


def _serves(source: EstateSource, name: str) -> bool:
    spec = TOOLSET_SPECS[name]
    if name == "changes":
        return bool(source.targets("")) and source.name in spec.providers
    return bool(set(spec.kinds) & source.kinds())


def toolset_status(config: ToolsConfig, estate: Estate | None, probes: Sequence[Prerequisite] = ()) -> list[ToolsetStatus]:
    """Every toolset with its checks (``probes``: results of :func:`probe_sources`, per provider label)."""
    out = []
    sources = estate.sources if estate is not None else []
    for name, spec in TOOLSET_SPECS.items():
        enabled = name in config.toolsets
        if name in NUMBER_TOOLSETS:
            out.append(_number_status(config, name, sources, probes))
            continue
        serving = [s for s in sources if _serves(s, name)]
        checks: list[Prerequisite] = []
        for source in serving:
            checks.extend(c for c in source.prerequisites() if c not in checks)
            label = provider_label(source.name)
            checks.extend(p for p in probes if p.what.startswith(label) and p not in checks)
        # Only a toolset asked for by name is missing a provider; the default "all" offers what the providers have.
        if enabled and not serving and "toolsets" in config.model_fields_set:
            checks.append(Prerequisite(
                f"a provider for {name}", False,
                "enable a provider that has it (" + ", ".join(f"tools.{p}" for p in spec.providers if p != "inventory")
                + ") or describe it in the inventory file",
            ))
        providers = tuple(dict.fromkeys(s.name for s in serving))
        out.append(ToolsetStatus(name, enabled, spec.example, providers, tuple(checks)))
    return out


_NO_NUMBER_PROVIDER = {
    "metrics": "configure tools.prometheus (url) or enable a cloud (tools.aws, tools.aliyun, tools.tencent): their "
               "monitoring APIs answer resource_metrics",
    "cost": "enable a cloud account (tools.aws, tools.aliyun, tools.tencent) whose keys may read its bill",
}


def number_providers(config: ToolsConfig, name: str) -> tuple[str, ...]:
    """Who serves the ``metrics`` or ``cost`` toolset here: Prometheus, the clouds' monitoring or billing, the sample
    estate's recorded hour."""
    clouds = tuple(p for p in ("aliyun", "tencent", "aws") if getattr(config, p).enabled)
    if name == "cost":
        return clouds
    prometheus = ("prometheus",) if config.prometheus.enabled else ()
    recorded = ("inventory",) if not prometheus and is_sample_estate(config.inventory) else ()
    return prometheus + clouds + recorded


def _number_status(config: ToolsConfig, name: str, sources: Sequence[EstateSource],
                   probes: Sequence[Prerequisite]) -> ToolsetStatus:
    """A number toolset's status: its providers, the clouds' own checks (SDK, credentials), Prometheus's probe."""
    spec = TOOLSET_SPECS[name]
    enabled = name in config.toolsets
    providers = number_providers(config, name)
    checks: list[Prerequisite] = []
    for source in (s for s in sources if s.name in providers):
        checks.extend(c for c in source.prerequisites() if c not in checks)
    if "prometheus" in providers:
        checks.extend(p for p in probes if p.what.startswith("Prometheus") and p not in checks)
    if enabled and not providers and "toolsets" in config.model_fields_set:
        checks.append(Prerequisite(f"a provider for {name}", False, _NO_NUMBER_PROVIDER[name]))
    return ToolsetStatus(name, enabled, spec.example, providers, tuple(checks))


async def probe_prometheus(source: PrometheusSource) -> Prerequisite:
    """One instant query on the configured Prometheus: whether it answers, and what to fix when it does not."""
    what = f"Prometheus at {source.where} answers queries"
    try:
        await source.instant("vector(1)")
    except MetricsError as exc:
        return Prerequisite(what, False, f"{exc.reason}; check tools.prometheus.url and its headers")
    return Prerequisite(what, True)


async def probe_sources(estate: Estate, *, timeout_s: float = 10.0) -> list[Prerequisite]:
    """Call each source's API once (its first target), concurrently; one check per source and target."""
    jobs = []
    for source in estate.sources:
        targets = list(source.targets("")) or [t for k in sorted(source.kinds()) for t in source.targets(k)][:1]
        for target in targets[:1]:
            jobs.append((source, target))

    async def one(source: EstateSource, where: str, target: Target) -> Prerequisite:
        what = f"{provider_label(source.name)} API of {where}"
        try:
            await asyncio.wait_for(source.probe(target), timeout_s)
        except SourceError as exc:
            return Prerequisite(what, False, exc.reason)
        except TimeoutError:
            return Prerequisite(what, False, f"no answer in {timeout_s:g} s: check the endpoint and the network")
        except Exception as exc:
            return Prerequisite(what, False, f"probe failed ({type(exc).__name__})")
        return Prerequisite(what, True)

    found = await asyncio.gather(*(
        one(s, "/".join(p for p in (t.account, t.region) if p) or "the file", t) for s, t in jobs
    ))
    return list(dict.fromkeys(found))
