"""Recovery after a process died: its questions answered again once, in their cards, or their cards closed with why.

Real tool loop against the scripted OpenAI-compatible server, real stores (one
SQLite file, or one Redis prefix, shared by the "processes"), the real
CardStreamer and a recording CardSink. A "kill -9" is a gateway whose open-card
records are left in the store as they were when it died (its clean shutdown
would remove them; they are put back as it left them). A process of the same
instance id restarted takes care of them at start; another replica once the
owner stops beating.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.limits import SlackBuckets
from adapters.slack.sink import SlackCardSink
from botgateway.answers import as_question
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.caller import BudgetPacer
from botgateway.config import SlackConfig, parse_config
from botgateway.events import ApprovalRequested, ToolCallFinished, ToolCallStarted, TurnEvent
from botgateway.fleet.lease import ConversationLeases
from botgateway.fleet.redis_fleet import fleet_client
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission
from botgateway.model import LLMClient
from botgateway.sink import CardHandle, CardTarget, Replanning, target_to_dict
from botgateway.snapshot import CardSnapshot
from botgateway.stores.base import OpenCard
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import Tool, ToolContext, ToolRegistry, tool
from botgateway.turns.resume_record import RESUMED_FROM, TurnProgress
from botgateway.turns.resumed_card import resumed_sink
from tests.fakes.gateway import RecordingSink
from tests.fakes.restart import restart_tool
from tests.fakes.slack import BOT_TOKEN as SLACK_BOT_TOKEN
from tests.fakes.slack import FakeSlack, Message
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tests.polling import until_read
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

CONVERSATION = "conv-a"
RESUMED = "↻ Resumed after a restart."


@tool(read_only=True)
def find_server(query: str) -> str:
    """Find a server.

    Args:
        query: IP or name.
    """
    return f"web-1 is {query}"


@dataclass
class Process:
    """One gateway process on the shared store."""

    server: ScriptedLLMServer
    store: Any
    memory: Memory
    gateway: Gateway
    sink: RecordingSink

    async def submit(self, text: str) -> Submission:
        return await self.gateway.submit(_message(text), self.sink, BufferPolicy.from_config())

    async def recover(self, *, at_start: bool = True) -> int:
        return await self.gateway.recovery.recover_open_cards({"test": self.sink}, at_start=at_start)


def _message(text: str) -> InboundMessage:
    target = CardTarget(platform="test", chat_id="chat-1", user_id="alice", user_name="alice", locale="en")
    ctx = ToolContext(user_id="alice", user_name="alice", platform="test", chat_id="chat-1")
    return InboundMessage("test", f"m-{text}", CONVERSATION, text, target, ctx)


Store = Callable[[], Awaitable[Any]]
"""Opens the shared store, as a new process would."""


@pytest.fixture
def sqlite(tmp_path: Path) -> Store:
    """One SQLite file, as every process on one host shares it."""
    return _sqlite_at(tmp_path / "gw.db")


@pytest.fixture(params=["sqlite", "redis"])
async def shared(request: Any, tmp_path: Path) -> AsyncIterator[Store]:
    """The store replicas share: one SQLite file, or one Redis (under a prefix of this test alone)."""
    if request.param == "sqlite":
        yield _sqlite_at(tmp_path / "gw.db")
        return
    prefix = unique_prefix()

    async def open_store() -> RedisStore:
        store = RedisStore(REDIS_URL, prefix, history_ttl_s=3600)
        await store.open()
        return store

    try:
        yield open_store
    finally:
        await purge_prefix(prefix)


def _sqlite_at(path: Path) -> Store:
    async def open_store() -> SqliteStore:
        store = SqliteStore(path)
        await store.open()
        return store

    return open_store


@asynccontextmanager
async def process(
    shared: Store | Path, instance_id: str, *, responder: Any = None, tools: tuple[Tool, ...] = (find_server,),
    **gateway: Any,
) -> AsyncIterator[Process]:
    """A gateway with ``instance_id`` on the shared store (a folder: its ``gw.db``), started (beating), closed on
    exit."""
    open_store = _sqlite_at(shared / "gw.db") if isinstance(shared, Path) else shared
    server = ScriptedLLMServer(responder=responder)
    base_url = await server.start()
    config = parse_config({"llm": {"provider": "custom", "base_url": base_url, "model": "m"}, "gateway": gateway},
                          env={})
    store = await open_store()
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    llm = LLMClient(config.llm, base_url=base_url)
    loop = ToolLoop(llm, ToolRegistry(list(tools)), memory, max_rounds=4, system_prompt="sys")
    instance = Gateway(loop=loop, store=store, budget=RateBudget(), config=config, instance_id=instance_id)
    try:
        await instance.start()
        yield Process(server, store, memory, instance, RecordingSink())
    finally:
        await instance.aclose()
        await llm.aclose()
        await memory.aclose()  # history written behind the turns lands before the store closes
        await store.close()
        await server.stop()


def _calls(card: OpenCard) -> list[dict[str, Any]]:
    return list(card.resume.get("calls") or [])


async def _killed_while(first: Process, holds: Callable[[OpenCard], bool]) -> OpenCard:
    """The record of ``first``'s one open card once ``holds(record)``: what the store keeps when it is killed."""
    [card] = await until_read(first.store.open_cards, lambda cards: len(cards) == 1 and holds(cards[0]))
    return card


