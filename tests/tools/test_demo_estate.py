"""The demo model answers estate questions offline: the real demo and loop, the real estate tools, the sample estate."""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from botgateway.config import ToolsConfig, parse_config
from botgateway.events import ToolCallFinished, ToolCallStarted, TurnDone
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.stores.sqlite import SqliteStore
from botgateway.strings import t
from botgateway.tooling import ToolContext, ToolError, ToolRegistry, tool
from tests.paths import SAMPLE_INVENTORY
from tools.catalog import build_toolset
from tools.demo.estate_planning import plan_estate_calls
from tools.demo.estate_questions import read_estate_question
from tools.demo.model import start_demo_model
from tools.demo.responder import DemoResponder
from tools.demo.server import ScriptedLLMServer
from tools.estate.fanout import EstateView, Failure
from tools.estate.matching import Match
from tools.estate.resource import Resource
from tools.providers.inventory import InventoryProvider
from tools.toolsets.results import FindResult

Call = tuple[str, dict[str, Any]]


async def _ask(tmp_path: Any, *questions: str, keep: tuple[str, ...] | None = None) -> list[list[Any]]:
    """Each question's events, through the demo model and the loop, against the sample estate's tools.

    ``keep`` offers only those tools (by name) to the model, as a narrower config would.
    """
    toolset = await build_toolset(ToolsConfig(inventory={"enabled": True, "path": str(SAMPLE_INVENTORY)}))
    tools = [t for t in toolset.tools if keep is None or t.name in keep]
    registry = ToolRegistry(tools)
    inventory = next(p for p in toolset.provider_objects if isinstance(p, InventoryProvider))
    store = SqliteStore(tmp_path / "d.db")
    results = []
    async with AsyncExitStack() as stack:
        stack.push_async_callback(toolset.aclose)
        stack.push_async_callback(store.close)
        # the demo model as start_demo_model builds it, streaming without its typing pauses
        server = ScriptedLLMServer(responder=DemoResponder(delay_s=0, outcomes=registry, hosts=inventory))
        base_url = await server.start()
        stack.push_async_callback(server.stop)
        llm, loop = _loop(base_url, registry, store)
        stack.push_async_callback(llm.aclose)
        for number, question in enumerate(questions):
            results.append([e async for e in loop.run_turn(f"c{number}", question, ToolContext(user_id="u"))])
    return results


def _loop(base_url: str, registry: ToolRegistry, store: SqliteStore) -> tuple[LLMClient, ToolLoop]:
    config = parse_config({"llm": {"provider": "demo"}}, env={})
    llm = LLMClient(config.llm, base_url=base_url)
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    return llm, ToolLoop(llm, registry, memory, max_rounds=4, system_prompt="sys")


def _calls(events: list[Any]) -> list[Call]:
    return [(e.name, e.arguments) for e in events if isinstance(e, ToolCallStarted)]


def _answer(events: list[Any]) -> str:
    done = events[-1]
    assert isinstance(done, TurnDone), done
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert all(e.ok for e in finished), [e.summary for e in finished]
    return done.result.answer


