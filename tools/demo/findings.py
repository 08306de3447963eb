"""What this question's tool calls found, read from the data behind each tool message.

The demo is handed the registry's :class:`~botgateway.tooling.RecentOutcomes`
and looks each tool message up by its text: a server search gives its
:class:`~tools.server_record.SearchResult` back, a failed call its reason. A result
with no data (an MCP tool, a tool returning plain text) is quoted as it is;
nothing here parses a tool's text. A tool message holds the result inside its
provenance delimiters (:mod:`botgateway.tooling.provenance`); the registry's
recall takes that text as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botgateway.tooling import RecentOutcomes, tool_result_body
from tools.demo.question import message_text, since_last_question
from tools.server_record import SearchResult, Server, provider_label

__all__ = ["Findings", "HostFacts", "read_findings"]


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """One server, as the demo's answer shows it."""

    name: str
    """Host name."""
    instance_id: str = ""
    """Instance id, when different from the name."""
    where: str = ""
    """Provider (and account), region/zone: "Static inventory (on-prem), idc-shanghai/A03"."""
    status: str = ""
    """running, stopped…"""
    spec: str = ""
    """Type, CPU/memory, OS."""
    private_ips: str = ""
    """Private addresses, comma-separated."""
    public_ips: str = ""
    """Public addresses, comma-separated."""
    vpc: str = ""
    """Network."""
    tags: str = ""
    """Tags, ``key=value`` joined by ", "."""
    created: str = ""
    """Creation date, when known."""
    expires: str = ""
    """Expiry date, when the server expires."""

    @classmethod
    def of(cls, server: Server) -> HostFacts:
        """The facts of ``server`` (a nameless server is "(no name)")."""
        named = server.name != server.instance_id
        account = f" ({server.shown_account})" if server.shown_account else ""
        return cls(
            name=(server.name or "(no name)") if named else server.name,
            instance_id=server.instance_id if named else "",
            where=f"{provider_label(server.provider)}{account}, {server.location}",
            status=server.status,
            spec=server.spec,
            private_ips=",".join(server.private_ips),
            public_ips=",".join(server.public_ips),
            vpc=server.vpc,
            tags=", ".join(server.tag_labels),
            created=server.created_at,
            expires=server.expires_at,
        )


@dataclass(frozen=True, kw_only=True)
class Findings:
    """What the tool results of the current question say, together."""

    hosts: tuple[HostFacts, ...] = ()
    """Every server found, deduplicated by name and id, in the order found."""
    not_found: tuple[str, ...] = ()
    """Searches that found nothing, by what they searched ("searched: AWS")."""
    failures: tuple[str, ...] = ()
    """Tools or providers that failed, in their own words."""
    raw: tuple[str, ...] = ()
    """Results without data the demo can read (quoted as they are)."""


def read_findings(messages: Sequence[Mapping[str, Any]], outcomes: RecentOutcomes | None) -> Findings:
    """Read the tool messages that follow the last user message, through the data behind them."""
    hosts: dict[tuple[str, str], HostFacts] = {}
    not_found: list[str] = []
    failures: list[str] = []
    raw: list[str] = []
    for message in since_last_question(messages):
        if message.get("role") != "tool":
            continue
        content = message_text(message)
        outcome = outcomes.recall(content) if outcomes is not None else None
        if outcome is not None and not outcome.ok:
            failures.append(outcome.error)
            continue
        result = SearchResult.from_data(outcome.data) if outcome is not None else None
        if result is None:
            raw.append(tool_result_body(content).strip())  # the result itself, not its delimiters
            continue
        for server in result.servers:
            facts = HostFacts.of(server)
            hosts.setdefault((facts.name, facts.instance_id), facts)
        if result.found == 0:
            not_found.append(f"searched: {result.searched_labels}")
        failures.extend(f.describe() for f in result.failures)
    return Findings(hosts=tuple(hosts.values()), not_found=tuple(not_found), failures=tuple(failures), raw=tuple(raw))
