"""Acceptance: a turn asking for 10.0.1.100 with two providers configured runs both lookups
concurrently and answers with the instance the tools found.

The model is the scripted OpenAI-compatible server; the tools are the real ones, with the
real Alibaba Cloud and Tencent Cloud SDKs pointed at the local fake APIs.
"""

from __future__ import annotations

import json
import re
from contextlib import AsyncExitStack
from typing import Any

from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, ToolsConfig
from botgateway.events import ToolCallFinished, ToolCallStarted, TurnDone
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.clouds import FakeAliyun, FakeTencent, Rendezvous, aliyun_instance, tencent_instance
from tests.fakes.llm import llm_config
from tools.catalog import build_toolset
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

IP = "10.0.1.100"


class ListMemory:
    """A history store kept in a dict (the loop's ``HistoryStore`` seam)."""

    def __init__(self) -> None:
        self.turns: dict[str, list[dict[str, Any]]] = {}

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        return list(self.turns.get(conversation_id, []))

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        self.turns.setdefault(conversation_id, []).extend(messages)


def model(lookups: list[str]):  # type: ignore[no-untyped-def]
    """A scripted model: first call every per-provider lookup at once, then answer from their results."""

    def respond(body: dict[str, Any]) -> Script:
        messages = body["messages"]
        results = [m for m in messages if m.get("role") == "tool"]
        if not results:
            offered = {t["function"]["name"] for t in body.get("tools", [])}
            assert set(lookups) <= offered, offered
            return Script.tool_calls([(f"call_{n}", name, {"ip": IP}) for n, name in enumerate(lookups)])
        # Answer only with what the tools returned: "- name [id] | Provider ... | status | ..."
        found = [
            match.groups()
            for m in results
            for match in re.finditer(r"^- (\S+) \[(\S+)\] \| ([^|]+?) \| (\w+)", m["content"], re.M)
        ]
        if not found:
            return Script.text(f"No server owns {IP}.")
        name, instance_id, where, status = found[0]
        return Script.text(f"{IP} is {name} ({instance_id}), {status}, in {where}.")

    return respond


