"""``botgateway mcp serve --stdio`` as an MCP client starts it: the official ``mcp`` client over stdio.

The process serves as the ``--as`` principal (a viewer's key here; by default
the terminal's user), under the same policy, and writes its calls to the same
audit trail as the HTTP door.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import mcp_types as types
import pytest
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from botgateway.cli.mcp_door import stdio_principal
from botgateway.config import MemoryConfig
from botgateway.stores import open_store
from botgateway.tooling import local_user
from tests.adapters.mcp.door_gateway import clean_env, door_config
from tests.cli.cli_process import run_cli
from tests.ports import closed_port


def write_config(folder: Path) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(door_config(folder, closed_port())))  # stdio serves no HTTP
    return path


@contextlib.asynccontextmanager
async def stdio_door(folder: Path, *args: str) -> AsyncIterator[Client]:
    """The official client, having started ``botgateway mcp serve --stdio ARGS…`` in ``folder``."""
    command = ["-m", "botgateway.cli", "mcp", "serve", "--stdio", "-c", str(write_config(folder)), *args]
    params = StdioServerParameters(command=sys.executable, args=command, env=clean_env(), cwd=folder)
    with (folder / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


async def test_stdio_serves_as_its_principal_and_audits(tmp_path: Path) -> None:
    async with stdio_door(tmp_path, "--as", "api:dash") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("find_server", {"query": "10.0.1.100"})
        refused = await client.call_tool("list_servers", {})
    assert names == {"find_server", "find_resource"}  # the viewer's tools, as over HTTP
    assert not result.is_error and isinstance(result.structured_content, dict)
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    assert "prod-db-01" in text and 'sources="' in text
    assert refused.is_error  # not offered to the viewer
    store = await open_store(MemoryConfig(store="sqlite", sqlite_path=str(tmp_path / "data" / "state.db")))
    try:
        records = {record.turn_id: record for record in await store.audit_records(limit=100)}
    finally:
        await store.close()
    record = records[result.structured_content["call_id"]]
    assert (record.platform, record.principal, record.outcome) == ("mcp", "api:dash", "done")
    assert record.extra["transport"] == "stdio" and record.tool_calls[0]["name"] == "find_server"


def test_stdio_serves_the_terminal_user_unless_told_otherwise() -> None:
    # access.local_admin: the terminal's user holds the config, and has every tool (as in `botgateway chat`).
    assert stdio_principal("").id == f"local:{local_user()}"
    assert stdio_principal("slack:U0123@T0TEAM").id == "slack:U0123"
    with pytest.raises(ValueError, match="qualified principal"):
        stdio_principal("alice")


def test_serve_without_stdio_says_where_http_is(tmp_path: Path) -> None:
    done = run_cli("mcp", "serve", "-c", str(write_config(tmp_path)), cwd=tmp_path)
    assert done.returncode == 2 and "/mcp" in done.stderr and "--stdio" in done.stderr
    assert done.stdout == ""
