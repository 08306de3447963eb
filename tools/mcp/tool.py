"""An MCP server's tool as one of ours: its model-facing name, its filter, its result as text and its provenance."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botgateway.config import McpServerConfig
from botgateway.tooling import Source, ToolContext, ToolError, ToolOutput

if TYPE_CHECKING:
    from tools.mcp.connection import McpConnection

__all__ = ["NAME_LIMIT", "SEPARATOR", "McpTool", "allowed", "mcp_source", "namespaced_name", "to_tool_output"]

NAME_LIMIT = 64
"""Longest tool name the model APIs accept."""
SEPARATOR = "__"
"""Between the server's name and the tool's name."""
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def namespaced_name(server: str, tool: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """``server__tool`` made of ``[a-zA-Z0-9_-]``, at most 64 characters, not in ``taken``.

    Sanitizing or shortening could make two names collide; a short hash of
    the original name keeps them apart.
    """
    base = f"{server}{SEPARATOR}{_INVALID.sub('_', tool)}"
    if len(base) <= NAME_LIMIT and base not in taken:
        return base
    digest = hashlib.sha1(tool.encode()).hexdigest()[:8]
    return f"{base[: NAME_LIMIT - len(digest) - 1]}_{digest}"


def allowed(tool: str, config: McpServerConfig) -> bool:
    """Whether the allow/deny lists (exact names or shell patterns) let ``tool`` through."""
    if config.allow and not any(fnmatch.fnmatchcase(tool, p) for p in config.allow):
        return False
    return not any(fnmatch.fnmatchcase(tool, p) for p in config.deny)


def to_tool_output(result: Any) -> ToolOutput:
    """A ``CallToolResult`` as text for the model; ``isError`` becomes a :class:`ToolError`."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[binary resource: {block.resource.uri}]")
    text = "\n".join(parts).strip()
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "done (no output)")
    return ToolOutput(content=text or "(no output)", summary=first if len(first) <= 100 else first[:99] + "…")


def mcp_source(server: str, tool: str, fetched_at: float) -> Source:
    """The provenance of an answer of ``server``'s ``tool`` (its own name, not the namespaced one) at ``fetched_at``."""
    return Source(provider=f"mcp:{server}", label=f"MCP {server}", api=tool, fetched_at=fetched_at)


class McpTool:
    """One MCP server tool, as a :class:`~botgateway.tooling.Tool`."""

    def __init__(self, connection: McpConnection, definition: Any, name: str) -> None:
        self.connection = connection
        self.remote_name: str = definition.name
        self.name = name
        description = definition.description or getattr(definition, "title", None) or definition.name
        self.description = f"[MCP server {connection.name}] {description}"
        schema = dict(definition.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters: Mapping[str, Any] = schema
        self.timeout_s: float | None = connection.config.timeout_s
        annotations = getattr(definition, "annotations", None)
        self.needs_approval = bool(
            annotations is not None and annotations.destructive_hint is True and annotations.read_only_hint is not True
        )
        """The server annotates the tool destructive and not read-only: every call waits for an approver."""
        self.read_only = bool(annotations is not None and annotations.read_only_hint is True)
        """The server annotates the tool read-only (``readOnlyHint``): an unattended turn may offer it."""

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the remote tool; its answer's provenance is the server, the tool, and now (we keep no cache)."""
        output = await self.connection.call(self.remote_name, arguments)
        return replace(output, sources=(mcp_source(self.connection.name, self.remote_name, time.time()),))
