"""The normalized server record every provider returns, and how results read.

Cloud APIs disagree on everything (``Running`` vs ``RUNNING`` vs ``running``,
memory in MiB vs GiB, EIPs apart from public IPs). Providers translate their
answers into :class:`Server`; tools hand a :class:`SearchResult` back: its
data (JSON-ready), its rendering for the model and one short line for the card.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from botgateway.tooling import Source, ToolError, ToolOutput

__all__ = [
    "PROVIDER_LABELS",
    "SEARCH_RESULT_KIND",
    "STATUSES",
    "ProviderFailure",
    "SearchResult",
    "Server",
    "merge_sources",
    "provider_label",
]

PROVIDER_LABELS: Mapping[str, str] = {
    "inventory": "Static inventory",
    "aliyun": "Alibaba Cloud",
    "tencent": "Tencent Cloud",
    "aws": "AWS",
    "kubernetes": "Kubernetes",
}
"""Human names of the providers, used in results and failure notes."""

STATUSES = ("running", "stopped", "starting", "stopping", "pending", "rebooting", "terminated", "expired")
"""Normalized instance states (what ``list_servers(status=...)`` accepts)."""


def provider_label(name: str) -> str:
    """The human name of provider ``name`` ("tencent" → "Tencent Cloud")."""
    return PROVIDER_LABELS.get(name, name)


SUMMARY_NAMES = 3
"""A search that finds at most this many servers names them on its status line."""


@dataclass(frozen=True)
class Server:
    """One machine, whatever provider it came from."""

    provider: str
    """Provider key: ``aliyun``, ``tencent``, ``aws`` or ``inventory``."""
    account: str
    """Account label from the config (or the inventory's name)."""
    region: str
    """Region (cloud) or data centre (inventory)."""
    instance_id: str
    """Provider's instance id (the host name for inventory hosts without one)."""
    name: str
    """Instance / host name."""
    status: str
    """Normalized state, one of :data:`STATUSES` (or the provider's word when unknown)."""
    zone: str = ""
    """Availability zone (cloud) or rack / room (inventory)."""
    instance_type: str = ""
    """Instance type ("ecs.g7.xlarge", "S5.MEDIUM4", "t3.micro") or hardware model."""
    cpu: int | None = None
    """vCPU count."""
    memory_gb: float | None = None
    """Memory in GiB."""
    os: str = ""
    """Operating system name."""
    private_ips: tuple[str, ...] = ()
    """Private addresses."""
    public_ips: tuple[str, ...] = ()
    """Public addresses, elastic IPs included."""
    vpc: str = ""
    """VPC id (cloud) or network / VLAN (inventory)."""
    security_groups: tuple[str, ...] = ()
    """Ids of the security groups filtering its traffic (cloud), empty when unknown."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags / labels."""
    created_at: str = ""
    """Creation time, ISO 8601, empty when unknown."""
    expires_at: str = ""
    """Expiry of a prepaid instance (or warranty end), ISO 8601; empty when it does not expire."""

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity across queries: provider, account, instance id."""
        return (self.provider, self.account, self.instance_id)

    @property
    def ips(self) -> tuple[str, ...]:
        """All addresses, private first."""
        return self.private_ips + self.public_ips

    @property
    def shown_account(self) -> str:
        """The account label worth showing: empty for the default account."""
        return self.account if self.account != "default" else ""

    @property
    def location(self) -> str:
        """``region/zone``, or the region alone."""
        return self.region + (f"/{self.zone}" if self.zone else "")

    @property
    def spec(self) -> str:
        """Type, CPU/memory and OS in one phrase ("ecs.g7.large 2 vCPU/8 GiB Alibaba Cloud Linux 3"); empty when unknown."""
        spec = []
        if self.instance_type:
            spec.append(self.instance_type)
        if self.cpu is not None or self.memory_gb is not None:
            cpu = f"{self.cpu} vCPU" if self.cpu is not None else "? vCPU"
            mem = f"{_num(self.memory_gb)} GiB" if self.memory_gb is not None else "? GiB"
            spec.append(f"{cpu}/{mem}")
        if self.os:
            spec.append(self.os)
        return " ".join(spec)

    @property
    def tag_labels(self) -> tuple[str, ...]:
        """Tags as ``key=value`` (or ``key`` alone when the value is empty), sorted by key."""
        return tuple(f"{k}={v}" if v else k for k, v in sorted(self.tags.items()))

    def render(self) -> str:
        """One compact line for the model; empty fields are left out."""
        head = f"{self.name or '(no name)'} [{self.instance_id}]" if self.name != self.instance_id else self.name
        where = f"{provider_label(self.provider)}"
        if self.shown_account:
            where += f" account={self.shown_account}"
        where += f" {self.location}"
        parts = [head, where, self.status]
        if self.spec:
            parts.append(self.spec)
        if self.private_ips:
            parts.append("private " + ",".join(self.private_ips))
        if self.public_ips:
            parts.append("public " + ",".join(self.public_ips))
        if self.vpc:
            parts.append(f"vpc {self.vpc}")
        if self.tags:
            parts.append("tags " + ",".join(self.tag_labels))
        if self.created_at:
            parts.append(f"created {self.created_at}")
        if self.expires_at:
            parts.append(f"expires {self.expires_at}")
        return " | ".join(parts)

    def matches_tag(self, tag: str) -> bool:
        """``key=value`` matches that pair; ``key`` alone matches any value; case-insensitive."""
        key, sep, value = tag.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        for k, v in self.tags.items():
            if k.lower() == key and (not sep or v.lower() == value):
                return True
        return False


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}" if value != int(value) else str(int(value))


@dataclass(frozen=True)
class ProviderFailure:
    """One provider (account, region) that could not answer."""

    provider: str
    """Provider key."""
    reason: str
    """Short, secret-free reason ("permission denied", "timed out after 10 s")."""
    region: str = ""
    """Region that failed, if the failure is regional."""
    account: str = ""
    """Account label, shown when it is not the default one."""

    def describe(self) -> str:
        """"Tencent Cloud: permission denied in ap-guangzhou (account prod)"."""
        text = f"{provider_label(self.provider)}: {self.reason}"
        if self.region:
            text += f" in {self.region}"
        if self.account and self.account != "default":
            text += f" (account {self.account})"
        return text


@dataclass(frozen=True)
class SearchResult:
    """What a lookup found, plus which providers could not answer."""

    query: str
    """What was asked, in words ("ip 10.0.1.100")."""
    servers: tuple[Server, ...] = ()
    """Matches, deduplicated, in provider order."""
    failures: tuple[ProviderFailure, ...] = ()
    """Providers / regions that failed; the others still answered."""
    searched: tuple[str, ...] = ()
    """Provider keys that were asked."""
    total: int | None = None
    """Matches before ``limit`` cut the list (``None``: same as ``len(servers)``)."""
    notes: tuple[str, ...] = ()
    """Extra remarks for the model (unknown region, filter ignored)."""
    answered: tuple[str, ...] = ()
    """Provider keys where at least one account/region answered (even with no match)."""
    more: bool = False
    """A provider stopped paging early: more servers match than ``total`` counts."""
    scoped: bool = False
    """The asker's resource scopes narrowed the search: an empty result says only that nothing *they may see* matched."""
    sources: tuple[Source, ...] = ()
    """One per (provider, account, region) that answered: the provenance of :attr:`servers` (and of "none found")."""

    @staticmethod
    def merge(query: str, parts: Iterable[SearchResult], *, limit: int | None = None) -> SearchResult:
        """Combine per-provider results, dropping duplicate servers and applying ``limit``."""
        seen: set[tuple[str, str, str]] = set()
        servers: list[Server] = []
        failures: list[ProviderFailure] = []
        searched: list[str] = []
        notes: list[str] = []
        answered: list[str] = []
        sources: list[Source] = []
        more = False
        scoped = False
        hidden = 0
        for part in parts:
            more = more or part.more
            scoped = scoped or part.scoped
            hidden += max(0, part.found - len(part.servers))
            for server in part.servers:
                if server.key not in seen:
                    seen.add(server.key)
                    servers.append(server)
            failures.extend(f for f in part.failures if f not in failures)
            searched.extend(p for p in part.searched if p not in searched)
            notes.extend(n for n in part.notes if n not in notes)
            answered.extend(p for p in part.answered if p not in answered)
            sources.extend(part.sources)
        # Parts already cut to a limit still count what they left out.
        total = len(servers) + hidden
        if limit is not None and len(servers) > limit:
            servers = servers[:limit]
        return SearchResult(
            query, tuple(servers), tuple(failures), tuple(searched), total, tuple(notes), tuple(answered), more, scoped,
            sources=merge_sources(sources),
        )

    @property
    def found(self) -> int:
        """How many matched (before the limit)."""
        return self.total if self.total is not None else len(self.servers)

    def summary(self) -> str:
        """The card's status line: "1 instance found: prod-db-01", "5 instances found", "no instance found; AWS failed".

        A few matches are named, so the card itself says which host an address is.
        """
        n = self.found
        none = "no instance matches that you may see" if self.scoped else "no instance found"
        text = none if n == 0 else f"{n}{'+' if self.more else ''} instance{'s' if n != 1 else ''} found"
        if 0 < n <= SUMMARY_NAMES and len(self.servers) == n:
            text += ": " + ", ".join(server.name or server.instance_id for server in self.servers)
        if self.failures:
            failed = sorted({provider_label(f.provider) for f in self.failures})
            text += f"; {', '.join(failed)} failed"
        return text

    @property
    def searched_labels(self) -> str:
        """The providers asked, by their human names ("Static inventory, AWS"; "no provider")."""
        return ", ".join(provider_label(p) for p in self.searched) or "no provider"

    def render(self) -> str:
        """The text the model reads."""
        lines = []
        where = self.searched_labels
        n = self.found
        if n == 0 and self.scoped:
            # Say nothing of what exists outside the asker's scopes.
            lines.append(f"No instance matches that you may see: {self.query} (searched: {where}, within your access).")
        elif n == 0:
            lines.append(f"No instance matches {self.query} (searched: {where}).")
        else:
            shown = len(self.servers)
            rest = f", showing the first {shown}; narrow the filters to see the rest" if shown < n else ""
            count = f"at least {n}" if self.more else str(n)
            verb = "s match" if n != 1 or self.more else " matches"
            lines.append(f"{count} instance{verb} {self.query} (searched: {where}{rest}):")
            lines.extend(f"- {s.render()}" for s in self.servers)
        if self.failures:
            lines.append("Could not search (results may be incomplete):")
            lines.extend(f"- {f.describe()}" for f in self.failures)
        lines.extend(self.notes)
        return "\n".join(lines)

    def to_data(self) -> dict[str, Any]:
        """The result as JSON-ready data, tagged ``kind: server_search`` (read back by :meth:`from_data`)."""
        return {"kind": SEARCH_RESULT_KIND, **_SEARCH_RESULT.dump_python(self, mode="json")}

    @staticmethod
    def from_data(data: Any) -> SearchResult | None:
        """The result that :meth:`to_data` made ``data`` from; ``None`` for any other data."""
        if not isinstance(data, Mapping) or data.get("kind") != SEARCH_RESULT_KIND:
            return None
        return _SEARCH_RESULT.validate_python({k: v for k, v in data.items() if k != "kind"})

    def to_tool_output(self) -> ToolOutput:
        """Normalize for the registry: the data, its rendering and the card line; a search where every provider failed is a tool error."""
        if not self.servers and self.failures and not self.answered:
            raise ToolError("; ".join(f.describe() for f in self.failures))
        return ToolOutput(content=self.render(), summary=self.summary(), data=self.to_data(), sources=self.sources)


def merge_sources(sources: Iterable[Source]) -> tuple[Source, ...]:
    """One source per (provider, account, region, API), in first-seen order; of two, the older copy.

    A tool that asks one place twice (``find_server``: by id and by name) used
    data as old as the older answer, so that one is its provenance.
    """
    kept: dict[tuple[str, str, str, str], Source] = {}
    for source in sources:
        key = (source.provider, source.account, source.region, source.api)
        known = kept.get(key)
        if known is None or source.fetched_at < known.fetched_at:
            kept[key] = source
    return tuple(kept.values())


SEARCH_RESULT_KIND = "server_search"
"""The ``kind`` of a :class:`SearchResult` in tool data."""

_SEARCH_RESULT = TypeAdapter(SearchResult)