async def _left_behind(open_store: Store, card: OpenCard) -> None:
    """Put back ``card``'s record as the killed process left it (its test double's clean shutdown removed it)."""
    store = await open_store()
    try:
        await store.add_open_card(card)
    finally:
        await store.close()


def _held(gate: asyncio.Event, *, first: Script | None = None) -> Any:
    """A model that answers the first round with ``first`` (when given), then holds the turn mid-answer."""

    async def responder(body: dict[str, Any]) -> Script:
        if first is not None and len(body["messages"]) == 2:  # system prompt and question: the first round
            return first
        await gate.wait()
        return Script.text("never shown")

    return responder


def _answers(text: str) -> Any:
    async def responder(body: dict[str, Any]) -> Script:
        return Script.text(text)

    return responder


# --- resumed -------------------------------------------------------------------------------------------------------


async def test_a_question_killed_after_read_only_calls_is_answered_again_once_in_its_card(sqlite: Store) -> None:
    gate = asyncio.Event()
    first_round = Script.tool_calls([("c1", "find_server", {"query": "10.0.1.100"})])
    async with process(sqlite, "host-1", responder=_held(gate, first=first_round)) as first:
        try:
            asked = await first.submit("which server is 10.0.1.100?")
            # On record as the turn goes: the question, and the read-only call once it ended.
            left = await _killed_while(first, lambda card: [c.get("ended") for c in _calls(card)] == [True])
        finally:
            gate.set()
    assert left.turn_id == asked.turn_id and _calls(left) == [{"name": "find_server", "read_only": True, "ended": True}]
    await _left_behind(sqlite, left)

    async with process(sqlite, "host-1", responder=_answers("web-1 is 10.0.1.100.")) as restarted:
        assert await restarted.recover() == 1
        resumed = restarted.gateway.running_turn(CONVERSATION)
        assert resumed is not None and resumed != asked.turn_id
        outcome = await asyncio.wait_for(restarted.gateway.wait_turn(resumed), 10)
        assert outcome is not None and outcome.outcome == "done"
        # The same card: updated into the answer, with the note; no card made.
        assert {call.card_id for call in restarted.sink.calls} == {left.card_id}
        assert "create" not in [call.op for call in restarted.sink.calls]
        final = restarted.sink.cards[left.card_id]
        assert (final.status, final.answer, final.preamble) == ("done", "web-1 is 10.0.1.100.", RESUMED)
        assert restarted.sink.targets[left.card_id].turn_id == resumed
        assert restarted.server.request_count == 1  # answered again, once
        assert await restarted.store.open_cards() == []
        assert await restarted.recover(at_start=False) == 0  # nothing left to resume
        await restarted.memory.flush()
        # History: the killed turn left none; the resumed one committed once.
        [turn] = await restarted.store.load_turns(CONVERSATION)
        assert turn.turn_id == resumed
        assert (turn.messages[0]["role"], turn.messages[0]["content"]) == ("user", "which server is 10.0.1.100?")
        # The audit shows both attempts: the first with its call, the second linked to it.
        records = {record.turn_id: record for record in await restarted.store.audit_records()}
        assert [call["name"] for call in records[asked.turn_id].tool_calls] == ["find_server"]
        assert records[resumed].extra[RESUMED_FROM] == asked.turn_id and records[resumed].outcome == "done"


