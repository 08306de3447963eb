"""The results the estate tools hand back: the model's rendering, the card's line, and the data behind them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from botgateway.tooling import Source, ToolError, ToolOutput
from tools.estate.fanout import EstateView, Failure
from tools.estate.matching import Match
from tools.estate.rendering import count_words, describe_failures, names, render_brief, render_resource
from tools.estate.resource import Change, Resource, kind_label
from tools.estate.trace import Walk
from tools.server_record import provider_label

__all__ = ["CHANGES_KIND", "FIND_KIND", "TRACE_KIND", "ChangesResult", "FindResult", "TraceResult", "resource_data"]

FIND_KIND = "resource_search"
"""The ``kind`` of a :class:`FindResult` (and of ``list_resources``) in tool data."""
TRACE_KIND = "resource_trace"
"""The ``kind`` of a :class:`TraceResult` in tool data."""
CHANGES_KIND = "resource_changes"
"""The ``kind`` of a :class:`ChangesResult` in tool data."""

_RESOURCES = TypeAdapter(tuple[Resource, ...])
_CHANGES = TypeAdapter(tuple[Change, ...])


def resource_data(resources: Sequence[Resource]) -> list[dict[str, Any]]:
    """Resources as JSON-ready data."""
    return list(_RESOURCES.dump_python(tuple(resources), mode="json"))


def _unreached(view_failures: Sequence[Failure], found: bool, answered: bool) -> None:
    """A lookup where every source failed is a tool error (nothing to say but why)."""
    if not found and view_failures and not answered:
        raise ToolError("; ".join(f.describe() for f in view_failures[:6]))


def _place(change: Change) -> str:
    where = "/".join(p for p in (change.account, change.region) if p)
    return f"{provider_label(change.provider)} {where}".strip()


def _failed_note(failures: Sequence[Failure]) -> str:
    if not failures:
        return ""
    return "; not reached: " + ", ".join(sorted({provider_label(f.provider) for f in failures}))


@dataclass(frozen=True)
class FindResult:
    """What a ``find_resource`` or ``list_resources`` call found."""

    query: str
    """What was asked, in words."""
    matches: tuple[Match, ...]
    """Best first."""
    total: int
    """How many matched before the limit."""
    view: EstateView
    """The fan-out behind it (failures, provenance, scope)."""
    searched: str
    """The kinds searched, in words."""

    def render(self) -> str:
        """The model's text."""
        if not self.matches:
            whose = " that you may see" if self.view.scoped else ""
            lines = [f"Nothing{whose} matches {self.query} (searched {self.searched})."]
        else:
            shown = len(self.matches)
            more = f", showing the first {shown}; narrow the query to see the rest" if shown < self.total else ""
            lines = [f"{self.total} match{'es' if self.total != 1 else ''} for {self.query}{more}:"]
            lines.extend(f"- {render_resource(m.resource)} (matched: {m.why})" for m in self.matches)
        return "\n".join(lines + describe_failures(self.view))

    def summary(self) -> str:
        """The card's line: "1 database found: prod-db-01"."""
        found = [m.resource for m in self.matches]
        if not found:
            text = "nothing found" if not self.view.scoped else "nothing found that you may see"
        elif len({r.kind for r in found}) == 1 and self.total == len(found):
            text = f"{count_words(self.total, found[0].kind)} found"
        else:
            text = f"{self.total} resource{'s' if self.total != 1 else ''} found"
        if 0 < self.total <= 3:
            text += ": " + names(found)
        return text + _failed_note(self.view.failures)

    def to_tool_output(self) -> ToolOutput:
        """For the registry."""
        _unreached(self.view.failures, bool(self.matches), bool(self.view.sources))
        data = {
            "kind": FIND_KIND, "query": self.query, "total": self.total,
            "resources": resource_data([m.resource for m in self.matches]),
            "why": [m.why for m in self.matches],
            "failures": [f.describe() for f in self.view.failures], "cut": list(self.view.cut), "scoped": self.view.scoped,
        }
        return ToolOutput(content=self.render(), summary=self.summary(), data=data, sources=self.view.sources)