CASES: list[tuple[str, list[Call], tuple[str, ...]]] = [
    (
        "what's behind api.example.com?",
        [("trace", {"target": "api.example.com"})],
        ("api.example.com", "api-lb", "lb-api-01", "https:443", "prod-web-01", "prod-web-02", "unhealthy",
         "prod-web-02: backend unhealthy", "web-servers", "22", "open to the internet", "lb-public"),
    ),
    (
        "what is 10.0.3.7?",
        [("find_resource", {"query": "10.0.3.7"})],
        ("**10.0.3.7** is the database **orders-db** (`rds-orders-01`), in Static inventory (on-prem), idc-shanghai.",
         "running", "private IP 10.0.3.7", "mysql 8.0", "3306", "sg-db", "dba-team"),
    ),
    (
        "who stopped prod-db-03?",
        [("resource_changes", {"resource": "prod-db-03", "since": "90d"})],
        ("**alice@example.com** stopped **prod-db-03**: `StopInstance` at ", "UTC from 10.0.0.10",
         "planned decommission, CHG-1042", "ModifyInstanceAttribute", "bob@example.com", "now **stopped**"),
    ),
    (
        "which security group opens 22 to the world?",
        [("exposed_ports", {"port": 22})],
        ("1 security group lets the whole internet (0.0.0.0/0) in on port 22", "**web-servers** (`sg-web`)",
         "`allow tcp 22 from 0.0.0.0/0`", "temporary: vendor debugging", "used by prod-web-01, prod-web-02"),
    ),
    (
        "where is the orders Redis?",
        [("find_resource", {"query": "orders", "kind": "cache"})],
        ("The cache matching **orders** is **orders-redis** (`redis-orders-01`), in Static inventory (on-prem), "
         "idc-shanghai.",
         "10.0.3.9", "orders-redis.internal.example.com", "redis 7.0", "6379", "running"),
    ),
    (
        "is port 443 of api.example.com reachable from the internet?",
        [("trace", {"target": "api.example.com", "port": 443})],
        ("**From the internet (0.0.0.0/0):** reachable on api-lb", "port 443 is open to 0.0.0.0/0",
         "lb-public allow tcp 443 from 0.0.0.0/0", "prod-web-02: backend unhealthy"),
    ),
    (
        "list the load balancers",
        [("list_resources", {"kind": "load_balancer"})],
        ("2 load balancers:", "**api-lb** (`lb-api-01`) · active", "**internal-lb** (`lb-internal-01`) · active"),
    ),
    (
        "which buckets are public?",
        [("list_resources", {"kind": "bucket"})],
        ("1 of the 2 buckets is public: **shop-assets**.", "**shop-assets** · public, ACL public-read",
         "**db-backups** · not public, ACL private"),
    ),
    (
        "why is the checkout deployment degraded?",
        [("trace", {"target": "checkout"})],
        ("The path is broken: checkout [shop/checkout]: workload is degraded; "
         "checkout-7d9f8-fghij [shop/checkout-7d9f8-fghij]: pod is crashloopbackoff.",
         "workload **checkout** (`shop/checkout`) · degraded", "replicas 2/3 ready", "restarts 14", "prod-k8s-node-02"),
    ),
    (
        "How many replicas of the checkout deployment are ready?",
        [("find_resource", {"query": "checkout", "kind": "workload"})],
        ("**checkout** is the workload **checkout** (`shop/checkout`)", "degraded", "replicas 2/3 ready"),
    ),
    (
        "what does sg-web allow?",
        [("find_resource", {"query": "sg-web"})],
        ("**sg-web** is the security group **web-servers** (`sg-web`)",
         "**Rules:** allow tcp 8080-8443 from 10.0.0.0/16; allow tcp 22 from 0.0.0.0/0",
         "**Open to the internet:** allow tcp 22 from 0.0.0.0/0", "Related:", "**prod-web-02**"),
    ),
    (
        "which elastic IPs are not attached to anything?",
        [("list_resources", {"kind": "ip"})],
        ("2 elastic IPs:", "**203.0.113.20** (`eip-api-lb`) · in-use", "attached to lb-api-01",
         "attached to prod-web-01"),
    ),
    (
        "Which checkout pod is crash looping, and on which node?",
        [("find_resource", {"query": "checkout", "kind": "pod"})],
        ("**checkout-7d9f8-fghij** (`shop/checkout-7d9f8-fghij`) · crashloopbackoff · restarts 14, "
         "node prod-k8s-node-02",),
    ),
    (
        "10.0.3.7 是什么？",
        [("find_resource", {"query": "10.0.3.7"})],
        ("**10.0.3.7** 是数据库 **orders-db** (`rds-orders-01`)，位于 Static inventory (on-prem), idc-shanghai。",
         "- **状态:** running", "private IP 10.0.3.7"),
    ),
    (
        "谁停了 prod-db-03？",
        [("resource_changes", {"resource": "prod-db-03", "since": "90d"})],
        ("是 **alice@example.com** 停止了 **prod-db-03**：`StopInstance`，时间 ", " UTC，来源 IP 10.0.0.10",
         "当前状态 **stopped**", "bob@example.com"),
    ),
    (
        "api.example.com 后面是什么？",
        [("trace", {"target": "api.example.com"})],
        ("**api.example.com** 指向负载均衡 **api-lb** (`lb-api-01`)。链路有断点：prod-web-02: backend unhealthy。",
         "**链路：**", "⚠️ **对公网开放：**", "22"),
    ),
    (
        "哪个安全组对公网开放了 22 端口？",
        [("exposed_ports", {"port": 22})],
        ("1 个安全组对整个公网 (0.0.0.0/0) 开放的 22 端口：", "**web-servers** (`sg-web`)", "（temporary: vendor debugging）"),
    ),
    (
        "哪些存储桶是公开的？",
        [("list_resources", {"kind": "bucket"})],
        ("2 个存储桶中有 1 个是公开的：**shop-assets**。", "**db-backups** · 私有"),
    ),
]


@pytest.mark.parametrize(("question", "calls", "facts"), CASES, ids=[case[0] for case in CASES])
async def test_demo_answers_an_estate_question_with_the_planned_call_and_its_facts(
    tmp_path: Any, question: str, calls: list[Call], facts: tuple[str, ...]
) -> None:
    [events] = await _ask(tmp_path, question)
    assert _calls(events) == calls
    answer = _answer(events)
    missing = [fact for fact in facts if fact not in answer]
    assert not missing, f"{missing} not in:\n{answer}"
    assert "⚠️ Some sources" not in answer and "部分来源" not in answer  # the sample estate answers in full