async def test_a_resumed_question_killed_again_is_not_resumed_a_second_time(sqlite: Store) -> None:
    now = time.time()
    await _left_behind(sqlite, _record("which server is 10.0.1.100?", asked_at=now))
    gate = asyncio.Event()
    async with process(sqlite, "host-1", responder=_held(gate)) as second:
        try:
            assert await second.recover() == 1
            # The resumed turn's own record, once written: it says the question was resumed.
            left = await _killed_while(second, lambda card: _question_target(card).get(RESUMED_FROM) == "t-old")
        finally:
            gate.set()
    assert left.resume[RESUMED_FROM] == "t-old" and left.owner == "host-1"
    await _left_behind(sqlite, left)

    async with process(sqlite, "host-1", responder=_answers("never asked")) as third:
        assert await third.recover() == 1
        final = third.sink.cards[left.card_id]
        assert final.status == "failed" and "again, after it had been resumed once" in final.error
        assert third.server.request_count == 0 and await third.store.open_cards() == []


def _question_target(card: OpenCard) -> dict[str, Any]:
    extra: dict[str, Any] = card.resume.get("question", {}).get("message", {}).get("target", {}).get("extra", {})
    return extra


async def test_two_replicas_recovering_at_once_resume_the_question_once(shared: Store) -> None:
    open_store = shared
    await _left_behind(open_store, _record("which server is 10.0.1.100?", asked_at=time.time(), owner="a-gone-host"))
    async with process(open_store, "replica-a", responder=_answers("web-1.")) as a, \
            process(open_store, "replica-b", responder=_answers("web-1.")) as b:
        handled = await asyncio.gather(a.recover(at_start=False), b.recover(at_start=False))
        assert sorted(handled) == [0, 1]
        resumer = a if handled[0] else b
        resumed = resumer.gateway.running_turn(CONVERSATION)
        if resumed is not None:  # else it already ended (checked below by its answer)
            await asyncio.wait_for(resumer.gateway.wait_turn(resumed), 10)
        assert a.server.request_count + b.server.request_count == 1
        assert resumer.sink.cards["card-9"].answer == "web-1." and (a if resumer is b else b).sink.calls == []
        assert await a.store.open_cards() == []


# --- closed with the reason ----------------------------------------------------------------------------------------


def _record(
    text: str, *, asked_at: float, events: tuple[TurnEvent, ...] = (), resumed_from: str = "",
    owner: str = "host-1",
) -> OpenCard:
    """The record of a typed question's card, as a turn that saw ``events`` left it (turn ``t-old``, card ``card-9``)."""
    msg = as_question(_message(text))
    extra = {**msg.target.extra, **({RESUMED_FROM: resumed_from} if resumed_from else {})}
    msg = replace(msg, target=replace(msg.target, turn_id="t-old", extra=extra))
    progress = TurnProgress(msg, "t-old", read_only=lambda name: name == "find_server", asked_at=asked_at)
    for event in events:
        progress.observe(event)
    return OpenCard("test", "card-9", "t-old", target_to_dict(msg.target), asked_at, owner=owner,
                    resume=progress.record())


_STARTED_WRITE = ToolCallStarted(call_id="c1", name="restart_server", arguments={"host": "web-1"})
_ENDED_READ = ToolCallFinished(call_id="c0", name="find_server", ok=True, summary="found", duration_s=0.1)
_APPROVAL = ApprovalRequested(call_id="c0", name="find_server", code="4821", token="x", arguments={}, asker="alice",
                              timeout_s=300)