@dataclass(frozen=True)
class TraceResult:
    """One walk, ready for the model and the card."""

    target: str
    """Where the walk started, as asked."""
    port: int | None
    """The port asked about, when one."""
    walk: Walk
    """The chain."""
    view: EstateView
    """The fan-out behind it."""

    def render(self) -> str:
        """The chain, indented by depth, each break marked ✗ and each open port ⚠."""
        lines = [f"Trace of {self.target}" + (f" (port {self.port})" if self.port else "") + ":"]
        for hop in self.walk.hops:
            if hop.resource is None:
                what = hop.label
            elif hop.resource.kind == "dns_record":
                what = f"{hop.resource.name} {hop.resource.details.get('type', '')} {hop.resource.details.get('value', '')}"
            elif "shown above" in hop.flags:
                what = f"{kind_label(hop.resource.kind)} {hop.resource.title} (shown above)"
            else:
                what = render_brief(hop.resource)
            line = "  " * hop.depth + ("" if hop.via == "start" else f"→ {hop.via}: ") + what
            if hop.problem:
                line += f"  ✗ {hop.problem}"
            for flag in (f for f in hop.flags if f != "shown above"):
                line += f"  ⚠ {flag}"
            lines.append(line)
        if self.walk.cut:
            lines.append("(walk cut: too many hops; trace a narrower target)")
        if self.walk.reach:
            lines.append(f"Reachability from 0.0.0.0/0: {self.walk.reach}")
        if self.walk.problems:
            lines.append("Broken: " + "; ".join(dict.fromkeys(self.walk.problems)))
        else:
            lines.append("No break found on the path.")
        return "\n".join(lines + describe_failures(self.view))

    def summary(self) -> str:
        """The chain in one card line: "api.example.com → api-lb → prod-web-01, prod-web-02 ✗ → web-servers ⚠22"."""
        return _chain_line(self.target, self.walk) + _failed_note(self.view.failures)

    def to_tool_output(self) -> ToolOutput:
        """For the registry."""
        _unreached(self.view.failures, bool(self.view.resources), bool(self.view.sources))
        data = {
            "kind": TRACE_KIND, "target": self.target, "port": self.port,
            "hops": [
                {"depth": h.depth, "via": h.via, "label": h.label, "problem": h.problem, "flags": list(h.flags),
                 "resource": resource_data([h.resource])[0] if h.resource is not None else None}
                for h in self.walk.hops
            ],
            "reach": self.walk.reach, "problems": list(self.walk.problems),
            "failures": [f.describe() for f in self.view.failures],
        }
        return ToolOutput(content=self.render(), summary=self.summary(), data=data, sources=self.view.sources)


_LAYERS = {"ip": 0, "load_balancer": 0, "ingress": 0, "bucket": 0, "k8s_service": 1, "workload": 1, "security_group": 3}
"""Where a kind sits in the card's one-line chain: entry, service, backends (every other kind: 2), groups."""


def _chain_line(target: str, walk: Walk) -> str:
    """Start → entry → backends (✗ where broken) → groups (⚠ ports open to the internet), then the breaks."""
    layers: list[list[str]] = [[], [], [], []]
    for hop in walk.hops:
        resource = hop.resource
        if resource is None or resource.kind in ("dns_record", "k8s_node") or "shown above" in hop.flags:
            continue
        name = resource.name or resource.id
        if resource.kind == "security_group":
            ports = sorted({f.split("— ", 1)[1].split(" ", 1)[0] for f in hop.flags if "— " in f})
            name += f" ⚠{','.join(ports)}" if ports else ""
        elif hop.problem:
            name += " ✗"
        layer = layers[_LAYERS.get(resource.kind, 2)]
        if name not in layer:
            layer.append(name)
    parts = [target] + [", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "") for names in layers if names]
    problems = list(dict.fromkeys(walk.problems))
    tail = f" · {len(problems)} break{'s' if len(problems) != 1 else ''}" if problems else " · no break"
    return " → ".join(dict.fromkeys(parts)) + tail


@dataclass(frozen=True)
class ChangesResult:
    """What the audit trails said about one resource."""

    subject: str
    """The resource asked about, in words."""
    changes: tuple[Change, ...]
    """Newest first."""
    since: str
    """The start of the window, ISO 8601."""
    failures: tuple[Failure, ...]
    """Trails that could not be read."""
    sources: tuple[Source, ...]
    """Trails that answered."""
    resolved: Resource | None = None
    """The resource the query resolved to, when it did."""

    def render(self) -> str:
        """The model's text."""
        head = self.resolved.title if self.resolved is not None else self.subject
        if not self.changes:
            lines = [f"No recorded change of {head} since {self.since}."]
        else:
            lines = [f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''} of {head} since {self.since}, newest first:"]
            lines.extend(f"- {c.render()} [{_place(c)}]" for c in self.changes)
        if self.failures:
            lines.append("Trails not read (results may be incomplete):")
            lines.extend(f"- {f.describe()}" for f in self.failures)
        return "\n".join(lines)

    def summary(self) -> str:
        """"StopDBInstance by alice, 2026-11-30T02:14:09Z"."""
        if not self.changes:
            return "no change recorded" + _failed_note(self.failures)
        last = self.changes[0]
        text = f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''}; last {last.action} by {last.principal or 'unknown'}"
        return text + _failed_note(self.failures)

    def to_tool_output(self) -> ToolOutput:
        """For the registry."""
        _unreached(self.failures, bool(self.changes), bool(self.sources))
        data: Mapping[str, Any] = {
            "kind": CHANGES_KIND, "subject": self.subject, "since": self.since,
            "changes": list(_CHANGES.dump_python(self.changes, mode="json")),
            "resource": resource_data([self.resolved])[0] if self.resolved is not None else None,
            "failures": [f.describe() for f in self.failures],
        }
        return ToolOutput(content=self.render(), summary=self.summary(), data=dict(data), sources=self.sources)
