"""A turn's observers (usage rows, metrics, the answer on record) are told before its store writes, not after.

The store here is a real SQLite file held busy by another connection's open
write transaction: the turn's audit record waits for it, and nothing the
observers keep may wait with it (or be lost when that write is cut short).
(The card's open-card record is dropped first, and gives up after SQLite's
busy timeout: the turn ends about 5 s after its card is final.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage
from botgateway.model import LLMClient
from botgateway.sink import CardTarget
from botgateway.stores.base import UsageRow
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolRegistry
from botgateway.usage import Pricing, UsageRecorder, UsageWriter
from tests.fakes.gateway import GatedFinalizeSink
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


class Told:
    """A usage listener (as the Prometheus counters are one) that says when it was told of a row."""

    def __init__(self) -> None:
        self.rows: list[UsageRow] = []
        self.event = asyncio.Event()

    def usage_recorded(self, row: UsageRow) -> None:
        self.rows.append(row)
        self.event.set()


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer([Script.text("web-1 is fine.", usage=(40, 8))]) as running:
        yield running


async def test_the_observers_are_told_while_the_store_is_held_busy_and_the_audit_lands_after(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    path = tmp_path / "gw.db"
    config = parse_config({"llm": {"provider": "custom", "base_url": server.base_url, "model": "m"}}, env={})
    store = SqliteStore(path)
    await store.open()
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    client = LLMClient(config.llm, base_url=server.base_url)
    loop = ToolLoop(client, ToolRegistry([]), memory, max_rounds=2, system_prompt="sys")
    told = Told()
    recorder = UsageRecorder(UsageWriter(store), Pricing(), listeners=[told])
    gateway = Gateway(loop=loop, store=store, budget=RateBudget(), config=config, observers=[recorder])
    sink = GatedFinalizeSink()
    blocker = await aiosqlite.connect(path, isolation_level=None)
    try:
        target = CardTarget(platform="test", chat_id="chat-1", user_id="alice", locale="en")
        msg = InboundMessage("test", "m-1", "conv-a", "is web-1 fine?", target,
                             ToolContext(user_id="alice", platform="test", chat_id="chat-1"))
        submission = await gateway.submit(msg, sink, BufferPolicy.from_config(config.adapters.terminal.policy))
        assert submission.done is not None
        await sink.finalizing.wait()
        await memory.flush()  # the turn's history is written: from here on only the turn's end writes
        await blocker.execute("BEGIN IMMEDIATE")  # another connection holds the file's write lock
        sink.release.set()

        # The card is final and the turn ends: its usage is told at once, while its audit record still waits.
        ended = asyncio.ensure_future(asyncio.shield(submission.done))
        await asyncio.wait({ended, asyncio.ensure_future(told.event.wait())}, return_when=asyncio.FIRST_COMPLETED)
        assert told.rows and not ended.done()
        [row] = told.rows
        assert (row.turn_id, row.prompt_tokens, row.completion_tokens) == (submission.turn_id, 40, 8)

        await blocker.rollback()  # the file is free again: the audit record and the rows land
        assert (await ended).outcome == "done"
        assert [record.turn_id for record in await store.audit_records()] == [submission.turn_id]
        await recorder.writer.flush()
        assert [r.turn_id for r in await store.usage_rows()] == [submission.turn_id]
        answer = await gateway.answer(submission.turn_id)  # the answer on record, for its Refresh and votes
        assert answer is not None and answer.question == "is web-1 fine?"
    finally:
        await blocker.close()
        await gateway.aclose()
        await recorder.aclose()
        await client.aclose()
        await memory.aclose()
        await store.close()
