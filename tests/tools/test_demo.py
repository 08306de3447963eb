"""The demo model: an offline stand-in that looks servers up with the real tools and answers from them."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import yaml

from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import ToolsConfig, parse_config
from botgateway.events import ToolCallFinished, ToolCallStarted, TurnDone
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage
from botgateway.model import LLMClient
from botgateway.sink import CardTarget
from botgateway.snapshot import ToolLine
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolError, ToolOutput, ToolRegistry, tool
from tests.fakes.gateway import RecordingSink
from tests.paths import SAMPLE_INVENTORY
from tools.catalog import build_toolset
from tools.demo.model import start_demo_model
from tools.demo.question import analyze_question
from tools.demo.responder import DemoResponder
from tools.demo.server import ScriptedLLMServer
from tools.server_record import SearchResult, Server

SAMPLE = SAMPLE_INVENTORY


def _host_with_ip(ip: str) -> str:
    """The sample inventory's host that owns ``ip`` (read from the file, not hard-coded)."""
    data = yaml.safe_load(SAMPLE.read_text())
    for host in data["hosts"]:
        ips = [host.get("ip"), *(host.get("ips") or []), *(host.get("public_ips") or [])]
        if ip in ips:
            return host["name"]
    raise AssertionError(f"{ip} not in the sample inventory")


async def _sample_tools() -> tuple[Any, ToolRegistry]:
    toolset = await build_toolset(ToolsConfig(inventory={"enabled": True, "path": str(SAMPLE)}))
    return toolset, ToolRegistry(toolset.tools)


async def _run(loop: ToolLoop, question: str, conversation: str = "c") -> list[Any]:
    return [event async for event in loop.run_turn(conversation, question, ToolContext(user_id="u"))]


def _loop(base_url: str, registry: ToolRegistry, store: SqliteStore) -> tuple[LLMClient, ToolLoop]:
    config = parse_config({"llm": {"provider": "demo"}}, env={})
    llm = LLMClient(config.llm, base_url=base_url)
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    return llm, ToolLoop(llm, registry, memory, max_rounds=4, system_prompt="sys")


async def test_demo_answers_which_server_with_the_inventory_tool(tmp_path) -> None:
    toolset, registry = await _sample_tools()
    store = SqliteStore(tmp_path / "d.db")
    async with AsyncExitStack() as stack:
        stack.push_async_callback(toolset.aclose)
        stack.push_async_callback(store.close)
        base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
        llm, loop = _loop(base_url, registry, store)
        stack.push_async_callback(llm.aclose)
        events = await _run(loop, "which server is 10.0.1.100?")
    host = _host_with_ip("10.0.1.100")
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [e.name for e in started] == ["find_server"]
    assert started[0].arguments == {"query": "10.0.1.100"}
    assert finished[0].ok, finished[0].summary
    done = events[-1]
    assert isinstance(done, TurnDone), done
    assert host in done.result.answer and "10.0.1.100" in done.result.answer
    assert "running" in done.result.answer  # status read from the tool result
    assert "- **Status:** running" in done.result.answer and "```" not in done.result.answer  # from its data, not quoted
    assert done.result.usage.total_tokens > 0


async def test_demo_through_the_gateway_shows_tool_lines_streamed_answer_and_demo_footer(tmp_path) -> None:
    toolset, registry = await _sample_tools()
    store = SqliteStore(tmp_path / "d.db")
    await store.open()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(toolset.aclose)
        stack.push_async_callback(store.close)
        server = ScriptedLLMServer(responder=DemoResponder(delay_s=0.002, outcomes=registry))
        base_url = await server.start()
        stack.push_async_callback(server.stop)
        llm, loop = _loop(base_url, registry, store)
        stack.push_async_callback(llm.aclose)
        config = parse_config({"llm": {"provider": "demo"}}, env={})
        gateway = Gateway(loop=loop, store=store, budget=RateBudget(), config=config, model_label="demo model")
        stack.push_async_callback(gateway.aclose)
        sink = RecordingSink()
        policy = BufferPolicy.from_config(config.adapters.terminal.policy)
        target = CardTarget(platform="test", chat_id="c", user_id="u")
        msg = InboundMessage("test", "m1", "conv", "Which server is 10.0.1.100?", target, ToolContext(user_id="u"))
        sub = await gateway.submit(msg, sink, policy)
        outcome = await asyncio.wait_for(sub.done, 20)
    host = _host_with_ip("10.0.1.100")
    assert outcome.outcome == "done"
    snapshots = [c.snapshot for c in sink.calls if c.target.turn_id == sub.turn_id]
    final = snapshots[-1]
    assert final.status == "done" and host in final.answer
    lines = [b for b in final.blocks if isinstance(b, ToolLine)]
    assert [(line.name, line.status) for line in lines] == [("find_server", "done")]
    assert "demo model" in final.footer
    # the tool line was visible before the answer, and the answer streamed over several updates
    first_tool = next(i for i, s in enumerate(snapshots) if any(isinstance(b, ToolLine) for b in s.blocks))
    first_answer = next(i for i, s in enumerate(snapshots) if s.answer)
    assert first_tool < first_answer
    assert any(s.status == "streaming" and 0 < len(s.answer) < len(final.answer) for s in snapshots)