async def test_the_trace_answer_lists_the_chain_in_order_with_every_break(tmp_path: Any) -> None:
    [events] = await _ask(tmp_path, "what's behind api.example.com?")
    answer = _answer(events)
    path = answer.split("**Path:**", 1)[1]
    order = ["api.example.com", "api-lb", "https:443", "prod-web-01", "web-servers", "prod-web-02", "http:80",
             "lb-public"]
    positions = [path.index(name) for name in order]
    assert positions == sorted(positions), path
    # both listeners' unhealthy backend is marked where it breaks; the break is said once at the top
    assert path.count("✗ **backend unhealthy**") == 2
    assert answer.startswith("**api.example.com** leads to load balancer **api-lb** (`lb-api-01`). "
                             "The path is broken: prod-web-02: backend unhealthy.")
    assert "- **web-servers** (`sg-web`): open to the internet: allow tcp 22 from 0.0.0.0/0" in answer


async def test_server_questions_still_go_to_the_server_tools_beside_the_estate_tools(tmp_path: Any) -> None:
    which, stopped = await _ask(tmp_path, "which server is 10.0.1.100?", "list the stopped servers")
    assert _calls(which) == [("find_server", {"query": "10.0.1.100"})]
    assert "- **Status:** running" in _answer(which)
    assert [name for name, _ in _calls(stopped)] == ["list_servers"]


async def test_with_only_the_server_tools_offered_the_demo_behaves_as_before(tmp_path: Any) -> None:
    [events] = await _ask(tmp_path, "what is 10.0.3.7?", keep=("search_inventory_by_ip", "find_server", "list_servers"))
    assert _calls(events) == [("find_server", {"query": "10.0.3.7"})]
    assert "couldn't find any server matching **10.0.3.7**" in _answer(events)


async def test_the_demo_never_calls_a_tool_the_request_does_not_offer(tmp_path: Any) -> None:
    """Without ``trace`` a careful model still finds what the name is; without the trails it does not pretend."""
    behind, who = await _ask(tmp_path, "what's behind api.example.com?", "who stopped prod-db-03?",
                             keep=("find_resource", "list_resources"))
    assert _calls(behind) == [("find_resource", {"query": "api.example.com"})]
    assert "api.example.com" in _answer(behind) and "CNAME → api-lb.lb.example.net" in _answer(behind)
    assert _calls(who) == []
    assert "demo model" in _answer(who)


async def test_make_run_wiring_answers_the_estate_offline(tmp_path: Any) -> None:
    """``make run`` starts the demo with start_demo_model: the same answer, paced as a real model types."""
    toolset = await build_toolset(ToolsConfig(inventory={"enabled": True, "path": str(SAMPLE_INVENTORY)}))
    registry = ToolRegistry(toolset.tools)
    store = SqliteStore(tmp_path / "d.db")
    async with AsyncExitStack() as stack:
        stack.push_async_callback(toolset.aclose)
        stack.push_async_callback(store.close)
        base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
        llm, loop = _loop(base_url, registry, store)
        stack.push_async_callback(llm.aclose)
        events = [e async for e in loop.run_turn("c", "谁停了 prod-db-03？", ToolContext(user_id="u"))]
    assert _calls(events) == [("resource_changes", {"resource": "prod-db-03", "since": "90d"})]
    assert "是 **alice@example.com** 停止了 **prod-db-03**：`StopInstance`，时间 " in _answer(events)


