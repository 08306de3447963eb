"""The estate tools end to end on the fake DingTalk: a trace's whole chain on the AI card, and a scoped asker.

The real dingtalk-stream client, gateway, tool loop and card streamer against
the fake DingTalk; the estate tools built as ``botgateway run`` builds them,
on the sample estate or on two loopback Tencent Cloud accounts reached through
the official SDK. The scripted model calls a tool, then answers with what it
returned. Assertions are on the card DingTalk shows, on what the model was
sent, on the requests each fake recorded and on the audit trail.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from botgateway.config import InventoryConfig, ToolsConfig
from tests.estate_fixtures import (
    ESTATE_TOOLSETS,
    TRACE_CHAIN,
    audit_of,
    cloud_account,
    cloud_section,
    estate_toolset,
    sample_estate_config,
    tool_results,
    tools_then_answer,
)
from tests.fakes.dingtalk_env import Env, EnvFactory
from tests.fakes.tencent_estate import REGION as GUANGZHOU
from tests.fakes.tencent_estate import FakeTencentEstate
from tools.demo.script import ToolCallSpec

LEAD = "以下是资源链路。"
"""The first line of every scripted answer; the tool results follow it verbatim."""



@asynccontextmanager
async def on_dingtalk(make_env: EnvFactory, config: ToolsConfig, calls: Sequence[ToolCallSpec],
                      **options: Any) -> AsyncIterator[Env]:
    """The fake DingTalk and a gateway offering the estate tools of ``config``; the model makes ``calls``, then
    answers. The toolset is closed on the way out; ``make_env`` closes the rest after the test."""
    async with estate_toolset(config) as toolset:
        yield await make_env(tools=toolset.tools, responder=tools_then_answer(calls, LEAD), **options)


async def final_card(env: Env, question: str, staff_id: str) -> tuple[str, str]:
    """Ask the environment's first question, ``question``, in the group as ``staff_id``; the final card's content and
    the turn id."""
    msg_id, _ = await env.ask(question, staff_id=staff_id)
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done", outcome
    [card] = env.cards()  # one question, one card
    final = card.updates[-1]
    assert final["isFinalize"] and not final["isError"]
    return str(final["content"]), outcome.turn_id


def status_line(content: str, tool: str) -> str:
    """The card's one status line of ``tool``, finished."""
    [line] = [x for x in content.splitlines() if x.startswith("✅ ") and re.match(rf"✅ {tool}\b", x)]
    return line


async def test_trace_renders_the_whole_chain_on_the_dingtalk_card(make_env: EnvFactory) -> None:
    calls: list[ToolCallSpec] = [("c1", "trace", {"target": "api.example.com"})]
    async with on_dingtalk(make_env, sample_estate_config(), calls) as env:
        content, turn_id = await final_card(env, "api.example.com 后面是什么？", "staff001")
        line = status_line(content, "trace")
        assert line.endswith("api.example.com → api-lb → prod-web-01, prod-web-02 ✗ → web-servers ⚠22, lb-public · 1 break"), line

        for text in (tool_results(env.llm_server)["c1"], content):
            positions = [text.find(hop) for hop in TRACE_CHAIN]
            assert -1 not in positions and positions == sorted(positions), (positions, text)
            assert "⚠ open to the internet: allow tcp 22 from 0.0.0.0/0 — 22 (SSH)" in text
            assert "Broken: prod-web-02: backend unhealthy" in text
        assert content.index(line) < content.index(LEAD), "the status line sits above the answer"

        record = await audit_of(env.store, turn_id)
        assert record.principal == "dingtalk:staff001"
        [call] = record.tool_calls
        assert (call["name"], call["arguments"], call["ok"]) == ("trace", {"target": "api.example.com"}, True)


STAGING_ONLY = {
    "default_role": "none",
    "roles": {
        "staging-viewer": {"members": ["dingtalk:staff002"], "tools": ["find_resource", "trace"],
                           "scopes": [{"provider": "tencent", "account": "staging"}]},
    },
}


async def test_a_dingtalk_asker_scoped_to_staging_never_reaches_the_prod_account(make_env: EnvFactory) -> None:
    with (FakeTencentEstate(secret_id="prod-id", secret_key="prod-KEY") as prod,
          FakeTencentEstate(secret_id="stg-id", secret_key="stg-KEY") as staging):
        tencent = cloud_section(cloud_account("prod", prod, "prod-id", "prod-KEY", GUANGZHOU),
                                cloud_account("staging", staging, "stg-id", "stg-KEY", GUANGZHOU))
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), tencent=tencent, toolsets=ESTATE_TOOLSETS)
        calls: list[ToolCallSpec] = [("c1", "find_resource", {"query": "10.0.3.7"})]
        async with on_dingtalk(make_env, config, calls, access_config=STAGING_ONLY) as env:
            content, turn_id = await final_card(env, "10.0.3.7 是什么？", "staff002")
            assert prod.calls() == [], "the scoped asker's lookup called the prod account"
            assert staging.actions("DescribeDBInstances"), "the staging account was asked"
            assert status_line(content, "find_resource").endswith("1 database found: orders-db")
            for shown in (tool_results(env.llm_server)["c1"], content):
                assert "database orders-db [cdb-ord00001] | Tencent Cloud staging/ap-guangzhou" in shown
                assert "Tencent Cloud prod" not in shown
            record = await audit_of(env.store, turn_id)
            assert (record.principal, record.role) == ("dingtalk:staff002", "staging-viewer")
            assert [c["arguments"] for c in record.tool_calls] == [{"query": "10.0.3.7"}]
