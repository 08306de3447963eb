"""Which estate tool calls the demo makes for an estate question, with only the tools the request offers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.demo.estate_questions import EstateAsk
from tools.demo.planning import PlannedCall, find_tool

__all__ = ["ESTATE_TOOLS", "estate_tool_name", "plan_estate_calls"]

ESTATE_TOOLS = ("find_resource", "list_resources", "trace", "exposed_ports", "resource_changes")
"""The estate tools the demo knows how to call and read."""


def estate_tool_name(name: str) -> str | None:
    """The estate tool ``name`` is (itself or a namespaced variant such as ``mcp_ops__trace``), else ``None``."""
    return next((tool for tool in ESTATE_TOOLS if name == tool or name.endswith((f"_{tool}", f".{tool}"))), None)


def _accepts(schema: Mapping[str, Any], param: str, value: Any) -> bool:
    """Whether the tool takes ``param`` and, when it lists the allowed values, ``value`` is one of them."""
    prop = (schema.get("properties") or {}).get(param)
    if prop is None:
        return False
    allowed = [v for option in (prop, *(prop.get("anyOf") or ())) for v in (option.get("enum") or ())]
    return not allowed or value in allowed


def plan_estate_calls(ask: EstateAsk, tools: Mapping[str, Mapping[str, Any]]) -> list[PlannedCall]:
    """The calls a careful model would make for ``ask``; empty when no offered tool answers it."""
    finder, lister = find_tool(tools, "find_resource"), find_tool(tools, "list_resources")
    if ask.shape == "changes":
        changes = find_tool(tools, "resource_changes")
        if changes is None:
            return []
        args: dict[str, Any] = {"resource": ask.subject}
        if ask.since and _accepts(tools[changes], "since", ask.since):
            args["since"] = ask.since
        return [(changes, args)]
    if ask.shape == "trace":
        tracer = find_tool(tools, "trace")
        if tracer is not None:
            args = {"target": ask.subject}
            if ask.port is not None and _accepts(tools[tracer], "port", ask.port):
                args["port"] = ask.port
            return [(tracer, args)]
        # without the walk, what owns the target is still the first thing to know
        return _find(finder, ask, tools)
    if ask.shape == "exposed":
        exposed = find_tool(tools, "exposed_ports")
        if exposed is not None:
            with_port = ask.port is not None and _accepts(tools[exposed], "port", ask.port)
            return [(exposed, {"port": ask.port} if with_port else {})]
        return _list(lister, "security_group", "", tools)
    if ask.shape == "list":
        return _list(lister, ask.kind, ask.state, tools)
    if ask.shape == "investigate":
        return _investigate(finder, find_tool(tools, "resource_changes"), ask)
    return _find(finder, ask, tools)


_INVESTIGATED = 3
"""Most hosts an investigation looks up in one round (the card has room for a few)."""


def _investigate(finder: str | None, changes: str | None, ask: EstateAsk) -> list[PlannedCall]:
    """What each host or resource is and what changed it in the last day, all in one round."""
    if finder is None:
        return []
    subjects = ask.subjects[:_INVESTIGATED]
    calls: list[PlannedCall] = [(finder, {"query": s}) for s in subjects]
    if changes is not None:
        calls += [(changes, {"resource": s, "since": "24h"}) for s in subjects]
    return calls


def _find(finder: str | None, ask: EstateAsk, tools: Mapping[str, Mapping[str, Any]]) -> list[PlannedCall]:
    if finder is None:
        return []
    args: dict[str, Any] = {"query": ask.subject}
    # a kind narrows a name fragment ("orders" → the cache); an address, id or name is whatever owns it
    if ask.kind and ask.fragment and _accepts(tools[finder], "kind", ask.kind):
        args["kind"] = ask.kind
    return [(finder, args)]


def _list(lister: str | None, kind: str, state: str, tools: Mapping[str, Mapping[str, Any]]) -> list[PlannedCall]:
    if lister is None or not _accepts(tools[lister], "kind", kind):
        return []
    args: dict[str, Any] = {"kind": kind}
    if state and _accepts(tools[lister], "state", state):
        args["state"] = state
    return [(lister, args)]
