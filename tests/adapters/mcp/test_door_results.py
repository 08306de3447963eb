"""What a call answers with, through the official client on the door's server in-process: text with its
provenance, the data as structured content (left out past its cap), each chart as a PNG image, and the audit."""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from adapters.mcp import CallAudit, DoorGrants, McpDoor
from adapters.mcp.results import MAX_DATA_CHARS
from adapters.mcp.server import build_server
from botgateway.access import PrincipalLimits, limits_from_config
from botgateway.artifacts import Artifact
from botgateway.config import LimitsConfig, MemoryConfig
from botgateway.config.access import AccessConfig, RoleConfig
from botgateway.grant import Limits
from botgateway.principal import Principal
from botgateway.stores import Store, open_store
from botgateway.tooling import Source, ToolOutput, ToolRegistry, tool

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
FETCHED = time.time() - 5
CALLER = Principal.of("api", "ci", name="ci")


@tool(read_only=True)
def cpu(host: str) -> ToolOutput:
    """CPU of a host, with its chart.

    Args:
        host: The host.
    """
    chart = Artifact(ref="chart-0123456789abcdef", title=f"CPU of {host}", png=PNG, width=800, height=400,
                     alt="42 % now")
    source = Source(provider="prometheus", label="Prometheus", api="query_range", fetched_at=FETCHED)
    return ToolOutput(content=f"cpu of {host}: last 42 % (chart chart-0123456789abcdef)", summary="1 series",
                      data={"host": host, "last": 42.0}, sources=(source,), artifacts=(chart,))


@tool(read_only=True)
def everything() -> ToolOutput:
    """Far too much data."""
    return ToolOutput(content="many rows (see data)", summary="many rows", data={"rows": ["x" * 100] * 10_000})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(MemoryConfig(store="sqlite", sqlite_path=str(tmp_path / "state.db")))
    try:
        yield opened
    finally:
        await opened.close()


@contextlib.asynccontextmanager
async def door_client(store: Store) -> AsyncIterator[Client]:
    """The official client on the door's server, in this task (the SDK's scopes end in the task that began them)."""
    registry = ToolRegistry([cpu, everything])
    policy = AccessConfig(default_role="none", roles={"ops": RoleConfig(members=["api:ci"], tools=["*"])})
    grants = DoorGrants(policy, tool_names=lambda: registry.names, always_approve=registry.approval_required,
                        defaults=Limits())
    door = McpDoor(registry, grants, PrincipalLimits(store, limits_from_config(LimitsConfig())), CallAudit(store))
    try:
        async with Client(build_server(door, lambda ctx: CALLER, transport="stdio")) as connected:
            yield connected
    finally:
        registry.close()


async def test_a_chart_comes_as_an_image_beside_the_text_and_the_data(store: Store) -> None:
    async with door_client(store) as client:
        result = await client.call_tool("cpu", {"host": "web-1"})
    assert not result.is_error
    text, image = result.content
    assert isinstance(text, types.TextContent) and isinstance(image, types.ImageContent)
    assert text.text.startswith('<tool_result tool="cpu"') and 'sources="Prometheus (query_range) fetched' in text.text
    assert image.mime_type == "image/png" and base64.b64decode(image.data) == PNG
    structured: Any = result.structured_content
    assert structured["data"] == {"host": "web-1", "last": 42.0} and structured["summary"] == "1 series"
    assert structured["sources"] == [{"provider": "prometheus", "label": "Prometheus", "api": "query_range",
                                      "fetched_at": FETCHED}]
    assert [(c["title"], c["bytes"]) for c in structured["charts"]] == [("CPU of web-1", len(PNG))]
    [record] = await store.audit_records(limit=10)
    assert (record.turn_id, record.platform, record.principal, record.role) == (structured["call_id"], "mcp",
                                                                                 "api:ci", "ops")
    assert record.tool_calls[0]["arguments"] == {"host": "web-1"} and record.extra["transport"] == "stdio"


async def test_data_past_its_cap_is_left_out_and_the_text_still_comes(store: Store) -> None:
    async with door_client(store) as client:
        result = await client.call_tool("everything", {})
    structured: Any = result.structured_content
    assert not result.is_error and structured["data"] is None
    assert str(MAX_DATA_CHARS) in structured["data_omitted"]
    assert isinstance(result.content[0], types.TextContent) and "many rows" in result.content[0].text


async def test_bad_arguments_are_an_error_result_the_model_can_read(store: Store) -> None:
    async with door_client(store) as client:
        result = await client.call_tool("cpu", {"host": 5, "extra": True})
    structured: Any = result.structured_content
    assert result.is_error and structured["ok"] is False and structured["error"]
    [record] = await store.audit_records(limit=10)
    assert record.outcome == "failed:tool" and record.tool_calls[0]["ok"] is False