@pytest.mark.parametrize(
    ("age_s", "events", "resumed_from", "resume", "note"),
    [
        pytest.param(5, (_ENDED_READ, _STARTED_WRITE), "", True, "after calling restart_server, which can change things",
                     id="a-write-call-began"),
        pytest.param(5, (_APPROVAL,), "", True, "while a call waited for an approval", id="an-approval-pending"),
        pytest.param(301, (_ENDED_READ,), "", True, "too old to answer again", id="too-old"),
        pytest.param(5, (), "t-older", True, "after it had been resumed once", id="resumed-before"),
        pytest.param(5, (), "", False, "before the question was on record", id="not-recorded"),
    ],
)
async def test_a_question_that_may_not_run_again_has_its_card_closed_with_the_reason(
    sqlite: Store, age_s: float, events: tuple[TurnEvent, ...], resumed_from: str, resume: bool, note: str,
) -> None:
    card = _record("restart web-1?", asked_at=time.time() - age_s, events=events, resumed_from=resumed_from)
    await _left_behind(sqlite, card if resume else replace(card, resume={}))
    async with process(sqlite, "host-1", responder=_answers("never asked")) as restarted:
        assert await restarted.recover() == 1
        final = restarted.sink.cards["card-9"]
        assert final.status == "failed" and note in final.error and "ask again" in final.error
        assert restarted.server.request_count == 0 and await restarted.store.open_cards() == []


async def test_with_resume_within_s_0_every_left_card_is_closed_as_interrupted(sqlite: Store) -> None:
    await _left_behind(sqlite, _record("which server is 10.0.1.100?", asked_at=time.time()))
    async with process(sqlite, "host-1", responder=_answers("never asked"), resume_within_s=0) as restarted:
        assert await restarted.recover() == 1
        assert restarted.sink.cards["card-9"].error == "Interrupted because the bot restarted. Please ask again."
        assert restarted.server.request_count == 0


async def test_a_question_killed_after_a_write_call_is_closed_and_the_call_not_made_again(sqlite: Store) -> None:
    gate = asyncio.Event()
    restarts: list[str] = []
    first_round = Script.tool_calls([("c1", "restart_server", {"host": "web-1"})])
    tools = (find_server, restart_tool(restarts))
    async with process(sqlite, "host-1", responder=_held(gate, first=first_round), tools=tools) as first:
        try:
            await first.submit("restart web-1")
            left = await _killed_while(first, lambda card: [c.get("ended") for c in _calls(card)] == [True])
        finally:
            gate.set()
    assert _calls(left) == [{"name": "restart_server", "read_only": False, "ended": True}]
    await _left_behind(sqlite, left)
    async with process(sqlite, "host-1", responder=_answers("never asked"), tools=tools) as restarted:
        assert await restarted.recover() == 1
        final = restarted.sink.cards[left.card_id]
        assert final.status == "failed" and "restart_server" in final.error and "ask again" in final.error
        assert restarted.server.request_count == 0
    assert restarts == ["web-1"]


# --- as before: what recovery spares, the audit of a killed turn, outside data on a closed card ----------------


async def test_another_replica_waits_for_the_heartbeat_of_a_card_s_owner(sqlite: Store) -> None:
    gate = asyncio.Event()
    async with process(sqlite, "host-1", responder=_held(gate)) as first:
        try:
            await first.submit("a long question")
            [card] = await until_read(first.store.open_cards, lambda cards: len(cards) == 1)
            assert card.owner == "host-1"
            # "host-1" is killed here: its heartbeat stays live for instance_ttl_s (30 s).
            async with process(sqlite, "host-2") as other:
                assert await other.recover() == 0
                assert other.sink.calls == [] and other.server.request_count == 0
        finally:
            gate.set()


async def test_at_start_the_cards_of_this_process_are_spared(sqlite: Store) -> None:
    gate = asyncio.Event()
    async with process(sqlite, "host-1", responder=_held(gate)) as h:
        sub = await h.submit("a long question")
        await h.server.wait_for_requests(1)
        await until_read(h.store.open_cards, lambda cards: len(cards) == 1)
        # Held by a running turn of this process: never an orphan, whatever its owner says.
        assert await h.recover() == 0
        assert [c.turn_id for c in await h.store.open_cards()] == [sub.turn_id]
        gate.set()
        assert (await asyncio.wait_for(sub.done, 10)).outcome == "done"


