"""Recovery after a restart under the same instance identity: its own left cards are closed at once.

Real tool loop against the scripted OpenAI-compatible server, real SQLite store
(one file shared by the "processes"), the real CardStreamer and a recording
CardSink. A "kill -9" is a gateway whose state is dropped without ``aclose``:
its heartbeat stays live for ``instance_ttl_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission
from botgateway.model import LLMClient
from botgateway.sink import CardTarget, target_to_dict
from botgateway.stores.base import OpenCard
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import Tool, ToolContext, ToolRegistry, tool
from tests.fakes.gateway import RecordingSink
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


@dataclass
class Process:
    """One gateway process on the shared SQLite file."""

    server: ScriptedLLMServer
    store: SqliteStore
    gateway: Gateway
    sink: RecordingSink

    async def submit(self, text: str) -> Submission:
        target = CardTarget(platform="test", chat_id="chat-1", user_id="alice", user_name="alice", locale="en")
        ctx = ToolContext(user_id="alice", user_name="alice", platform="test", chat_id="chat-1")
        msg = InboundMessage("test", f"m-{text}", "conv-a", text, target, ctx)
        return await self.gateway.submit(msg, self.sink, BufferPolicy.from_config())


@asynccontextmanager
async def process(
    tmp_path: Path, instance_id: str, *, responder: Any = None, tools: tuple[Tool, ...] = ()
) -> AsyncIterator[Process]:
    """A gateway with ``instance_id`` on ``tmp_path``'s SQLite file, started (beating), closed on exit."""
    server = ScriptedLLMServer(responder=responder)
    base_url = await server.start()
    config = parse_config({"llm": {"provider": "custom", "base_url": base_url, "model": "m"}}, env={})
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    llm = LLMClient(config.llm, base_url=base_url)
    loop = ToolLoop(llm, ToolRegistry(list(tools)), memory, max_rounds=4, system_prompt="sys")
    gateway = Gateway(loop=loop, store=store, budget=RateBudget(), config=config, instance_id=instance_id)
    try:
        await gateway.start()
        yield Process(server, store, gateway, RecordingSink())
    finally:
        await gateway.aclose()
        await llm.aclose()
        await memory.aclose()  # history written behind the turns lands before the store closes
        await store.close()
        await server.stop()


def _held(gate: asyncio.Event) -> Any:
    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()  # the turn stays mid-answer
        return Script.text("done now")

    return responder


async def _recorded(store: Any) -> list[Any]:
    """The open cards on record, once there is one: a card's record is written behind its creation."""
    async with asyncio.timeout(10):
        while not (cards := await store.open_cards()):
            await asyncio.sleep(0.01)  # polls the store for the record; the write has no event to await
    return cards


async def test_a_restarted_process_closes_its_own_left_cards_at_start_while_other_replicas_wait(tmp_path: Path) -> None:
    gate = asyncio.Event()
    async with process(tmp_path, "host-1", responder=_held(gate)) as first:
        try:
            sub = await first.submit("a long question")
            await first.server.wait_for_requests(1)
            [card] = await _recorded(first.store)
            assert card.owner == "host-1"
            # "host-1" is killed here: its heartbeat stays live for instance_ttl_s (30 s).

            async with process(tmp_path, "host-2") as other:  # another replica waits for that heartbeat to expire
                assert await other.gateway.recovery.recover_open_cards({"test": other.sink}, at_start=True) == 0

            async with process(tmp_path, "host-1") as restarted:  # the same identity, restarted: closes it at once
                recovery = restarted.gateway.recovery
                assert await recovery.recover_open_cards({"test": restarted.sink}) == 0  # only at start
                assert await recovery.recover_open_cards({"test": restarted.sink}, at_start=True) == 1
                final = restarted.sink.cards[card.card_id]
                assert final.status == "failed" and "ask again" in final.error
                assert restarted.sink.targets[card.card_id].turn_id == sub.turn_id
                assert await restarted.store.open_cards() == []
        finally:
            gate.set()


