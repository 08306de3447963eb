"""Memory: whole turns, a token budget, summaries by the model, and the deterministic fallback.

The store is a real SQLite file and a real Redis (each test runs on both); the summarizer is the real ``LLMClient.complete``
talking to the scripted OpenAI-compatible server, except where a plain async
function is the clearer stand-in for the seam (hanging, cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.config import LLMConfig
from botgateway.history import (
    MESSAGE_CHARS,
    SUMMARY_ACK,
    SUMMARY_HEADER,
    Memory,
    estimate_text_tokens,
    estimate_tokens,
    summary_text,
)
from botgateway.model import LLMClient
from botgateway.stores.base import Store, StoredTurn
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

Message = dict[str, Any]


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Memory is tested on both back-ends (Redis must be running: CI starts it)."""
    prefix = unique_prefix()
    store: SqliteStore | RedisStore
    store = SqliteStore(tmp_path / "memory.db") if request.param == "sqlite" else RedisStore(REDIS_URL, prefix)
    await store.open()
    yield store
    await store.close()
    if request.param == "redis":
        await purge_prefix(prefix)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
async def llm(server: ScriptedLLMServer) -> AsyncIterator[LLMClient]:
    config = LLMConfig(provider="custom", base_url=server.base_url, model="scripted-model", max_retries=0)
    client = LLMClient(config)
    yield client
    await client.aclose()


def plain_turn(n: int, size: int = 200) -> list[Message]:
    """About 110 estimated tokens."""
    return [
        {"role": "user", "content": f"question {n} " + "q" * size},
        {"role": "assistant", "content": f"answer {n} " + "a" * size},
    ]


def tool_turn(n: int, size: int = 200) -> list[Message]:
    call_id = f"call_{n}"
    return [
        {"role": "user", "content": f"question {n} which host is 10.0.0.{n}?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "find_host", "arguments": f'{{"ip": "10.0.0.{n}"}}'}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"host-{n} running " + "r" * size},
        {"role": "assistant", "content": f"answer {n}: host-{n}"},
    ]


async def commit_all(memory: Memory, conversation: str, turns: list[list[Message]], start: int = 1) -> None:
    for n, messages in enumerate(turns, start):
        await memory.commit(conversation, f"t{n}", messages)


async def stored(memory: Memory, conversation: str) -> list[StoredTurn]:
    """What the store holds once the history writer has caught up (it writes behind the turn)."""
    await memory.flush()
    return await memory.store.load_turns(conversation)


def assert_well_formed(messages: list[Message]) -> None:
    """What every provider requires: no system message here, each tool result right after its call."""
    assert all(m["role"] != "system" for m in messages)
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, f"orphan tool result {message['tool_call_id']}"
            open_calls.discard(message["tool_call_id"])
        else:
            assert not open_calls, f"tool calls without results: {open_calls}"
            open_calls = {call["id"] for call in message.get("tool_calls") or ()}
    assert not open_calls


def contents(messages: list[Message]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


# --- token estimate ---------------------------------------------------------------


def test_estimate_counts_cjk_per_character_and_other_text_per_four() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("你好世界") == 4
    assert estimate_text_tokens("한국𠀀ｘ") == 4  # Hangul, CJK ext. B (beyond the BMP), full-width forms
    assert estimate_text_tokens("abcdefgh") == 2
    assert estimate_text_tokens("abcdefghi") == 3
    assert estimate_text_tokens("服务器 web-01 在哪？") == 6 + 2  # 服务器在哪？ one each; " web-01 " is 8 chars
    # The per-message overhead and tool calls count too.
    plain = estimate_tokens([{"role": "user", "content": "abcd"}])
    with_call = estimate_tokens(
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "abcd", "arguments": "{}"}}]}]
    )
    assert plain == 1 + 4
    assert with_call > plain


# --- under and over budget ----------------------------------------------------------


async def test_under_budget_history_is_returned_whole_without_a_summary(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=2000, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(1), tool_turn(2)])

    history = await memory.history("c")

    assert history == plain_turn(1) + tool_turn(2)
    assert server.requests == []


