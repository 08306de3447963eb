"""Usage rows written behind: in order and in groups, retried while the store fails, drained at a clean shutdown;
and the gateway's own model calls (history summaries) recorded as principal ``gateway``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from botgateway.config.usage import UsageConfig
from botgateway.history import Memory
from botgateway.model import LLMClient
from botgateway.stores.base import AuditRecord, StoreError, UsageRow
from botgateway.stores.sqlite import SqliteStore
from botgateway.usage import Pricing, UsageRecorder, UsageWriter, usage_rows_of
from tests.adapters.log_lines import captured_log
from tests.fakes.llm import llm_config
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer


class UsageSink:
    """A store's usage side only: fails ``failures`` times, or holds each write until ``gate`` opens."""

    def __init__(self, failures: int = 0, *, forever: bool = False, gate: asyncio.Event | None = None) -> None:
        self.failures = failures
        self.forever = forever
        self.gate = gate
        self.batches: list[list[UsageRow]] = []
        self.attempts = 0

    async def record_usage(self, rows: Sequence[UsageRow]) -> None:
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.forever or self.failures:
            self.failures = max(0, self.failures - 1)
            raise StoreError("cannot reach Redis at redis://127.0.0.1:6379/0")
        self.batches.append(list(rows))


def rows(n: int) -> list[UsageRow]:
    return [UsageRow(at=1000.0 + i, model="m", prompt_tokens=i) for i in range(n)]


async def test_rows_go_in_order_in_groups_of_max_batch() -> None:
    sink = UsageSink()
    writer = UsageWriter(sink, max_batch=2)  # type: ignore[arg-type]
    writer.submit(rows(5))
    await writer.flush()
    assert [[r.prompt_tokens for r in batch] for batch in sink.batches] == [[0, 1], [2, 3], [4]]
    assert len(writer) == 0
    await writer.aclose()


async def test_a_failing_store_is_retried_and_a_clean_shutdown_still_writes_what_is_queued() -> None:
    sink = UsageSink(failures=2)
    writer = UsageWriter(sink)  # type: ignore[arg-type]
    writer.submit(rows(3))
    await writer.aclose()  # no wait before: the rows are still queued behind the failing writes
    assert sink.attempts == 3
    assert [r.prompt_tokens for batch in sink.batches for r in batch] == [0, 1, 2]


async def test_rows_the_store_never_takes_are_logged_at_shutdown_and_later_ones_refused() -> None:
    sink = UsageSink(forever=True)
    writer = UsageWriter(sink, drain_timeout_s=0.2)  # type: ignore[arg-type]
    with captured_log() as logs:
        writer.submit(rows(4))
        await writer.aclose()
        writer.submit(rows(1))
    unsaved = [line for line in logs.since() if line.get("event") == "usage.unsaved"]
    assert [line["rows"] for line in unsaved] == [4, 1]
    assert "redis://" not in str(unsaved)  # the store's message (a URL) stays out of these lines
    assert sink.batches == []


async def test_a_full_queue_drops_the_newest_rows_and_counts_them() -> None:
    gate = asyncio.Event()
    sink = UsageSink(gate=gate)
    writer = UsageWriter(sink, max_queued=3, max_batch=10)  # type: ignore[arg-type]
    writer.submit(rows(2))
    writer.submit(rows(2))  # one fits
    assert writer.dropped == 1 and len(writer) == 3
    gate.set()
    await writer.flush()
    assert [r.prompt_tokens for batch in sink.batches for r in batch] == [0, 1, 0]
    await writer.aclose()


