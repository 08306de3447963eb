"""The model is offered only the tools the asker's grant allows, and execution refuses any other."""

from __future__ import annotations

from typing import Any

from botgateway.access import Place, decide
from botgateway.config import parse_config
from botgateway.config.access import DEFAULT_ACCESS
from botgateway.events import TurnDone
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.principal import Principal
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolRegistry, tool
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


@tool
def find_server(query: str) -> str:
    """Find a server."""
    return f"found {query}"


@tool(name="k8s__delete_pod")
def delete_pod(name: str) -> str:
    """Delete a pod (an MCP tool: offered to no one by default)."""
    return f"deleted {name}"


def _viewer_ctx(registry: ToolRegistry) -> ToolContext:
    principal = Principal.of("slack", "U1", team="T1")
    grant = decide(DEFAULT_ACCESS, principal, Place(channel="slack:C1"), registry.names).grant
    return ToolContext(user_id="U1", platform="slack", principal=principal, grant=grant)


async def test_the_request_offers_only_granted_tools_and_a_call_to_another_is_refused(tmp_path: Any) -> None:
    registry = ToolRegistry([find_server, delete_pod])
    ctx = _viewer_ctx(registry)
    server = ScriptedLLMServer()
    url = await server.start()
    store = SqliteStore(tmp_path / "t.db")
    await store.open()
    config = parse_config({"llm": {"provider": "custom", "base_url": url, "model": "m", "max_retries": 0}}, env={})
    llm = LLMClient(config.llm, base_url=url)
    try:
        loop = ToolLoop(llm, registry, Memory(store, max_history_tokens=4000, keep_recent_turns=2), max_rounds=3, system_prompt="sys")
        server.enqueue(Script.tool_calls([("c1", "k8s__delete_pod", {"name": "web-1"})]), Script.text("I may not."))
        events = [e async for e in loop.run_turn("conv", "delete web-1", ctx)]
        done = events[-1]
        assert isinstance(done, TurnDone)
        [call] = done.result.tool_calls
        assert not call.ok and "not allowed" in call.summary
        offered = [spec["function"]["name"] for spec in server.requests[0]["tools"]]
        assert offered == ["find_server"]
    finally:
        await llm.aclose()
        await store.close()
        await server.stop()


async def test_the_registry_refuses_a_tool_outside_the_grant_and_names_only_offered_tools() -> None:
    registry = ToolRegistry([find_server, delete_pod])
    ctx = _viewer_ctx(registry)
    refused = await registry.execute("k8s__delete_pod", {"name": "web-1"}, ctx)
    assert not refused.ok and "not offered" in refused.error
    unknown = await registry.execute("nope", {}, ctx)
    assert "k8s__delete_pod" not in unknown.error
    assert (await registry.execute("find_server", {"query": "web"}, ctx)).ok
    assert (await registry.execute("k8s__delete_pod", {"name": "x"}, ToolContext())).ok  # outside the gateway: no grant