def _api_7(ip: str) -> Server:
    return Server(
        provider="aliyun", account="default", region="cn-hangzhou", zone="cn-hangzhou-h", instance_id="i-bp1xyz",
        name="api-7", status="running", instance_type="ecs.g7.large", cpu=2, memory_gb=8,
        private_ips=(ip,), public_ips=("47.1.2.3",),
    )  # fmt: skip


async def test_demo_calls_two_provider_lookups_in_parallel(tmp_path) -> None:
    both_running = asyncio.Event()
    running: set[str] = set()

    async def lookup(name: str, ip: str) -> SearchResult:
        running.add(name)
        if len(running) == 2:
            both_running.set()
        # each lookup waits for the other: only parallel calls get past this
        await asyncio.wait_for(both_running.wait(), 10)
        if name == "aliyun":
            return SearchResult(f"ip {ip}", (_api_7(ip),), searched=("aliyun",), answered=("aliyun",))
        return SearchResult(f"ip {ip}", searched=("tencent",), answered=("tencent",))

    @tool
    async def search_ecs_by_ip(ip: str) -> SearchResult:
        """Alibaba Cloud ECS by IP.

        Args:
            ip: address
        """
        return await lookup("aliyun", ip)

    @tool
    async def search_cvm_by_ip(ip: str) -> SearchResult:
        """Tencent Cloud CVM by IP.

        Args:
            ip: address
        """
        return await lookup("tencent", ip)

    store = SqliteStore(tmp_path / "d.db")
    registry = ToolRegistry([search_ecs_by_ip, search_cvm_by_ip])
    async with ScriptedLLMServer(responder=DemoResponder(delay_s=0, outcomes=registry)) as server:
        llm, loop = _loop(server.base_url, registry, store)
        try:
            events = await _run(loop, "who has 172.16.5.9")
        finally:
            await llm.aclose()
            await store.close()
    started = [e.name for e in events if isinstance(e, ToolCallStarted)]
    assert sorted(started) == ["search_cvm_by_ip", "search_ecs_by_ip"]
    # both calls were requested in ONE model round
    assert sum(1 for r in server.requests if r["messages"][-1]["role"] == "tool") == 1
    done = events[-1]
    assert isinstance(done, TurnDone)
    assert "api-7" in done.result.answer and "47.1.2.3" in done.result.answer
    assert done.result.answer.startswith("**172.16.5.9** is **api-7** (`i-bp1xyz`), in Alibaba Cloud, cn-hangzhou/cn-hangzhou-h.")


async def test_demo_without_a_host_says_what_it_can_do(tmp_path) -> None:
    store = SqliteStore(tmp_path / "d.db")
    toolset, registry = await _sample_tools()
    async with ScriptedLLMServer(responder=DemoResponder(delay_s=0)) as server:
        llm, loop = _loop(server.base_url, registry, store)
        try:
            events = await _run(loop, "hello, what are you?")
            zh = await _run(loop, "你好，你能做什么？", conversation="zh")
        finally:
            await llm.aclose()
            await store.close()
            await toolset.aclose()
    assert not any(isinstance(e, ToolCallStarted) for e in events)
    answer = events[-1].result.answer
    assert "demo model" in answer and "10.0.1.100" in answer and "find_server" in answer
    assert "演示模型" in zh[-1].result.answer


async def test_demo_widens_to_find_server_when_provider_lookups_find_nothing(tmp_path) -> None:
    calls: list[str] = []

    @tool
    def search_ecs_by_ip(ip: str) -> SearchResult:
        """ECS.

        Args:
            ip: address
        """
        calls.append("ecs")
        return SearchResult(f"ip {ip}", searched=("aliyun",), answered=("aliyun",))

    @tool
    def search_ec2_by_ip(ip: str) -> SearchResult:
        """EC2.

        Args:
            ip: address
        """
        calls.append("ec2")
        return SearchResult(f"ip {ip}", searched=("aws",), answered=("aws",))

    toolset, sample = await _sample_tools()
    registry = ToolRegistry([sample.get("find_server"), search_ecs_by_ip, search_ec2_by_ip])
    store = SqliteStore(tmp_path / "d.db")
    async with ScriptedLLMServer(responder=DemoResponder(delay_s=0, outcomes=registry)) as server:
        llm, loop = _loop(server.base_url, registry, store)
        try:
            events = await _run(loop, "which server is 10.0.1.100?")
        finally:
            await llm.aclose()
            await store.close()
            await toolset.aclose()
    started = [e.name for e in events if isinstance(e, ToolCallStarted)]
    assert sorted(started[:2]) == ["search_ec2_by_ip", "search_ecs_by_ip"] and started[2:] == ["find_server"]
    assert _host_with_ip("10.0.1.100") in events[-1].result.answer


