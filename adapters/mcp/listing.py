"""The tools one caller is listed: what its grant offers, as MCP tool definitions.

The same list the model of a chat turn is offered (:meth:`ToolRegistry.specs
<botgateway.tooling.ToolRegistry.specs>` under the caller's grant), so a viewer's
key lists fewer tools than an admin's. A tool that says it only looks things up
is annotated read-only; one whose calls need an approver is marked in its
description (:data:`~adapters.mcp.approval.APPROVAL_MARK`), since the door
refuses those calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types

from adapters.mcp.approval import APPROVAL_MARK
from botgateway.grant import Grant
from botgateway.tooling import ToolContext, ToolRegistry

__all__ = ["input_schema", "listed_tools"]


def input_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's JSON schema as MCP wants it: an object at the root."""
    schema = dict(parameters)
    schema.setdefault("type", "object")
    return schema


def listed_tools(tools: ToolRegistry, ctx: ToolContext, grant: Grant) -> list[types.Tool]:
    """The tools ``ctx``'s caller may use, in the registry's order, each as an MCP tool definition."""
    listed = []
    for spec in tools.specs(ctx):
        function = spec["function"]
        name = str(function["name"])
        description = str(function.get("description") or "")
        if name in grant.approval:
            description = APPROVAL_MARK + description
        read_only = getattr(tools.get(name), "read_only", False) is True
        listed.append(types.Tool(
            name=name, description=description, input_schema=input_schema(function.get("parameters") or {}),
            annotations=types.ToolAnnotations(read_only_hint=True) if read_only else None,
        ))
    return listed
