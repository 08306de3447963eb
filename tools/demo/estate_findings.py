"""What this question's estate tool calls found, read back from the data behind each tool message.

The estate tools hand their structured results to the registry as
``ToolOutput.data`` (:mod:`tools.toolsets.results`: kinds ``resource_search``,
``resource_trace`` and ``resource_changes``). The demo recalls each tool
message's outcome through :class:`~botgateway.tooling.RecentOutcomes` and
validates that data back into the estate's own records
(:class:`~tools.estate.resource.Resource`, :class:`~tools.estate.resource.Change`);
it never parses a tool's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from botgateway.tooling import RecentOutcomes, tool_result_body
from tools.demo.estate_planning import estate_tool_name
from tools.demo.question import message_text, since_last_question
from tools.estate.resource import Change, Resource
from tools.toolsets.results import CHANGES_KIND, FIND_KIND, TRACE_KIND

__all__ = ["Changed", "EstateFindings", "Found", "TraceHop", "Traced", "read_estate_findings"]

_RESOURCES = TypeAdapter(tuple[Resource, ...])
_RESOURCE = TypeAdapter(Resource)
_CHANGES = TypeAdapter(tuple[Change, ...])


@dataclass(frozen=True)
class Found:
    """What a ``find_resource``, ``list_resources`` or ``exposed_ports`` call found."""

    resources: tuple[Resource, ...]
    """Best first (as listed, for a list)."""
    why: tuple[str, ...]
    """Why each matched, in the tool's words ("private IP 10.0.3.7", "open: …; used by …")."""
    total: int
    """How many matched before the tool's limit."""
    cut: tuple[str, ...] = ()
    """Listings cut at their bound."""
    scoped: bool = False
    """The asker sees only part of the estate."""
    query: str = ""
    """What a ``find_resource`` call asked (empty for lists)."""


@dataclass(frozen=True)
class TraceHop:
    """One step of a traced chain."""

    depth: int
    """How far from the start."""
    via: str
    """How it was reached ("start", "CNAME api-lb.lb.example.net", "listener", "backend :8443 unhealthy")."""
    label: str
    """What it shows without a resource ("https:443", an external name)."""
    problem: str
    """Where the path breaks here; empty when it does not."""
    flags: tuple[str, ...]
    """Warnings ("open to the internet: …", "shown above")."""
    resource: Resource | None
    """What was reached, when the estate holds it."""


@dataclass(frozen=True)
class Traced:
    """What a ``trace`` call walked."""

    target: str
    """Where the walk started."""
    port: int | None
    """The port asked about."""
    hops: tuple[TraceHop, ...]
    """The chain in reading order."""
    reach: str
    """The verdict on reachability from 0.0.0.0/0, when one."""
    problems: tuple[str, ...]
    """Every break, once each."""


@dataclass(frozen=True)
class Changed:
    """What a ``resource_changes`` call read from the trails."""

    subject: str
    """The resource asked about."""
    since: str
    """Start of the window, ISO 8601."""
    changes: tuple[Change, ...]
    """Newest first."""
    resource: Resource | None
    """The resource the query resolved to, when it did."""


@dataclass(frozen=True)
class EstateFindings:
    """The estate results of the current question, together."""

    called: bool = False
    """An estate tool was called for this question (even if every call failed)."""
    results: tuple[Found | Traced | Changed, ...] = ()
    """Each readable result, in call order."""
    failures: tuple[str, ...] = ()
    """Calls that failed and sources not reached, in their own words, once each."""
    raw: tuple[str, ...] = ()
    """Results without data the demo can read (quoted as they are)."""


def read_estate_findings(messages: Sequence[Mapping[str, Any]], outcomes: RecentOutcomes | None) -> EstateFindings:
    """Read the estate tool messages that follow the last user message, through the data behind them."""
    since_question = since_last_question(messages)
    names = {call.get("id"): (call.get("function") or {}).get("name", "")
             for message in since_question for call in message.get("tool_calls") or ()}
    called = False
    results: list[Found | Traced | Changed] = []
    failures: list[str] = []
    raw: list[str] = []
    for message in since_question:
        if message.get("role") != "tool" or estate_tool_name(str(names.get(message.get("tool_call_id"), ""))) is None:
            continue
        called = True
        outcome = outcomes.recall(message_text(message)) if outcomes is not None else None
        if outcome is not None and not outcome.ok:
            failures.append(outcome.error)
            continue
        data = outcome.data if outcome is not None else None
        result = _read(data) if isinstance(data, Mapping) else None
        if result is None:
            raw.append(tool_result_body(message_text(message)).strip())  # the result itself, not its delimiters
            continue
        results.append(result)
        failures.extend(str(f) for f in data.get("failures") or ())  # type: ignore[union-attr]
    return EstateFindings(
        called=called, results=tuple(results), failures=tuple(dict.fromkeys(failures)), raw=tuple(raw)
    )


def _hop(h: Mapping[str, Any]) -> TraceHop:
    resource = _RESOURCE.validate_python(h["resource"]) if h.get("resource") else None
    return TraceHop(int(h.get("depth") or 0), str(h.get("via") or ""), str(h.get("label") or ""),
                    str(h.get("problem") or ""), tuple(h.get("flags") or ()), resource)


def _read(data: Mapping[str, Any]) -> Found | Traced | Changed | None:
    """One result from its data; ``None`` when the data is not an estate result the demo knows."""
    try:
        if data.get("kind") == FIND_KIND:
            return Found(_RESOURCES.validate_python(data.get("resources") or ()), tuple(data.get("why") or ()),
                         int(data.get("total") or 0), tuple(data.get("cut") or ()), bool(data.get("scoped")),
                         str(data.get("query") or "").strip("'\""))
        if data.get("kind") == TRACE_KIND:
            hops = tuple(_hop(h) for h in data.get("hops") or ())
            return Traced(str(data.get("target") or ""), data.get("port"), hops, str(data.get("reach") or ""),
                          tuple(dict.fromkeys(data.get("problems") or ())))
        if data.get("kind") == CHANGES_KIND:
            resource = _RESOURCE.validate_python(data["resource"]) if data.get("resource") else None
            return Changed(str(data.get("subject") or ""), str(data.get("since") or ""),
                           _CHANGES.validate_python(data.get("changes") or ()), resource)
    except (ValidationError, TypeError, ValueError, KeyError):
        return None  # not the shape this demo knows: the answer says nothing rather than guess
    return None