async def test_a_killed_turn_still_has_its_tool_calls_in_the_audit(sqlite: Store) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

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

    async with process(sqlite, "host-1", responder=responder, tools=(find_server, list_alarms)) as first:
        try:
            sub = await first.submit("which server is 10.0.1.100, and any alarms?")
            await asyncio.wait_for(entered.wait(), 10)
            # What a restarted process (another store on the same file) finds in the audit log.
            reader = await sqlite()
            try:
                records = await until_read(reader.audit_records, lambda found: sum(len(r.tool_calls) for r in found) == 2)
            finally:
                await reader.close()
            [killed] = records
            assert (killed.turn_id, killed.outcome, killed.user_id) == (sub.turn_id, "unfinished", "alice")
            assert killed.question == "which server is 10.0.1.100, and any alarms?"
            found, running = killed.tool_calls
            assert found["name"] == "find_server" and found["arguments"] == {"query": "10.0.1.100"} and found["ok"] is True
            assert (running["name"], running["arguments"]) == ("list_alarms", {"region": "dc1"})
            assert "ok" not in running  # it never ended
            # Its card's record says the same: a call of a tool that does not say it only reads, not ended.
            [card] = await until_read(first.store.open_cards, lambda cards: len(_calls(cards[0])) == 2)
            assert _calls(card)[1] == {"name": "list_alarms", "read_only": False, "ended": False}
        finally:
            gate.set()


async def test_a_left_card_keeps_the_outside_data_it_showed_above_its_turn(sqlite: Store) -> None:
    """An alert's investigation card closed by recovery still shows the alert (its turn saved it on the target)."""
    async with process(sqlite, "host-1") as h:
        target = CardTarget(platform="test", chat_id="C1", turn_id="t1", extra={"preamble": "🔥 Firing · HostDown"})
        await h.store.add_open_card(OpenCard(platform="test", card_id="card-9", turn_id="t1",
                                             target={"target": target_to_dict(target)},
                                             created_at=time.time() - 3600, owner="a-gone-host"))
        assert await h.recover() == 1
        final = h.sink.cards["card-9"]
        assert final.status == "failed" and final.preamble == "🔥 Firing · HostDown" and "ask again" in final.error


# --- a Slack card taken over (auto mode: the card left open is a native stream) -------------------------------------


def _slack_sink(fake: FakeSlack) -> SlackCardSink:
    """A restarted process's Slack sink in ``streaming: auto``, paced by its budget as ``botgateway run`` paces it."""
    client = AsyncWebClient(token=SLACK_BOT_TOKEN, base_url=fake.api_url, timeout=5)
    config = SlackConfig(bot_token=SecretStr(SLACK_BOT_TOKEN), api_base_url=fake.api_url, streaming="auto")
    return SlackCardSink(client, config, pacer=BudgetPacer(RateBudget()))


def _slack_target(turn: str) -> CardTarget:
    return CardTarget(platform="slack", chat_id="C1", thread_id="100.000001", turn_id=turn, user_id="U1",
                      user_name="alice", is_group=True, workspace_id="T0001", locale="en")


def _answers_in(fake: FakeSlack) -> list[Message]:
    """The thread's messages but the killed stream's Stop control (a restart's recovery takes that away)."""
    return [m for m in fake.thread("C1", "100.000001") if all(b.get("value") != "t-old" for b in m.buttons())]


async def _left_stream(fake: FakeSlack) -> CardHandle:
    """The card a killed process left: a native stream, mid-answer (its process gone, nothing stops it)."""
    handle = await _slack_sink(fake).create(_slack_target("t-old"), CardSnapshot(status="streaming", answer="Looking it up", seq=1))
    assert fake.messages[("C1", handle.card_id)].streaming
    return CardHandle(card_id=handle.card_id, target=_slack_target("t-new"))