async def test_over_budget_old_turns_are_summarized_by_the_model(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])
    server.enqueue(Script.text("The user asked questions 1-4; nothing is pending."))

    history = await memory.history("c")

    # The request: a system instruction, then the transcript of the folded turns only.
    assert len(server.requests) == 1
    request = server.requests[0]["messages"]
    assert request[0]["role"] == "system" and "summary" in request[0]["content"]
    assert "Previous summary:\n(none)" in request[1]["content"]
    for n in range(1, 5):
        assert f"User: question {n} " in request[1]["content"]
    assert "question 5" not in request[1]["content"] and "question 6" not in request[1]["content"]
    assert "tools" not in server.requests[0]

    # The history: the summary pair, then the two recent turns verbatim, within the budget.
    assert history[0] == {"role": "user", "content": f"{SUMMARY_HEADER}\nThe user asked questions 1-4; nothing is pending."}
    assert history[1] == {"role": "assistant", "content": SUMMARY_ACK}
    assert history[2:] == plain_turn(5) + plain_turn(6)
    assert estimate_tokens(history) <= 300
    assert_well_formed(history)

    # The store was rewritten atomically: the summary replaced t1..t4.
    in_store = await stored(memory, "c")
    assert [t.turn_id for t in in_store][1:] == ["t5", "t6"]
    assert in_store[0].is_summary
    # Loading again needs no second summary.
    assert await memory.history("c") == history
    assert len(server.requests) == 1


async def test_the_next_summary_includes_the_previous_one(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 5)])
    server.enqueue(Script.text("FIRST SUMMARY: questions 1-2."), Script.text("SECOND SUMMARY: questions 1-4."))
    await memory.history("c")

    await commit_all(memory, "c", [plain_turn(n) for n in range(5, 7)], start=5)
    history = await memory.history("c")

    second = server.requests[1]["messages"][1]["content"]
    assert "Previous summary:\nFIRST SUMMARY: questions 1-2." in second
    assert "User: question 3 " in second and "User: question 4 " in second
    assert "question 5" not in second
    assert summary_text((await stored(memory, "c"))[0]) == "SECOND SUMMARY: questions 1-4."
    assert history[0]["content"].endswith("SECOND SUMMARY: questions 1-4.")
    assert sum(1 for m in history if m["content"] and SUMMARY_HEADER in m["content"]) == 1
    assert [t.turn_id for t in await stored(memory, "c")][1:] == ["t5", "t6"]


async def test_an_overlong_summary_is_cut_to_fit(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=1, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 5)])
    server.enqueue(Script.text("word " * 2000, chunk_size=200))

    history = await memory.history("c")

    assert estimate_tokens(history) <= 300
    assert history[0]["content"].startswith(SUMMARY_HEADER)


# --- tool calls stay with their results ---------------------------------------------


async def test_tool_calls_are_never_split_from_their_results(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=400, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [tool_turn(n) for n in range(1, 7)])
    server.enqueue(Script.text("Hosts 10.0.0.1-4 were looked up."))

    history = await memory.history("c")

    assert_well_formed(history)
    assert history[2:] == tool_turn(5) + tool_turn(6)
    transcript = server.requests[0]["messages"][1]["content"]
    assert 'Assistant called tool find_host with {"ip": "10.0.0.1"}' in transcript
    assert "Result of find_host: host-1 running" in transcript


async def test_fallback_drops_whole_tool_turns(store: Store) -> None:
    async def broken(_: list[Message]) -> str:
        raise RuntimeError("model down")

    memory = Memory(store, max_history_tokens=400, keep_recent_turns=1, summarizer=broken)
    turns = [tool_turn(n) for n in range(1, 7)]
    await commit_all(memory, "c", turns)

    history = await memory.history("c")

    assert_well_formed(history)
    assert estimate_tokens(history) <= 400
    # A suffix of whole turns: the newest ones, never a part of one.
    kept = len(history) // 4
    assert kept >= 1 and len(history) == kept * 4
    assert history == [m for t in turns[-kept:] for m in t]


