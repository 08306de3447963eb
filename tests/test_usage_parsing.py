"""Token usage as providers report it: cached and reasoning tokens, and the model, from the streamed usage chunk.

The assembler reads the shapes of OpenAI (``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``), DeepSeek (``prompt_cache_hit_tokens``)
and Moonshot (a bare ``cached_tokens``); the loop reports each round's counts and the
model that answered in its :class:`UsageReported`, through the real SDK and the scripted server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from botgateway.events import TurnDone, Usage, UsageReported
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient, StreamAssembler
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.llm import llm_config
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer


def assemble(chunks: list[dict[str, Any]]) -> Any:
    assembler = StreamAssembler()
    for raw in chunks:
        assembler.feed(orjson.loads(json.dumps(raw)))  # as botgateway.model.sse parses the wire
    return assembler.finish()


def text_round(usage: dict[str, Any], **envelope: Any) -> list[dict[str, Any]]:
    return [{**envelope, "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]},
            {**envelope, "choices": [], "usage": usage}]


def test_openai_cached_and_reasoning_details() -> None:
    usage = {
        "prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0},
    }
    result = assemble(text_round(usage, model="gpt-4o-2024-08-06"))
    assert result.usage == Usage(prompt_tokens=1200, completion_tokens=300, cached_tokens=1024, reasoning_tokens=256)
    assert result.model == "gpt-4o-2024-08-06"


def test_deepseek_cache_hit_tokens() -> None:
    usage = {"prompt_tokens": 900, "completion_tokens": 40, "prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 260,
             "completion_tokens_details": {"reasoning_tokens": 12}}
    assert assemble(text_round(usage)).usage == Usage(prompt_tokens=900, completion_tokens=40, cached_tokens=640,
                                                      reasoning_tokens=12)


def test_moonshot_bare_cached_tokens_inside_the_choice() -> None:
    chunks = [{"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop",
                            "usage": {"prompt_tokens": 50, "completion_tokens": 5, "cached_tokens": 32}}]}]
    assert assemble(chunks).usage == Usage(prompt_tokens=50, completion_tokens=5, cached_tokens=32)


@pytest.mark.parametrize(
    "details",
    [
        {"prompt_tokens_details": None, "completion_tokens_details": None},
        {"prompt_tokens_details": {"cached_tokens": "lots"}, "completion_tokens_details": {"reasoning_tokens": -3}},
        {"prompt_tokens_details": [], "completion_tokens_details": {"reasoning_tokens": True}},
    ],
)
def test_malformed_details_count_as_none_and_keep_the_totals(details: dict[str, Any]) -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 4, **details}
    assert assemble(text_round(usage)).usage == Usage(prompt_tokens=10, completion_tokens=4)


def test_a_part_never_exceeds_its_total() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 99},
             "completion_tokens_details": {"reasoning_tokens": 50}}
    assert assemble(text_round(usage)).usage == Usage(prompt_tokens=10, completion_tokens=4, cached_tokens=10,
                                                      reasoning_tokens=4)


def test_no_model_in_the_chunks_is_empty() -> None:
    assert assemble(text_round({"prompt_tokens": 1, "completion_tokens": 1})).model == ""


# --- through the loop ---------------------------------------------------------------------


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ScriptedLLMServer, ToolLoop]]:
    store = SqliteStore(tmp_path / "history.db")
    await store.open()
    async with ScriptedLLMServer() as server:
        llm = LLMClient(llm_config(server.base_url, model="configured-model"), backoff_base_s=0.01)
        memory = Memory(store, max_history_tokens=100_000, keep_recent_turns=2)
        try:
            yield server, ToolLoop(llm, ToolRegistry(default_timeout_s=5), memory, max_rounds=2, system_prompt="test")
        finally:
            await memory.aclose()
            await llm.aclose()
            await store.close()


async def test_the_loop_reports_cached_reasoning_and_the_model_each_round(
    served: tuple[ScriptedLLMServer, ToolLoop],
) -> None:
    server, loop = served
    usage = {"prompt_tokens": 700, "completion_tokens": 90, "total_tokens": 790,
             "prompt_tokens_details": {"cached_tokens": 512}, "completion_tokens_details": {"reasoning_tokens": 60}}
    server.enqueue(Script(chunks=[
        {**role_chunk(), "model": "deepseek-reasoner-0528"}, *text_chunks("web-1 is up."), finish_chunk(),
        {"choices": [], "usage": usage, "model": "deepseek-reasoner-0528"},
    ]))
    events = [event async for event in loop.run_turn("conv", "is web-1 up?", ToolContext(user_id="U1", platform="cli"))]

    # The request asked for the usage chunk.
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    reported = [e for e in events if isinstance(e, UsageReported)]
    assert reported == [UsageReported(prompt_tokens=700, completion_tokens=90, cached_tokens=512, reasoning_tokens=60,
                                      model="deepseek-reasoner-0528")]
    done = events[-1]
    assert isinstance(done, TurnDone)
    assert done.result.usage == Usage(prompt_tokens=700, completion_tokens=90, cached_tokens=512, reasoning_tokens=60)


async def test_a_provider_naming_no_model_is_reported_under_the_configured_one(
    served: tuple[ScriptedLLMServer, ToolLoop],
) -> None:
    server, loop = served
    # Raw SSE payloads: the scripted server would fill a chunk dict's missing ``model`` with its own.
    bare = [json.dumps(c) for c in [role_chunk(), *text_chunks("fine"), finish_chunk(),
                                    {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}]]
    server.enqueue(Script(chunks=bare))
    events = [event async for event in loop.run_turn("conv", "ok?", ToolContext(user_id="U1", platform="cli"))]
    assert [e for e in events if isinstance(e, UsageReported)] == [
        UsageReported(prompt_tokens=9, completion_tokens=2, model="configured-model")
    ]
