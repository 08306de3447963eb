"""Every model call of a turn is recorded: through the real runtime, the scripted model server and SQLite or Redis.

The scripted server sends each round's usage chunk (cached and reasoning tokens
included); the recorded rows must sum to exactly those chunks, carry who asked
where and the model, be costed at the configured prices, reach the Prometheus
counters at once and the store once the runtime shuts down cleanly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cli.runtime import build_runtime
from botgateway.config import parse_config
from botgateway.messages import InboundMessage
from botgateway.sink import CardTarget
from botgateway.stores import open_store
from botgateway.stores.base import UsageRow
from botgateway.tooling import ToolContext
from tests.fakes.gateway import RecordingSink
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks, tool_call_chunks
from tools.demo.server import ScriptedLLMServer

MODEL = "deepseek-chat-v3"
"""What the provider names in its chunks (the config says deepseek-chat)."""

ROUND_USAGE = [
    {"prompt_tokens": 1800, "completion_tokens": 60, "total_tokens": 1860, "prompt_cache_hit_tokens": 1536,
     "completion_tokens_details": {"reasoning_tokens": 20}},
    {"prompt_tokens": 2100, "completion_tokens": 140, "total_tokens": 2240,
     "prompt_tokens_details": {"cached_tokens": 1792}, "completion_tokens_details": {"reasoning_tokens": 45}},
]
"""The usage chunk of each round, as the two shapes providers send (DeepSeek's, OpenAI's)."""

PRICES = {"deepseek-chat*": {"prompt": 0.27, "completion": 1.10, "cached_prompt": 0.07}}


def rounds() -> list[Script]:
    usage = [{"choices": [], "usage": u, "model": MODEL} for u in ROUND_USAGE]
    calling = [{**role_chunk(), "model": MODEL}, *tool_call_chunks([("c1", "find_server", {"query": "10.0.1.100"})]),
               finish_chunk("tool_calls"), usage[0]]
    answering = [{**role_chunk(), "model": MODEL}, *text_chunks("10.0.1.100 is web-01."), finish_chunk(), usage[1]]
    return [Script(chunks=calling), Script(chunks=answering)]


@pytest.fixture(params=["sqlite", "redis"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"sqlite_path": str(tmp_path / "gw.db")}
        return
    prefix = unique_prefix()
    yield {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}
    await purge_prefix(prefix)


async def ask(runtime: Any, text: str, *, user: str = "U0ALICE", chat: str = "C0OPS") -> str:
    target = CardTarget(platform="slack", chat_id=chat, user_id=user, user_name=user)
    msg = InboundMessage("slack", f"m-{text}", f"slack:{chat}", text, target,
                         ToolContext(user_id=user, platform="slack", chat_id=chat))
    submission = await runtime.gateway.submit(msg, RecordingSink(), BufferPolicy.from_config())
    return (await asyncio.wait_for(submission.done, 30)).outcome


async def test_a_turns_model_calls_are_recorded_priced_counted_and_kept_at_shutdown(
    memory: dict[str, Any],
) -> None:
    async with ScriptedLLMServer(rounds()) as server:
        config = parse_config({
            "llm": {"provider": "custom", "base_url": server.base_url, "api_key": "sk-test", "model": "deepseek-chat"},
            "memory": memory,
            "metrics": {"enabled": True},
            "http": {"host": "127.0.0.1", "port": 0},
            "usage": {"prices": PRICES},
        }, env={})
        async with build_runtime(config) as runtime:
            assert runtime.http is not None
            await runtime.http.start()
            assert await ask(runtime, "which server is 10.0.1.100?") == "done"
            async with aiohttp.ClientSession() as http, http.get(f"{runtime.http.url}/metrics") as response:
                metrics = await response.text()
        # The runtime has shut down: what it recorded is in the store, read by another process's view of it.
        store = await open_store(config.memory)
        try:
            rows = await store.usage_rows()
        finally:
            await store.close()

    assert len(rows) == 2
    assert [(r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.reasoning_tokens) for r in rows] == [
        (1800, 60, 1536, 20), (2100, 140, 1792, 45)
    ]
    assert sum(r.prompt_tokens for r in rows) == sum(u["prompt_tokens"] for u in ROUND_USAGE)
    assert sum(r.completion_tokens for r in rows) == sum(u["completion_tokens"] for u in ROUND_USAGE)
    first = rows[0]
    assert (first.principal, first.platform, first.channel, first.model, first.purpose, first.currency) == (
        "slack:U0ALICE", "slack", "C0OPS", MODEL, "turn", "USD"
    )
    assert len({r.turn_id for r in rows}) == 1 and first.turn_id and first.conversation_id == "slack:C0OPS"
    expected = [((p - c) * 0.27 + c * 0.07 + o * 1.10) / 1e6 for p, o, c in ((1800, 60, 1536), (2100, 140, 1792))]
    assert [r.cost for r in rows] == pytest.approx(expected)

    assert f'botgateway_llm_tokens_total{{kind="prompt",model="{MODEL}"}} 3900.0' in metrics
    assert f'botgateway_llm_tokens_total{{kind="cached",model="{MODEL}"}} 3328.0' in metrics
    assert f'botgateway_llm_tokens_total{{kind="completion",model="{MODEL}"}} 200.0' in metrics
    assert f'botgateway_llm_tokens_total{{kind="reasoning",model="{MODEL}"}} 65.0' in metrics
    cost = next(line for line in metrics.splitlines() if line.startswith("botgateway_llm_cost_total{"))
    assert cost.startswith(f'botgateway_llm_cost_total{{currency="USD",model="{MODEL}"}} ')
    assert float(cost.rsplit(" ", 1)[1]) == pytest.approx(sum(expected))


async def test_a_model_without_a_price_is_recorded_without_a_cost(tmp_path: Path) -> None:
    async with ScriptedLLMServer([Script.text("fine", usage=(40, 8))]) as server:
        config = parse_config({
            "llm": {"provider": "custom", "base_url": server.base_url, "api_key": "sk-test", "model": "local-llama"},
            "memory": {"sqlite_path": str(tmp_path / "gw.db")},
            "usage": {"prices": PRICES},
        }, env={})
        async with build_runtime(config) as runtime:
            assert await ask(runtime, "ok?", user="U0BOB", chat="D0BOB") == "done"
        store = await open_store(config.memory)
        try:
            rows = await store.usage_rows()
        finally:
            await store.close()
    # The scripted server names the model it was asked for in every chunk.
    assert [(r.model, r.prompt_tokens, r.completion_tokens, r.cost, r.principal) for r in rows] == [
        ("local-llama", 40, 8, None, "slack:U0BOB")
    ]
    assert isinstance(rows[0], UsageRow)
