"""The MCP door at ``/mcp`` of a running gateway, driven by the official ``mcp`` client over streamable HTTP.

One gateway process serves the whole module (:mod:`.door_gateway`): each key's
tools, an audited call with its provenance, a scoped role's out-of-scope
lookup, a call that needs an approver, a limit, and wrong keys.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import MCPError

from adapters.mcp.approval import APPROVAL_MARK
from botgateway.config import MemoryConfig
from botgateway.stores import AuditRecord, open_store
from tests.adapters.mcp.door_gateway import KEYS, DoorGateway, http_client, running_gateway
from tests.cli.cli_process import run_cli


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorGateway]:
    with running_gateway(tmp_path_factory.mktemp("mcp-door")) as running:
        yield running


async def listed(gateway: DoorGateway, key: str, *, mode: str = "auto") -> dict[str, types.Tool]:
    async with http_client(gateway, key, mode=mode) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


async def called(gateway: DoorGateway, key: str, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    async with http_client(gateway, key) as client:
        return await client.call_tool(tool, arguments)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def audit_record(gateway: DoorGateway, call_id: str) -> AuditRecord:
    """The audit record of the door's call ``call_id``, read from the gateway's store."""
    store = await open_store(MemoryConfig(store="sqlite", sqlite_path=str(gateway.folder / "data" / "state.db")))
    try:
        records = await store.audit_records(limit=1000)
    finally:
        await store.close()
    [record] = [r for r in records if r.turn_id == call_id]
    return record


async def test_each_key_is_listed_what_its_role_offers(gateway: DoorGateway) -> None:
    admin, viewer, scoped, nobody, legacy = await asyncio.gather(
        *(listed(gateway, KEYS[name]) for name in ("ops", "dash", "stg", "lost")),
        listed(gateway, KEYS["dash"], mode="legacy"))
    assert set(viewer) == {"find_server", "find_resource"} == set(legacy)  # 2025 and 2026 protocols alike
    assert set(scoped) == {"find_resource"}
    assert nobody == {}  # a key no role lists is listed nothing
    assert {"find_server", "find_resource", "list_servers", "trace", "resource_metrics"} <= set(admin)
    assert len(viewer) < len(admin)
    find_server = admin["find_server"]
    assert find_server.input_schema["type"] == "object" and "query" in find_server.input_schema["properties"]
    assert find_server.annotations is not None and find_server.annotations.read_only_hint is True
    # A tool that needs an approver is listed, marked so that the client's model knows it is refused here.
    assert (admin["list_servers"].description or "").startswith(APPROVAL_MARK)
    assert not (find_server.description or "").startswith(APPROVAL_MARK)


async def test_a_call_answers_with_its_provenance_and_is_audited(gateway: DoorGateway) -> None:
    result = await called(gateway, KEYS["dash"], "find_server", {"query": "10.0.1.100"})
    assert not result.is_error
    text = text_of(result)
    assert text.startswith('<tool_result tool="find_server"') and 'sources="static inventory' in text.lower()
    assert "prod-db-01" in text
    structured = result.structured_content
    assert isinstance(structured, dict) and structured["ok"] is True
    assert "prod-db-01" in json.dumps(structured["data"])
    assert [s["provider"] for s in structured["sources"]] == ["inventory"]
    assert structured["sources"][0]["fetched_at"] > 0

    # What an operator reads: `botgateway audit`, from the gateway's store.
    done = await asyncio.to_thread(run_cli, "audit", "--format", "jsonl", "--user", "api:dash",
                                   "-c", str(gateway.config_path), cwd=gateway.folder)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    [row] = [r for r in rows if r["turn_id"] == structured["call_id"]]
    assert (row["platform"], row["principal"], row["channel"], row["role"]) == ("mcp", "api:dash", "mcp:api:dash",
                                                                                "viewer")
    assert (row["tool"], row["outcome"], row["turn_outcome"]) == ("find_server", "ok", "done")
    assert json.loads(row["arguments"]) == {"query": "10.0.1.100"}
    record = await audit_record(gateway, structured["call_id"])
    assert record.extra["transport"] == "http"
    assert record.tool_calls[0]["sources"][0]["provider"] == "inventory"  # the provenance is audited too


async def test_a_scoped_role_finds_nothing_outside_its_scope(gateway: DoorGateway) -> None:
    outside = await called(gateway, KEYS["stg"], "find_resource", {"query": "prod-db-01"})
    inside = await called(gateway, KEYS["stg"], "find_resource", {"query": "stg-db-01"})
    unlisted = await called(gateway, KEYS["stg"], "find_server", {"query": "prod-db-01"})
    assert not outside.is_error and isinstance(outside.structured_content, dict)
    assert outside.structured_content["data"]["total"] == 0 and outside.structured_content["data"]["scoped"] is True
    assert "prod-db-01" not in json.dumps(outside.structured_content["data"]["resources"])
    assert "Nothing that you may see" in text_of(outside)
    # The same role finds what its scope shows: the scope narrowed the lookup, it did not break it.
    assert isinstance(inside.structured_content, dict) and inside.structured_content["data"]["total"] >= 1
    assert "stg-db-01" in text_of(inside)
    # A tool the role is not offered is refused, as a model's guessed call is.
    assert unlisted.is_error and "not offered" in text_of(unlisted) and "prod-db-01 |" not in text_of(unlisted)
    assert isinstance(unlisted.structured_content, dict)
    record = await audit_record(gateway, unlisted.structured_content["call_id"])
    assert (record.outcome, record.principal, record.tool_calls[0]["ok"]) == ("refused:not_offered", "api:stg", False)


async def test_calls_nobody_may_make_here_are_refused_and_audited(gateway: DoorGateway) -> None:
    needs_approver = await called(gateway, KEYS["ops"], "list_servers", {})
    no_role = await called(gateway, KEYS["lost"], "find_server", {"query": "10.0.1.100"})
    assert needs_approver.is_error
    assert "needs an approver's decision" in text_of(needs_approver) and "Ask for it in chat" in text_of(needs_approver)
    assert "prod-db-01" not in text_of(needs_approver)  # it never ran
    assert no_role.is_error and "no role" in text_of(no_role) and "api:lost" in text_of(no_role)
    assert isinstance(needs_approver.structured_content, dict) and isinstance(no_role.structured_content, dict)
    approval = await audit_record(gateway, needs_approver.structured_content["call_id"])
    assert approval.outcome == "refused:approval" and approval.role == "admin"
    assert approval.tool_calls[0]["approval"] == "refused: nobody can approve through MCP"
    refused = await audit_record(gateway, no_role.structured_content["call_id"])
    assert (refused.outcome, refused.principal) == ("refused:no_role", "api:lost")


async def test_an_asker_over_its_limit_is_refused(gateway: DoorGateway) -> None:
    # One call a minute: of three calls, two fall in one minute whatever the clock says, so one is refused.
    results = [await called(gateway, KEYS["busy"], "find_server", {"query": "10.0.1.100"}) for _ in range(3)]
    refused = [result for result in results if result.is_error]
    assert refused and not results[0].is_error
    assert "questions this minute" in text_of(refused[0])
    assert isinstance(refused[0].structured_content, dict)
    record = await audit_record(gateway, refused[0].structured_content["call_id"])
    assert record.outcome == "limit:turns_per_minute"


async def test_wrong_keys_get_401_and_only_post_is_served(gateway: DoorGateway) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.mcp_url, json=body, headers=headers) as response:
            assert response.status == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
        wrong = {**headers, "Authorization": "Bearer wrong-key-0123456789abcdef"}
        async with http.post(gateway.mcp_url, json=body, headers=wrong) as response:
            assert response.status == 401 and "not valid" in await response.text()
        right = {**headers, "Authorization": f"Bearer {KEYS['ops']}"}
        async with http.get(gateway.mcp_url, headers=right) as response:
            assert response.status == 405 and response.headers["Allow"] == "POST"
    with pytest.raises(BaseExceptionGroup) as failed:  # the official client gives up on the 401
        async with http_client(gateway, "wrong-key-0123456789abcdef") as client:
            await client.list_tools()
    assert failed.group_contains(MCPError)