async def test_a_taken_over_slack_card_is_answered_in_a_new_message_and_the_left_one_deleted(sqlite: Store) -> None:
    """Slack still counts the dead process's chat.update and stream calls of the last minute, which the restarted
    process cannot know: the resumed answer touches none of those budgets. It comes complete, in one new message on
    the channel's budget, and the message left behind is deleted then (the delete tier)."""
    async with FakeSlack() as fake:
        left = await _left_stream(fake)
        sink, target, store = _slack_sink(fake), left.target, await sqlite()
        before = len(fake.calls)
        try:
            resumed = resumed_sink(sink, left, store)
            buckets = SlackBuckets.from_config(SlackConfig())
            no_call, post = buckets.no_call_bucket(target)[0], buckets.post_bucket(target)[0]
            assert {op: resumed.rate_key(op, target)[0] for op in ("create", "update", "finalize")} == {
                "create": no_call, "update": no_call, "finalize": post}
            assert isinstance(resumed, Replanning) and not resumed.replan("finalize", target)  # no other way
            handle = await resumed.create(target, CardSnapshot(status="working", answer="", part=1, seq=1))
            handle = await resumed.update(handle, CardSnapshot(status="streaming", answer="web-1 is", part=1, seq=2))
            assert len(fake.calls) == before  # nothing live: the left message stays as it was meanwhile
            await resumed.finalize(handle, CardSnapshot(status="done", answer="web-1 is 10.0.1.100.", part=1, seq=3))
        finally:
            await store.close()
    [answer] = _answers_in(fake)
    assert answer.ts != left.card_id and "web-1 is 10.0.1.100." in answer.text and not answer.streaming
    assert "Resumed after a restart" in answer.text and not answer.buttons()
    assert [m.ts for m in fake.deleted] == [left.card_id]
    made = [call.method for call in fake.calls[before:]]
    assert made == ["chat.postMessage", "chat.delete"]


async def test_a_card_left_open_is_closed_when_the_resumed_answer_goes_out_another_way(sqlite: Store) -> None:
    async with FakeSlack() as fake:
        left = await _left_stream(fake)
        sink, target, store = _slack_sink(fake), left.target, await sqlite()
        try:
            resumed = resumed_sink(sink, left, store)
            # Its creation never went through (a timeout, a throttle): the answer goes out as a new message.
            await resumed.fallback(target, CardSnapshot(status="done", answer="web-1 is 10.0.1.100.", part=1, seq=3))
        finally:
            await store.close()
    card, answer = _answers_in(fake)
    assert card.ts == left.card_id and not card.streaming and "the answer follows in a new message" in card.text
    assert "web-1 is 10.0.1.100." not in card.text and "web-1 is 10.0.1.100." in answer.text


# --- the restarted process's own conversation leases (a fleet on Redis) ---------------------------------------------


async def _never_queued() -> None:
    raise AssertionError("the lease was waited for")


async def test_a_process_restarted_under_its_id_takes_its_dead_predecessors_lease_over_at_once() -> None:
    prefix = unique_prefix()
    try:
        async with fleet_client(REDIS_URL, "dead") as dead_client, fleet_client(REDIS_URL, "restarted") as client:
            dead = ConversationLeases(dead_client, prefix, "host-1", ttl_s=30, renew_s=10)
            assert await dead.acquire("c", dead.holder_id("t-old"), queued=_never_queued) is False
            killed_token = dead.token("c")
            await dead.aclose()  # killed: it neither renews nor gives the lease back; it would lapse in 30 s

            restarted = ConversationLeases(client, prefix, "host-1", ttl_s=30, renew_s=10, recheck_s=0.05)
            other = ConversationLeases(client, prefix, "host-2", ttl_s=30, renew_s=10, recheck_s=0.05)
            # Its own id's lease, held by no turn of it: the dead process's, taken over without waiting, fenced anew.
            assert await restarted.acquire("c", restarted.holder_id("t-new"), queued=_never_queued) is False
            assert killed_token is not None and (restarted.token("c") or 0) > killed_token
            # Its own live turn's lease, or another process's, is waited for.
            for leases, turn in ((restarted, "t-next"), (other, "t-other")):
                queued = asyncio.Event()

                async def show_queued(event: asyncio.Event = queued) -> None:
                    event.set()

                waiting = asyncio.create_task(leases.acquire("c", leases.holder_id(turn), queued=show_queued))
                await queued.wait()
                assert not waiting.done() and restarted.holds("c", restarted.holder_id("t-new"))
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
            await restarted.release("c", restarted.holder_id("t-new"))
            assert await other.acquire("c", other.holder_id("t-other"), queued=_never_queued) is False
            await other.release("c", other.holder_id("t-other"))
            await asyncio.gather(restarted.aclose(), other.aclose())
    finally:
        await purge_prefix(prefix)