async def test_commit_refuses_a_turn_with_a_dangling_tool_call(store: Store) -> None:
    memory = Memory(store, max_history_tokens=1000, keep_recent_turns=1)
    broken = tool_turn(1)
    del broken[2]  # the tool result
    with pytest.raises(ValueError, match="without results"):
        await memory.commit("c", "t1", broken)
    with pytest.raises(ValueError, match="unknown call"):
        await memory.commit("c", "t2", [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "?"}])
    assert await stored(memory, "c") == []


# --- the deterministic fallback ------------------------------------------------------


async def test_model_error_falls_back_to_dropping_oldest_and_keeps_the_store(
    store: Store, llm: LLMClient, server: ScriptedLLMServer
) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])
    server.enqueue(Script.error(500, "upstream overloaded"))

    history = await memory.history("c")

    assert len(server.requests) == 1  # the summary was attempted
    assert history == plain_turn(5) + plain_turn(6)
    assert SUMMARY_HEADER not in contents(history)
    # A passing outage costs no history: the next attempt can still summarize everything.
    assert [t.turn_id for t in await stored(memory, "c")] == ["t1", "t2", "t3", "t4", "t5", "t6"]


async def test_a_failing_summarizer_cannot_let_the_store_grow_without_bound(store: Store) -> None:
    async def broken(_: list[Message]) -> str:
        raise RuntimeError("model down")

    memory = Memory(store, max_history_tokens=250, keep_recent_turns=1, summarizer=broken, hard_limit_factor=4)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 11)])  # ~1100 tokens > 4 x 250

    history = await memory.history("c")

    assert history == plain_turn(9) + plain_turn(10)
    assert [t.turn_id for t in await stored(memory, "c")] == ["t9", "t10"]


async def test_empty_summary_falls_back(store: Store, llm: LLMClient, server: ScriptedLLMServer) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])
    server.enqueue(Script.text("   "))

    history = await memory.history("c")

    assert history == plain_turn(5) + plain_turn(6)
    assert not any(t.is_summary for t in await stored(memory, "c"))


async def test_hanging_summarizer_times_out_into_the_fallback(store: Store) -> None:
    never = asyncio.Event()

    async def hangs(_: list[Message]) -> str:
        await never.wait()
        return "unreachable"

    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=hangs, summary_timeout_s=0.2)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])

    history = await asyncio.wait_for(memory.history("c"), 10)

    assert history == plain_turn(5) + plain_turn(6)


async def test_without_a_summarizer_the_oldest_turns_are_dropped_for_good(store: Store) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=1)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 6)])

    history = await memory.history("c")

    assert history == plain_turn(4) + plain_turn(5)
    assert [t.turn_id for t in await stored(memory, "c")] == ["t4", "t5"]


async def test_recent_turns_over_budget_are_kept_as_turns_but_cut_to_fit(store: Store) -> None:
    memory = Memory(store, max_history_tokens=200, keep_recent_turns=2)
    await commit_all(memory, "c", [plain_turn(n, size=600) for n in range(1, 4)])

    history = await memory.history("c")

    # The two newest turns, each message there with its beginning, cut so the whole fits the budget.
    whole = plain_turn(2, size=600) + plain_turn(3, size=600)
    assert [m["role"] for m in history] == [m["role"] for m in whole]
    for sent, original in zip(history, whole, strict=True):
        head = sent["content"].split("\n[", 1)[0]
        assert original["content"].startswith(head) and len(head) > 20
        assert "characters left out" in sent["content"]
    assert estimate_tokens(history) <= 200
    # Only what is sent is cut: the store keeps the turns whole.
    assert [t.messages for t in await stored(memory, "c")][-2:] == [tuple(plain_turn(2, 600)), tuple(plain_turn(3, 600))]


