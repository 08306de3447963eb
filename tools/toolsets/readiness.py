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
from tools.estate.fanout import Estate
from tools.estate.source import EstateSource, Prerequisite, SourceError, Target
from tools.server_record import provider_label
from tools.toolsets.definitions import TOOLSET_SPECS

__all__ = ["ToolsetStatus", "probe_sources", "toolset_status"]


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