async def test_demo_quotes_a_result_without_data_and_names_a_failed_lookup(tmp_path) -> None:
    """A text-only tool (as MCP tools are) is quoted as it is, never parsed; a failure is named in its own words."""
    looks_like_a_server_line = "- web-9 [i-x] | Somewhere | running"

    @tool
    def search_ecs_by_ip(ip: str) -> str:
        """ECS.

        Args:
            ip: address
        """
        return f"{ip}:\n{looks_like_a_server_line}"

    @tool
    def search_ec2_by_ip(ip: str) -> ToolOutput:
        """EC2.

        Args:
            ip: address
        """
        raise ToolError("AWS: permission denied in us-east-1")

    registry = ToolRegistry([search_ecs_by_ip, search_ec2_by_ip])
    store = SqliteStore(tmp_path / "d.db")
    async with ScriptedLLMServer(responder=DemoResponder(delay_s=0, outcomes=registry)) as server:
        llm, loop = _loop(server.base_url, registry, store)
        try:
            events = await _run(loop, "who has 172.16.5.9")
        finally:
            await llm.aclose()
            await store.close()
    answer = events[-1].result.answer
    assert answer.startswith("Here is what the lookup returned:\n\n```\n172.16.5.9:\n" + looks_like_a_server_line + "\n```")
    assert answer.endswith("⚠️ Some sources could not be searched, so this may be incomplete:\n- AWS: permission denied in us-east-1")


async def test_demo_recognises_the_host_names_of_the_inventory_provider(tmp_path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"name": "bastion", "ip": "10.1.0.1", "datacenter": "idc-gz"}]}))
    toolset = await build_toolset(ToolsConfig(inventory={"enabled": True, "path": str(path)}))
    registry = ToolRegistry(toolset.tools)
    store = SqliteStore(tmp_path / "d.db")
    async with AsyncExitStack() as stack:
        stack.push_async_callback(toolset.aclose)
        stack.push_async_callback(store.close)
        base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
        llm, loop = _loop(base_url, registry, store)
        stack.push_async_callback(llm.aclose)
        events = await _run(loop, "where is bastion?")  # no digit, no dash: known only from the inventory
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(e.name, e.arguments) for e in started] == [("find_server", {"query": "bastion"})]
    assert events[-1].result.answer.startswith("**bastion** is in Static inventory (on-prem), idc-gz.")


def test_question_analysis_finds_ips_ids_and_known_hosts() -> None:
    lookup = analyze_question("is i-bp1abc2345 or ins-9xk2ab7q the same as db-master? also 10.2.3.4", known_hosts=["db-master"])
    assert lookup.ips == ("10.2.3.4",)
    assert lookup.instance_ids == ("i-bp1abc2345", "ins-9xk2ab7q")
    assert lookup.hosts == ("db-master",)
    assert analyze_question("version 1.2.3 is out").queries == ()
    assert analyze_question("列出已停止的服务器").list_status == "stopped"


async def test_demo_model_answers_history_compression_with_a_deterministic_summary(tmp_path) -> None:
    """With no API key the demo model is also the summarizer: it keeps questions and addresses."""
    from botgateway.config import parse_config
    from botgateway.history import Memory
    from botgateway.model import LLMClient
    from botgateway.stores.sqlite import SqliteStore
    from tools.demo.responder import DemoResponder
    from tools.demo.server import ScriptedLLMServer

    async with ScriptedLLMServer(responder=DemoResponder()) as server:
        config = parse_config({"llm": {"provider": "custom", "base_url": server.base_url, "model": "demo"}})
        llm = LLMClient(config.llm, base_url=server.base_url)
        store = SqliteStore(tmp_path / "m.db")
        try:
            memory = Memory(store, max_history_tokens=200, keep_recent_turns=1, summarizer=llm.complete)
            for i in range(4):
                await memory.commit(
                    "c",
                    f"t{i}",
                    [
                        {"role": "user", "content": f"which server is 10.0.1.{100 + i}? " + "detail " * 40},
                        {"role": "assistant", "content": "It is a host. " + "words " * 40},
                    ],
                )
            history = await memory.history("c")
        finally:
            await llm.aclose()
            await store.close()
    summary = history[0]["content"]
    assert "Addresses discussed: 10.0.1.100, 10.0.1.101" in summary
    assert "Questions asked: which server is 10.0.1.100?" in summary
    assert history[-2]["content"].startswith("which server is 10.0.1.103?")