async def test_at_start_the_cards_of_this_process_are_spared(tmp_path: Path) -> None:
    gate = asyncio.Event()
    async with process(tmp_path, "host-1", responder=_held(gate)) as h:
        sub = await h.submit("a long question")
        await h.server.wait_for_requests(1)
        await _recorded(h.store)
        # Held by a running turn of this process: never an orphan, whatever its owner says.
        assert await h.gateway.recovery.recover_open_cards({"test": h.sink}, at_start=True) == 0
        assert [c.turn_id for c in await h.store.open_cards()] == [sub.turn_id]
        gate.set()
        assert (await asyncio.wait_for(sub.done, 10)).outcome == "done"


async def test_a_killed_turn_still_has_its_tool_calls_in_the_audit(tmp_path: Path) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    @tool
    def find_server(query: str) -> str:
        """Find a server.

        Args:
            query: IP or name.
        """
        return f"web-1 is {query}"

    @tool
    async def list_alarms(region: str) -> str:
        """List the alarms of a region.

        Args:
            region: Region name.
        """
        entered.set()
        await gate.wait()  # the process is killed while this call runs
        return "none"

    async def responder(body: dict[str, Any]) -> Script:
        if len(body["messages"]) == 2:  # system prompt and question: the first round
            return Script.tool_calls([("c1", "find_server", {"query": "10.0.1.100"})])
        return Script.tool_calls([("c2", "list_alarms", {"region": "dc1"})])

    async with process(tmp_path, "host-1", responder=responder, tools=(find_server, list_alarms)) as first:
        try:
            sub = await first.submit("which server is 10.0.1.100, and any alarms?")
            await asyncio.wait_for(entered.wait(), 10)
            # What a restarted process (another store on the same file) finds in the audit log.
            reader = SqliteStore(tmp_path / "gw.db")
            try:
                await reader.open()
                records = await _until(lambda: reader.audit_records(), lambda found: _calls(found) == 2)
            finally:
                await reader.close()
            [killed] = records
            assert (killed.turn_id, killed.outcome, killed.user_id) == (sub.turn_id, "unfinished", "alice")
            assert killed.question == "which server is 10.0.1.100, and any alarms?"
            found, running = killed.tool_calls
            assert found["name"] == "find_server" and found["arguments"] == {"query": "10.0.1.100"} and found["ok"] is True
            assert (running["name"], running["arguments"]) == ("list_alarms", {"region": "dc1"})
            assert "ok" not in running  # it never ended
        finally:
            gate.set()


def _calls(records: list[Any]) -> int:
    return sum(len(record.tool_calls) for record in records)


async def _until(read: Any, holds: Any, timeout: float = 10.0) -> Any:
    """Poll ``await read()`` until ``holds(value)`` and return the value; the timeout only proves "not stuck"."""
    async with asyncio.timeout(timeout):
        while not holds(value := await read()):
            await asyncio.sleep(0.02)
    return value


async def test_a_left_card_keeps_the_outside_data_it_showed_above_its_turn(tmp_path: Path) -> None:
    """An alert's investigation card closed by recovery still shows the alert (its turn saved it on the target)."""
    async with process(tmp_path, "host-1") as h:
        target = CardTarget(platform="test", chat_id="C1", turn_id="t1", extra={"preamble": "🔥 Firing · HostDown"})
        await h.store.add_open_card(OpenCard(platform="test", card_id="card-9", turn_id="t1",
                                             target={"target": target_to_dict(target)},
                                             created_at=time.time() - 3600, owner="a-gone-host"))
        assert await h.gateway.recovery.recover_open_cards({"test": h.sink}, at_start=True) == 1
        final = h.sink.cards["card-9"]
        assert final.status == "failed" and final.preamble == "🔥 Firing · HostDown" and "ask again" in final.error
