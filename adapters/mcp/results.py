"""One call's answer as MCP content: the text the client's model reads, the data beside it, and the charts.

- Text: the result as a chat turn's model reads it, inside its
  ``<tool_result … source=… sources=…>`` element (:mod:`botgateway.tooling.provenance`):
  delimited as data, never instructions, and saying where its data came from
  and how old it is. A refusal or failure is the gateway's note, marked so.
- Structured content: the tool's data (``ToolOutput.data``), its one-line
  summary, its sources (provenance as fields) and its charts' descriptions, for
  programs; data past :data:`MAX_DATA_CHARS` is left out (the text still has it).
- Images: each chart the tool drew (issue 28), as a PNG.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from botgateway.artifacts import Artifact
from botgateway.tooling import Source, ToolOutcome

__all__ = ["MAX_DATA_CHARS", "CallAnswer", "call_result", "source_fields"]

MAX_DATA_CHARS = 512 * 1024
"""Largest tool data (as JSON) sent as structured content; more is left out, with a note saying so."""


@dataclass(frozen=True, kw_only=True)
class CallAnswer:
    """What the door answers one call with."""

    tool: str
    """The tool called."""
    call_id: str
    """The call's id (its audit record's turn id)."""
    outcome: ToolOutcome
    """How it went: the tool's result, or the refusal or failure."""
    text: str
    """What the client's model reads: the outcome inside its provenance element."""


def source_fields(source: Source) -> dict[str, Any]:
    """A source as data: its fields that say something."""
    return {key: value for key, value in dataclasses.asdict(source).items() if value not in ("", 0.0, False)}


def _json_ready(data: Any) -> tuple[Any, str]:
    """``data`` as plain JSON values (anything else as its text), or None and why it was left out."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    if len(text) > MAX_DATA_CHARS:
        return None, f"the data ({len(text)} characters as JSON) is larger than {MAX_DATA_CHARS}; the text has it"
    return json.loads(text), ""


def _image(artifact: Artifact) -> types.ImageContent:
    return types.ImageContent(data=base64.b64encode(artifact.png).decode("ascii"), mime_type="image/png")


def call_result(answer: CallAnswer) -> types.CallToolResult:
    """``answer`` as an MCP tool result (``isError`` when the call failed or was refused)."""
    outcome = answer.outcome
    data, omitted = _json_ready(outcome.data)
    structured: dict[str, Any] = {
        "tool": answer.tool, "call_id": answer.call_id, "ok": outcome.ok, "summary": outcome.summary, "data": data,
        "sources": [source_fields(source) for source in outcome.sources],
        "charts": [artifact.describe() for artifact in outcome.artifacts],
    }
    if omitted:
        structured["data_omitted"] = omitted
    if not outcome.ok:
        structured["error"] = outcome.error
    content: list[types.ContentBlock] = [types.TextContent(text=answer.text)]
    content += [_image(artifact) for artifact in outcome.artifacts]
    return types.CallToolResult(content=content, structured_content=structured, is_error=not outcome.ok)
