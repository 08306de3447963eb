"""Which tool calls the demo makes: the ones a careful model would, with the tools it is offered."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from tools.demo.question import Lookup

__all__ = ["IP_LOOKUPS", "PlannedCall", "find_tool", "offered_tools", "plan_tool_calls", "widen_search"]

IP_LOOKUPS = ("search_ecs_by_ip", "search_cvm_by_ip", "search_ec2_by_ip")
"""Per-provider IP lookup tools, in the order the demo prefers them."""

_BY_IP = re.compile(r"(?:^|_)search_\w+_by_ip$")

PlannedCall: TypeAlias = tuple[str, dict[str, Any]]
"""``(tool name, arguments)`` of one call the demo makes."""


def offered_tools(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The request's tools by name → their JSON schema."""
    tools: dict[str, Mapping[str, Any]] = {}
    for spec in body.get("tools") or ():
        function = spec.get("function") or {}
        if function.get("name"):
            tools[function["name"]] = function.get("parameters") or {}
    return tools


def find_tool(tools: Mapping[str, Any], name: str) -> str | None:
    """``name`` itself, or a namespaced variant (``mcp_ops__find_server``)."""
    if name in tools:
        return name
    return next((t for t in tools if t.endswith((f"_{name}", f".{name}"))), None)


def _first_param(schema: Mapping[str, Any], preferred: Sequence[str]) -> str:
    props = schema.get("properties") or {}
    for name in preferred:
        if name in props:
            return name
    required = schema.get("required") or []
    if required:
        return required[0]
    return next(iter(props), preferred[0])


def plan_tool_calls(lookup: Lookup, tools: Mapping[str, Mapping[str, Any]]) -> list[PlannedCall]:
    """The calls a careful model would make for ``lookup`` with these ``tools``."""
    calls: list[PlannedCall] = []
    by_ip = [name for want in IP_LOOKUPS if (name := find_tool(tools, want))]
    by_ip += [name for name in tools if _BY_IP.search(name) and name not in by_ip]
    finder = find_tool(tools, "find_server")
    lister = find_tool(tools, "list_servers")
    for ip in lookup.ips:
        if len(by_ip) >= 2 or (by_ip and not finder):
            # two providers configured: ask each in parallel, as a real model would
            for name in by_ip:
                calls.append((name, {_first_param(tools[name], ("ip",)): ip}))
        elif finder:
            calls.append((finder, {_first_param(tools[finder], ("query",)): ip}))
    for query in lookup.instance_ids + lookup.hosts:
        if finder:
            calls.append((finder, {_first_param(tools[finder], ("query",)): query}))
    if not calls and lookup.wants_list and lister:
        args: dict[str, Any] = {}
        props = tools[lister].get("properties") or {}
        if lookup.list_status and "status" in props:
            args["status"] = lookup.list_status
        if "limit" in props:
            args["limit"] = 20
        calls.append((lister, args))
    return calls


def widen_search(
    lookup: Lookup, tools: Mapping[str, Mapping[str, Any]], since_question: Sequence[Mapping[str, Any]]
) -> PlannedCall | None:
    """``find_server`` for the question's first query, unless the question has nothing to look up or it was already called.

    The responder asks this when the per-provider lookups found no server:
    ``find_server`` also covers sources without an address lookup.
    """
    finder = find_tool(tools, "find_server")
    if finder is None or not lookup.queries:
        return None
    called = {(call.get("function") or {}).get("name") for message in since_question for call in message.get("tool_calls") or ()}
    if finder in called:
        return None
    return finder, {_first_param(tools[finder], ("query",)): lookup.queries[0]}