async def test_two_providers_are_searched_concurrently_and_the_answer_names_the_instance() -> None:
    meet = Rendezvous("aliyun", "tencent")
    aliyun = FakeAliyun(
        {"cn-hangzhou": [aliyun_instance("i-bp1mysql0000000001", "hz-mysql-primary", IP, tags={"role": "mysql"})]},
        rendezvous=meet,
        name="aliyun",
    )
    tencent = FakeTencent(
        {"ap-guangzhou": [tencent_instance("ins-gz000001", "gz-web-01", "10.66.0.11")]},
        access_key="tc-id",
        rendezvous=meet,
        name="tencent",
    )
    async with AsyncExitStack() as stack:
        stack.enter_context(aliyun)
        stack.enter_context(tencent)
        toolset = await build_toolset(
            ToolsConfig(
                inventory=InventoryConfig(enabled=False),
                aliyun=CloudProviderConfig(
                    enabled=True,
                    accounts=[CloudAccount(access_key_id="test-key-id", access_key_secret="s", regions=["cn-hangzhou"], endpoint=aliyun.endpoint)],  # type: ignore[arg-type]
                ),
                tencent=CloudProviderConfig(
                    enabled=True,
                    accounts=[CloudAccount(access_key_id="tc-id", access_key_secret="s", regions=["ap-guangzhou"], endpoint=tencent.endpoint)],  # type: ignore[arg-type]
                ),
            )
        )
        stack.push_async_callback(toolset.aclose)
        assert toolset.providers == ["aliyun", "tencent"]
        assert toolset.lookup_tools == ["search_ecs_by_ip", "search_cvm_by_ip"]

        server = ScriptedLLMServer(responder=model(toolset.lookup_tools))
        base_url = await server.start()
        stack.push_async_callback(server.stop)
        llm = LLMClient(llm_config(base_url), backoff_base_s=0.01)
        stack.push_async_callback(llm.aclose)
        loop = ToolLoop(llm, ToolRegistry(toolset.tools), ListMemory(), max_rounds=4, system_prompt="You are an ops assistant.")

        events = [e async for e in loop.run_turn("c1", f"which machine is {IP}?", ToolContext(user_id="U1"))]

    kinds = [(type(e).__name__, getattr(e, "name", "")) for e in events if isinstance(e, (ToolCallStarted, ToolCallFinished))]
    started = [i for i, (k, _) in enumerate(kinds) if k == "ToolCallStarted"]
    finished = [i for i, (k, _) in enumerate(kinds) if k == "ToolCallFinished"]
    assert {n for k, n in kinds if k == "ToolCallStarted"} == {"search_ecs_by_ip", "search_cvm_by_ip"}
    # The tool events overlap: both lookups started before either finished ...
    assert len(started) == 2 and len(finished) == 2 and max(started) < min(finished), kinds
    # ... and the two clouds really were asked at the same time (each held its answer until the other was asked).
    assert meet.met

    outcomes = {e.name: e for e in events if isinstance(e, ToolCallFinished)}
    assert outcomes["search_ecs_by_ip"].ok and outcomes["search_ecs_by_ip"].summary.startswith("1 instance found: ")
    assert outcomes["search_cvm_by_ip"].ok and outcomes["search_cvm_by_ip"].summary == "no instance found"

    done = events[-1]
    assert isinstance(done, TurnDone), done
    assert done.result.answer == f"{IP} is hz-mysql-primary (i-bp1mysql0000000001), running, in Alibaba Cloud cn-hangzhou/cn-hangzhou-h."

    # The model got both results back, in call order, as tool messages.
    final_request = server.requests[-1]
    tool_messages = [m for m in final_request["messages"] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1"]
    assert "hz-mysql-primary" in tool_messages[0]["content"]
    assert json.dumps(final_request["tools"]).count("search_") >= 2


async def test_demo_model_asks_the_inventory_and_aliyun_in_parallel() -> None:
    """The offline demo model with the shipped sample inventory plus a (fake) Alibaba Cloud account."""
    from tools.demo.model import start_demo_model

    with FakeAliyun({"cn-hangzhou": [aliyun_instance("i-bp1other000000001", "hz-web-01", "172.16.0.7")]}) as aliyun:
        async with AsyncExitStack() as stack:
            toolset = await build_toolset(
                ToolsConfig(
                    aliyun=CloudProviderConfig(
                        enabled=True,
                        accounts=[CloudAccount(access_key_id="test-key-id", access_key_secret="s", regions=["cn-hangzhou"], endpoint=aliyun.endpoint)],  # type: ignore[arg-type]
                    ),
                )
            )
            stack.push_async_callback(toolset.aclose)
            assert toolset.lookup_tools == ["search_inventory_by_ip", "search_ecs_by_ip"]
            registry = ToolRegistry(toolset.tools)
            base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
            llm = LLMClient(llm_config(base_url), backoff_base_s=0.01)
            stack.push_async_callback(llm.aclose)
            loop = ToolLoop(llm, registry, ListMemory(), max_rounds=4, system_prompt="sys")
            events = [e async for e in loop.run_turn("c2", f"which server is {IP}?", ToolContext(user_id="U1"))]

    order = [type(e).__name__ for e in events if isinstance(e, (ToolCallStarted, ToolCallFinished))]
    names = {e.name for e in events if isinstance(e, ToolCallStarted)}
    assert names == {"search_inventory_by_ip", "search_ecs_by_ip"}
    assert order == ["ToolCallStarted", "ToolCallStarted", "ToolCallFinished", "ToolCallFinished"]
    assert any(c["params"].get("PrivateIpAddresses") == f'["{IP}"]' for c in aliyun.calls())
    done = events[-1]
    assert isinstance(done, TurnDone), done
    assert "prod-db-01" in done.result.answer