async def test_a_huge_newest_turn_stored_by_an_older_release_is_cut_to_the_budget(store: Store) -> None:
    huge = [{"role": "user", "content": "Please read this log:\n" + "E" * 150_000}, {"role": "assistant", "content": "It is long."}]
    await store.append_turn("c", StoredTurn(turn_id="t1", messages=tuple(huge), created_at=1.0))
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)

    history = await memory.history("c")

    assert estimate_tokens(history) <= 6000
    assert history[0]["content"].startswith("Please read this log:\nEEEE")
    assert history[1] == {"role": "assistant", "content": "It is long."}  # the short message is left whole
    assert (await stored(memory, "c"))[0].messages == tuple(huge)


async def test_cutting_to_fit_keeps_tool_calls_with_their_results(store: Store) -> None:
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2)
    await commit_all(memory, "c", [tool_turn(1, size=5000), tool_turn(2, size=5000)])

    history = await memory.history("c")

    assert_well_formed(history)
    assert estimate_tokens(history) <= 300
    assert [m.get("tool_calls") for m in history] == [m.get("tool_calls") for m in tool_turn(1) + tool_turn(2)]


async def test_cancelled_summary_leaves_the_store_untouched(store: Store) -> None:
    entered = asyncio.Event()
    never = asyncio.Event()

    async def slow(_: list[Message]) -> str:
        entered.set()
        await never.wait()
        return "unreachable"

    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=slow)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])
    task = asyncio.create_task(memory.history("c"))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [t.turn_id for t in await stored(memory, "c")] == ["t1", "t2", "t3", "t4", "t5", "t6"]


async def test_concurrent_history_calls_summarize_once(store: Store) -> None:
    calls: list[list[Message]] = []
    entered = asyncio.Event()
    release = asyncio.Event()

    async def summarizer(request: list[Message]) -> str:
        calls.append(request)
        entered.set()
        await release.wait()
        return "one summary"

    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=summarizer)
    await commit_all(memory, "c", [plain_turn(n) for n in range(1, 7)])
    first = asyncio.create_task(memory.history("c"))
    second = asyncio.create_task(memory.history("c"))
    await asyncio.wait_for(entered.wait(), 10)
    release.set()
    a, b = await asyncio.gather(first, second)

    assert a == b
    assert len(calls) == 1
    assert sum(t.is_summary for t in await stored(memory, "c")) == 1


# --- clear ----------------------------------------------------------------------------


async def test_clear_forgets_one_conversation(store: Store) -> None:
    memory = Memory(store, max_history_tokens=2000, keep_recent_turns=2)
    await memory.commit("a", "a1", plain_turn(1))
    await memory.commit("b", "b1", plain_turn(2))

    await memory.clear("a")

    assert await memory.history("a") == []
    assert await memory.history("b") == plain_turn(2)
    await memory.commit("a", "a2", plain_turn(3))
    assert await memory.history("a") == plain_turn(3)


async def test_history_returns_copies(store: Store) -> None:
    memory = Memory(store, max_history_tokens=2000, keep_recent_turns=2)
    turn = tool_turn(1)
    await memory.commit("c", "t1", turn)
    turn[0]["content"] = "changed by the caller after commit"
    history = await memory.history("c")
    history[1]["tool_calls"].clear()
    assert await memory.history("c") == tool_turn(1)


async def test_a_huge_older_turn_is_cut_in_the_summary_request(store: Store, llm: LLMClient, server: ScriptedLLMServer) -> None:
    huge = [{"role": "user", "content": "Please read this log:\n" + "E" * 150_000}, {"role": "assistant", "content": "It is long."}]
    await store.append_turn("c", StoredTurn(turn_id="t1", messages=tuple(huge), created_at=1.0))
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=1, summarizer=llm.complete)
    await commit_all(memory, "c", [plain_turn(2)], start=2)
    server.enqueue(Script.text("The user shared a long error log."))

    history = await memory.history("c")

    transcript = server.requests[0]["messages"][1]["content"]
    assert "User: Please read this log:\nEEEE" in transcript and len(transcript) < 10_000
    assert f"{150_000 + 22 - MESSAGE_CHARS} more characters" in transcript
    assert history[2:] == plain_turn(2) and estimate_tokens(history) <= 300