async def test_the_changes_answer_says_when_from_the_trail(tmp_path: Any) -> None:
    """The sample estate dates its change log by age ("-1d22h"): the answer gives the trail's own time."""
    [events] = await _ask(tmp_path, "who stopped prod-db-03?")
    answer = _answer(events)
    head = re.match(r"\*\*alice@example.com\*\* stopped \*\*prod-db-03\*\*: `StopInstance` at "
                    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC from 10\.0\.0\.10\.", answer)
    assert head, answer
    when = datetime.strptime(head.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    age = datetime.now(UTC) - when
    assert timedelta(days=1, hours=21) < age < timedelta(days=1, hours=23), age  # the log's -1d22h, loosely
    # the headline's time is the StopInstance row's, and the older change is listed after it
    rows = answer.split("newest first:", 1)[1]
    stop_row = rows.index(f"{head.group(1)} UTC · `StopInstance`")
    assert stop_row < rows.index("`ModifyInstanceAttribute` by **bob@example.com**")


def _aws_failure() -> Failure:
    reason = "permission denied: needs rds:DescribeDBInstances"
    return Failure("aws", "prod", "us-east-1", "databases", "permission", reason)


async def test_the_answer_names_the_sources_not_reached_and_a_failed_call(tmp_path: Any) -> None:
    db = Resource(kind="database", provider="aliyun", account="prod", region="cn-hangzhou", id="rm-bp1",
                  name="orders-db", state="running", private_ips=("10.0.3.7",))

    @tool
    async def find_resource(query: str, kind: str | None = None) -> FindResult:
        """Find a resource.

        Args:
            query: what
            kind: only this kind
        """
        view = EstateView(resources=(db,), failures=(_aws_failure(),))
        return FindResult(repr(query), (Match(db, 100, f"private IP {query}"),), 1, view, "databases")

    @tool
    async def trace(target: str, port: int | None = None) -> FindResult:
        """Trace.

        Args:
            target: what
            port: port
        """
        raise ToolError("every source failed: Tencent Cloud prod (load balancers): throttled")

    registry = ToolRegistry([find_resource, trace])
    store = SqliteStore(tmp_path / "d.db")
    async with ScriptedLLMServer(responder=DemoResponder(delay_s=0, outcomes=registry)) as server:
        llm, loop = _loop(server.base_url, registry, store)
        try:
            found = [e async for e in loop.run_turn("a", "what is 10.0.3.7?", ToolContext(user_id="u"))]
            traced = [e async for e in loop.run_turn("b", "api.example.com 后面是什么？", ToolContext(user_id="u"))]
        finally:
            await llm.aclose()
            await store.close()
    answer = _answer(found)
    head = "**10.0.3.7** is the database **orders-db** (`rm-bp1`), in Alibaba Cloud (prod), cn-hangzhou."
    assert answer.startswith(head), answer
    assert answer.endswith("⚠️ Some sources could not be reached, so this may be incomplete:\n"
                           "- AWS prod/us-east-1 (databases): permission denied: needs rds:DescribeDBInstances")
    assert isinstance(traced[-1], TurnDone)
    zh = traced[-1].result.answer
    assert "无法查询 **api.example.com**" in zh
    assert "every source failed: Tencent Cloud prod (load balancers): throttled" in zh


def test_question_shapes_are_read_in_english_and_chinese() -> None:
    def shape(text: str) -> tuple[str, str, str, int | None] | None:
        ask = read_estate_question(text, known_hosts=["bastion", "prod-db-03"])
        return (ask.shape, ask.subject, ask.kind, ask.port) if ask is not None else None

    assert shape("what changed on sg-web in the last 3 days?") == ("changes", "sg-web", "", None)
    assert read_estate_question("who rebooted prod-web-02 yesterday?").since == "48h"  # type: ignore[union-attr]
    assert shape("list the load-balancers") == ("list", "", "load_balancer", None)
    assert shape("为什么 checkout 部署降级了？") == ("trace", "checkout", "workload", None)
    assert shape("api.example.com 的 443 端口能从公网访问吗？") == ("trace", "api.example.com", "", 443)
    assert shape("which security group opens 22 to 0.0.0.0/0?") == ("exposed", "", "security_group", 22)
    assert shape("orders Redis 在哪？") == ("find", "orders", "cache", None)
    assert shape("what is orders-db?") == ("find", "orders-db", "", None)  # "db" inside a name is not a kind
    for chat in ("hello, what are you?", "你好，你能做什么？", "thanks!"):
        assert shape(chat) is None
    assert read_estate_question("where is bastion?", known_hosts=["bastion"]).server_asked  # type: ignore[union-attr]


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_an_alert_investigation_identifies_each_host_and_asks_what_changed_it(locale: str) -> None:
    """Its instructions name every kind and "who changed it"; the question is "identify these, and their changes"."""
    hosts = "10.0.1.100, shop/checkout-7d9f8-fghij"
    question = "\n".join([
        t(locale, "alert_q_firing", names="HighCPU", severity=""), t(locale, "alert_q_hosts", hosts=hosts),
        t(locale, "alert_q_instructions"), "", t(locale, "alert_q_data"), "- HighCPU instance=10.0.1.100:9100",
    ])
    ask = read_estate_question(question)
    assert ask is not None and ask.shape == "investigate"
    assert ask.subjects == ("10.0.1.100", "shop/checkout-7d9f8-fghij")
    tools = {"find_resource": {"properties": {"query": {}}}, "resource_changes": {"properties": {"resource": {}, "since": {}}}}
    assert plan_estate_calls(ask, tools) == [
        ("find_resource", {"query": "10.0.1.100"}), ("find_resource", {"query": "shop/checkout-7d9f8-fghij"}),
        ("resource_changes", {"resource": "10.0.1.100", "since": "24h"}),
        ("resource_changes", {"resource": "shop/checkout-7d9f8-fghij", "since": "24h"}),
    ]
