"""Provenance through a whole turn: the real lookup tools against the fake Alibaba Cloud API, the scripted model,
the loop, and the card folding the turn's events.

The footer names the account and regions actually called; the same question
again is answered from the cache, and its tool line and the footer say how old
that answer is; a Refresh (``ToolContext.fresh``) asks the cloud again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import Any

import pytest

from botgateway.cards import render
from botgateway.cards.state import CardState
from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, ToolsConfig
from botgateway.events import ToolCallFinished, TurnDone
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.snapshot import ToolLine
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.clouds import FakeAliyun, aliyun_instance
from tests.fakes.llm import llm_config
from tools.catalog import build_toolset
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

IP = "172.16.1.10"
CTX = ToolContext(user_id="U1", platform="slack")


class ListMemory:
    """A history store kept in a dict (the loop's ``HistoryStore`` seam)."""

    def __init__(self) -> None:
        self.turns: dict[str, list[dict[str, Any]]] = {}

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        return list(self.turns.get(conversation_id, []))

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        self.turns.setdefault(conversation_id, []).extend(messages)


def respond(body: dict[str, Any]) -> Script:
    """Look the address up (each question is a new conversation), then answer."""
    results = [m for m in body["messages"] if m.get("role") == "tool"]
    if not results:
        return Script.tool_calls([("call_1", "search_ecs_by_ip", {"ip": IP})])
    return Script.text("It is prod-api-01.")


@dataclass
class Turn:
    events: list[Any]
    finished: ToolCallFinished
    model_saw: str


@dataclass
class Env:
    aliyun: FakeAliyun
    server: ScriptedLLMServer
    loop: ToolLoop

    def answered_calls(self) -> int:
        """Requests to the regions that answer (a region that refuses is asked every time)."""
        return len(self.aliyun.calls("cn-hangzhou") + self.aliyun.calls("cn-beijing"))

    async def ask(self, conversation: str, ctx: ToolContext = CTX) -> Turn:
        events = [e async for e in self.loop.run_turn(conversation, f"which server is {IP}?", ctx)]
        assert isinstance(events[-1], TurnDone), events[-1]
        [finished] = [e for e in events if isinstance(e, ToolCallFinished)]
        [result] = [m for m in self.server.requests[-1]["messages"] if m.get("role") == "tool"][-1:]
        return Turn(events, finished, result["content"])


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    aliyun = FakeAliyun(
        {"cn-hangzhou": [aliyun_instance("i-bp1aaaaaaaaaaaa01", "prod-api-01", IP)], "cn-beijing": []},
        denied_regions={"cn-shanghai"},
    )
    async with AsyncExitStack() as stack:
        stack.enter_context(aliyun)
        account = CloudAccount(
            name="prod", access_key_id="test-key-id", access_key_secret="s",  # type: ignore[arg-type]
            regions=["cn-hangzhou", "cn-beijing", "cn-shanghai"], endpoint=aliyun.endpoint,
        )
        toolset = await build_toolset(ToolsConfig(
            inventory=InventoryConfig(enabled=False),
            aliyun=CloudProviderConfig(enabled=True, accounts=[account], cache_ttl_s=3600),
        ))
        stack.push_async_callback(toolset.aclose)
        server = ScriptedLLMServer(responder=respond)
        llm = LLMClient(llm_config(await server.start()), backoff_base_s=0.01)
        stack.push_async_callback(server.stop)
        stack.push_async_callback(llm.aclose)
        loop = ToolLoop(llm, ToolRegistry(toolset.tools), ListMemory(), max_rounds=4, system_prompt="sys")
        yield Env(aliyun, server, loop)


def card(turn: Turn, now: float, locale: str = "en") -> tuple[str, str]:
    """The turn's card drawn at ``now``: (its tool line, its footer)."""
    state = CardState(locale=locale, model_label="deepseek-chat", wall_clock=lambda: now, stale_after_s=300)
    for event in turn.events:
        state.apply(event)
    snapshot = state.snapshot()
    [line] = [b for b in snapshot.blocks if isinstance(b, ToolLine)]
    return render.tool_line_text(line, locale), snapshot.footer


async def test_the_card_names_what_was_called_a_cached_answer_shows_its_age_and_refresh_asks_again(env: Env) -> None:
    first = await env.ask("c1")
    asked = env.answered_calls()
    assert {c["region"] for c in env.aliyun.calls()} == {"cn-hangzhou", "cn-beijing", "cn-shanghai"}
    fetched = {s.region: s for s in first.finished.sources}
    assert set(fetched) == {"cn-hangzhou", "cn-beijing"} and not any(s.cached for s in fetched.values())
    oldest = min(s.fetched_at for s in fetched.values())
    line, footer = card(first, now=oldest + 5)
    assert "cached" not in line
    # the denied region answered nothing: it is not a source
    assert footer.endswith("deepseek-chat — sources: Alibaba Cloud prod/cn-hangzhou,cn-beijing"), footer
    assert ' sources="Alibaba Cloud prod/cn-hangzhou (DescribeInstances) fetched ' in first.model_saw

    # The same question twelve minutes later: the cloud is not asked, and the card says how old the answer is.
    cached = await env.ask("c2")
    assert env.answered_calls() == asked  # (a refusal is not cached: cn-shanghai is asked again)
    assert {s.region: s for s in cached.finished.sources} == {r: replace(s, cached=True) for r, s in fetched.items()}
    line, footer = card(cached, now=oldest + 12 * 60)
    assert line.endswith("1 instance found: prod-api-01; Alibaba Cloud failed · cached 12 min ago"), line
    assert footer.endswith("— sources: Alibaba Cloud prod/cn-hangzhou,cn-beijing (12 min old)"), footer
    line, footer = card(cached, now=oldest + 12 * 60, locale="zh-CN")
    assert line.endswith("· 缓存于 12 分钟前") and footer.endswith("来源：阿里云 prod/cn-hangzhou,cn-beijing（12 分钟前）")
    assert ", cached" in cached.model_saw.split(">", 1)[0]  # the model is told too

    # Refresh: the cloud is asked again, and the card shows the new answer as fresh.
    refreshed = await env.ask("c3", replace(CTX, fresh=True))
    assert env.answered_calls() == 2 * asked
    assert not any(s.cached for s in refreshed.finished.sources)
    newest = max(s.fetched_at for s in refreshed.finished.sources)
    line, footer = card(refreshed, now=newest + 1)
    assert "cached" not in line and footer.endswith("sources: Alibaba Cloud prod/cn-hangzhou,cn-beijing"), footer