def test_an_audit_records_usage_entries_become_priced_rows() -> None:
    record = AuditRecord(
        turn_id="t1", platform="dingtalk", conversation_id="dingtalk:cid1", user_id="staff7", question="q",
        outcome="stopped", channel="cid1", started_at=500.0,
        extra={"usage": [
            {"at": 501.5, "model": "qwen-max", "prompt_tokens": 1_000_000, "completion_tokens": 1000,
             "cached_tokens": 0, "reasoning_tokens": 0},
            {"model": "qwen-max", "prompt_tokens": "bad", "completion_tokens": None},  # an odd entry counts as zeros
            "not an entry",
        ]},
    )
    pricing = Pricing.from_config(UsageConfig.model_validate({"prices": {"qwen-*": {"prompt": 2, "completion": 6}},
                                                              "currency": "CNY"}))
    found = usage_rows_of(record, pricing)
    assert [(r.at, r.principal, r.channel, r.prompt_tokens, r.cost, r.currency) for r in found] == [
        (501.5, "dingtalk:staff7", "cid1", 1_000_000, pytest.approx(2.006), "CNY"),
        (500.0, "dingtalk:staff7", "cid1", 0, 0.0, "CNY"),
    ]
    assert usage_rows_of(AuditRecord("t2", "slack", "c", "u", "q", "done"), pricing) == []
    # Each row's id is the turn's and the call's place in it: the same record always gives the same ids.
    assert [r.row_id for r in found] == ["t1:0", "t1:1"] == [r.row_id for r in usage_rows_of(record, pricing)]


# --- the gateway's own calls --------------------------------------------------------------


@pytest.fixture
async def summary_setup(tmp_path: Path) -> AsyncIterator[tuple[ScriptedLLMServer, LLMClient, SqliteStore]]:
    store = SqliteStore(tmp_path / "s.db")
    await store.open()
    async with ScriptedLLMServer() as server:
        llm = LLMClient(llm_config(server.base_url, model="qwen-plus"), backoff_base_s=0.01)
        try:
            yield server, llm, store
        finally:
            await llm.aclose()
            await store.close()


async def test_a_history_summary_is_recorded_as_the_gateways_call(
    summary_setup: tuple[ScriptedLLMServer, LLMClient, SqliteStore],
) -> None:
    server, llm, store = summary_setup
    counted: list[UsageRow] = []

    class Listener:
        def usage_recorded(self, row: UsageRow) -> None:
            counted.append(row)

    pricing = Pricing.from_config(UsageConfig.model_validate({"prices": {"qwen-plus": {"prompt": 0.8, "completion": 2}}}))
    recorder = UsageRecorder(UsageWriter(store), pricing, listeners=[Listener()], clock=lambda: 1234.5)
    memory = Memory(store, max_history_tokens=300, keep_recent_turns=2, summarizer=recorder.summarizer(llm, llm.model))
    for n in range(1, 7):
        await memory.commit("c", f"t{n}", [{"role": "user", "content": f"question {n} " + "x" * 200},
                                           {"role": "assistant", "content": f"answer {n} " + "y" * 200}])
    usage = {"prompt_tokens": 420, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 0}}
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("Questions 1-4 were asked."), finish_chunk(),
                                  {"choices": [], "usage": usage}]))

    history = await memory.history("c")
    await memory.aclose()
    await recorder.aclose()

    assert "Questions 1-4 were asked." in str(history[0]["content"])
    [row_id] = [row.row_id for row in counted]
    assert row_id  # a call of its own: its write is idempotent too
    expected = UsageRow(at=1234.5, principal="gateway", model="qwen-plus", purpose="summary", prompt_tokens=420,
                        completion_tokens=30, cost=pytest.approx((420 * 0.8 + 30 * 2) / 1e6), currency="USD",
                        row_id=row_id)
    assert await store.usage_rows() == [expected]
    assert counted == [expected]


async def test_the_summarizer_fails_as_the_model_does(
    summary_setup: tuple[ScriptedLLMServer, LLMClient, SqliteStore],
) -> None:
    server, llm, store = summary_setup
    recorder = UsageRecorder(UsageWriter(store), Pricing())
    server.enqueue(Script.error(400, "bad request"))
    summarize = recorder.summarizer(llm)
    with pytest.raises(Exception) as caught:
        await summarize([{"role": "user", "content": "hi"}])
    assert "bad request" in str(caught.value)
    await recorder.aclose()
    assert await store.usage_rows() == []
