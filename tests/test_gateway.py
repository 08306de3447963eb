"""The gateway: dedupe, one turn per conversation (queue), concurrency, stop, recovery, shutdown.

Real tool loop against the scripted OpenAI-compatible server, real SQLite store,
the real CardStreamer, and a recording CardSink.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from botgateway.access import PrincipalLimits, limits_from_config
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import Config, parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, conversation_key
from botgateway.model import LLMClient
from botgateway.sink import CardTarget
from botgateway.stores.base import OpenCard
from botgateway.stores.sqlite import SqliteStore
from botgateway.strings import t
from botgateway.tooling import ToolContext, ToolRegistry, tool
from botgateway.turns.checks import AccessPolicy, AskerLimits, Check, Verdict
from botgateway.unprompted import gateway_principal
from tests.fakes.gateway import FlakySink, GatedFinalizeSink, RecordingSink, ThrottledFinalizeSink
from tests.polling import until_read
from tools.demo.script import Pause, Script, empty_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer


@tool
def find_server(query: str) -> str:
    """Find a server.

    Args:
        query: IP or name.
    """
    return f"1 instance match {query}:\n- web-1 [i-1] | Static inventory dc1 | running | private {query}"


@dataclass
class Harness:
    server: ScriptedLLMServer
    store: SqliteStore
    memory: Memory
    gateway: Gateway
    sink: RecordingSink
    policy: BufferPolicy
    config: Config

    def message(self, text: str, *, conversation: str = "conv-a", user: str = "alice", message_id: str | None = None) -> InboundMessage:
        target = CardTarget(platform="test", chat_id="chat-1", user_id=user, user_name=user, locale="en")
        ctx = ToolContext(user_id=user, user_name=user, platform="test", chat_id="chat-1")
        mid = message_id if message_id is not None else f"m-{time.monotonic_ns()}"
        return InboundMessage("test", mid, conversation, text, target, ctx)

    async def submit(self, text: str, **kwargs: Any):
        return await self.gateway.submit(self.message(text, **kwargs), self.sink, self.policy)


def _config(
    base_url: str, *, llm: dict[str, Any] | None = None, sections: dict[str, Any] | None = None, **gateway: Any
) -> Config:
    return parse_config(
        {
            "llm": {"provider": "custom", "base_url": base_url, "model": "m", "max_rounds": 4, **(llm or {})},
            "gateway": {"admins": ["root"], **gateway},
            "card": {"final_deadline_s": 5},
            **(sections or {}),
        },
        env={},
    )


async def _harness(
    tmp_path,
    server: ScriptedLLMServer,
    *,
    access: Any = None,
    llm: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
    clock: Callable[[], float] | None = None,
    checks: Callable[[tuple[Check, ...]], Sequence[Check]] | None = None,
    **gateway: Any,
) -> AsyncIterator[Harness]:
    """``sections``: more top-level config sections (``limits``); ``clock``: the wall clock of the per-asker limits;
    ``checks``: admission's checks of a typed message, from the declared ones."""
    base_url = await server.start()
    config = _config(base_url, llm=llm, sections=sections, **gateway)
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
    client = LLMClient(config.llm, base_url=base_url)
    loop = ToolLoop(
        client, ToolRegistry([find_server]), memory, max_rounds=4, system_prompt="sys", turn_timeout_s=config.llm.turn_timeout_s
    )
    extra: dict[str, Any] = {"access": access} if access is not None else {}
    if clock is not None:
        extra["limits"] = PrincipalLimits(store, limits_from_config(config.limits), clock=clock)
    if checks is not None:
        extra["checks"] = checks
    gw = Gateway(
        loop=loop, store=store, budget=RateBudget(), config=config, model_label="test model", clear_history=memory.clear, **extra
    )
    policy = BufferPolicy.from_config(config.adapters.terminal.policy)
    try:
        yield Harness(server, store, memory, gw, RecordingSink(), policy, config)
    finally:
        await gw.aclose()
        await client.aclose()
        await memory.aclose()  # history written behind the turns lands before the store closes
        await store.close()
        await server.stop()


@pytest.fixture
async def h(tmp_path) -> AsyncIterator[Harness]:
    async for harness in _harness(tmp_path, ScriptedLLMServer()):
        yield harness


def _user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_turn_runs_to_a_done_card_with_tool_line_footer_and_audit(h: Harness) -> None:
    h.server.enqueue(
        Script.tool_calls([("c1", "find_server", {"query": "10.0.1.100"})]),
        Script.text("10.0.1.100 is web-1.", reasoning="look it up"),
    )
    sub = await h.submit("which server is 10.0.1.100?")
    assert sub.status == "started" and sub.done is not None
    outcome = await asyncio.wait_for(sub.done, 15)
    assert outcome.outcome == "done"
    assert outcome.answer == "10.0.1.100 is web-1."
    card = h.sink.card_for(sub.turn_id)
    assert card is not None and card.status == "done"
    assert card.answer == "10.0.1.100 is web-1."
    assert [b.name for b in card.blocks if hasattr(b, "name")] == ["find_server"]
    assert "test model" in card.footer
    ops = h.sink.ops(sub.turn_id)
    assert ops[0] == "create" and ops[-1] == "finalize"
    # the card target carries the turn id (for stop buttons), and no card is left open
    assert await h.store.open_cards() == []
    audits = await h.store.audit_records(conversation_id="conv-a")
    assert [a.outcome for a in audits] == ["done"]
    assert audits[0].user_id == "alice" and audits[0].tool_calls[0]["name"] == "find_server"
    assert audits[0].tool_calls[0]["ok"] is True
    card_metrics = audits[0].extra["card"]  # the streamer's metrics ride along in the audit record
    assert card_metrics["delivered"] is True and card_metrics["total_calls"] == len(ops)


async def test_redelivered_message_is_dropped(h: Harness) -> None:
    h.server.enqueue(Script.text("hello"))
    first = await h.submit("hi", message_id="msg-1")
    second = await h.submit("hi", message_id="msg-1")
    assert first.status == "started"
    assert second.status == "duplicate" and second.done is None
    await asyncio.wait_for(first.done, 15)
    assert len(h.server.requests) == 1
    assert len([c for c in h.sink.calls if c.op == "create"]) == 1


async def test_second_question_in_a_conversation_is_queued_then_answered(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        question = _user_texts(body)[-1]
        if question == "first?":
            await gate.wait()  # hold the first turn until the second is queued
            return Script.text("first answer")
        return Script.text("second answer")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder)):
        await _queued_then_answered(h, gate)


async def _queued_then_answered(h: Harness, gate: asyncio.Event) -> None:
    one = await h.submit("first?")
    two = await h.submit("second?")
    assert one.status == "started"
    assert two.status == "queued" and two.position == 1
    # the queued card exists at once and says it is waiting
    await h.sink.wait_for(lambda: (c := h.sink.card_for(two.turn_id)) is not None and c.status == "queued")
    queued = h.sink.card_for(two.turn_id)
    assert queued.queue_position == 1 and "Waiting" in queued.error
    await h.server.wait_for_requests(1)
    assert len(h.server.requests) == 1  # the second turn has not asked the model yet
    gate.set()
    first = await asyncio.wait_for(one.done, 15)
    second = await asyncio.wait_for(two.done, 15)
    assert (first.outcome, second.outcome) == ("done", "done")
    assert h.sink.card_for(two.turn_id).answer == "second answer"
    # the second turn ran after the first and saw its history
    assert _user_texts(h.server.requests[1]) == ["first?", "second?"]


async def test_queue_beyond_the_limit_is_refused_politely(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("ok")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder), max_queued_per_conversation=1):
        one = await h.submit("q1")
        two = await h.submit("q2")
        three = await h.submit("q3")
        assert (one.status, two.status, three.status) == ("started", "queued", "refused")
        assert "still answering" in three.message
        [refused] = await h.store.audit_records()  # audited before the asker is told
        assert (refused.outcome, refused.question, refused.answer) == ("refused:queue_full", "q3", three.message)
        await asyncio.wait_for(three.done, 10)
        assert any("still answering" in s.error for s in h.sink.fallbacks())
        gate.set()
        await asyncio.wait_for(asyncio.gather(one.done, two.done), 15)


async def test_different_conversations_run_concurrently(tmp_path) -> None:
    both_in = asyncio.Event()
    arrived: list[str] = []

    async def responder(body: dict[str, Any]) -> Script:
        arrived.append(_user_texts(body)[-1])
        if len(arrived) == 2:
            both_in.set()
        # each request waits for the other: only concurrent turns get past this
        try:
            await asyncio.wait_for(both_in.wait(), 10)
        except TimeoutError:
            return Script.error(500, "turns did not overlap")
        return Script.text(f"answer to {arrived[-1]}")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder)):
        a = await h.submit("from a", conversation="conv-a")
        b = await h.submit("from b", conversation="conv-b", user="bob")
        assert (a.status, b.status) == ("started", "started")
        outcomes = await asyncio.wait_for(asyncio.gather(a.done, b.done), 20)
        assert [o.outcome for o in outcomes] == ["done", "done"]


async def test_stop_word_from_the_asker_stops_the_turn_and_leaves_history_untouched(h: Harness) -> None:
    h.server.enqueue(Script.text("word " * 400, chunk_size=5, delay_s=0.02))
    sub = await h.submit("tell me a long story")
    await h.sink.wait_for(lambda: (c := h.sink.card_for(sub.turn_id)) is not None and c.answer.strip() != "")
    # someone else saying stop does not stop alice's turn
    other = await h.submit("stop", user="mallory")
    assert other.status == "stopped" and other.turn_id == ""
    assert "Only the person who asked" in other.message
    assert not sub.done.done()
    stop = await h.submit("Stop!")
    assert stop.status == "stopped" and stop.turn_id == sub.turn_id
    outcome = await asyncio.wait_for(sub.done, 10)
    assert outcome.outcome == "stopped"
    card = h.sink.card_for(sub.turn_id)
    assert card.status == "stopped" and "Stopped" in card.error
    assert card.answer.startswith("word")  # the partial answer stays visible
    assert h.sink.ops(sub.turn_id)[-1] == "finalize"
    assert await h.memory.history("conv-a") == []
    # the next question's request to the model does not carry the stopped turn
    h.server.enqueue(Script.text("fresh"))
    nxt = await h.submit("new question")
    assert (await asyncio.wait_for(nxt.done, 10)).outcome == "done"
    assert _user_texts(h.server.requests[-1]) == ["new question"]
    assert "tell me a long story" not in str(h.server.requests[-1]["messages"])


async def test_stop_turn_is_for_the_asker_or_an_admin(h: Harness) -> None:
    h.server.enqueue(Script.text("x " * 500, chunk_size=4, delay_s=0.02))
    sub = await h.submit("long")
    await h.sink.wait_for(lambda: (c := h.sink.card_for(sub.turn_id)) is not None and c.status == "streaming")
    assert await h.gateway.stop_turn(sub.turn_id, "mallory") is False
    assert await h.gateway.stop_turn(sub.turn_id, "root") is True
    outcome = await asyncio.wait_for(sub.done, 10)
    assert outcome.outcome == "stopped"
    assert "root" in h.sink.card_for(sub.turn_id).error
    assert await h.gateway.stop_turn(sub.turn_id, "root") is False  # already over


async def test_stopping_a_queued_question_ends_its_card_without_running_it(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("done")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder)):
        await _stop_queued(h, gate)


async def _stop_queued(h: Harness, gate: asyncio.Event) -> None:
    one = await h.submit("q1", user="alice")
    two = await h.submit("q2", user="bob")
    assert two.status == "queued"
    await h.sink.wait_for(lambda: h.sink.card_for(two.turn_id) is not None)
    assert await h.gateway.stop_turn(two.turn_id, "bob") is True
    assert (await asyncio.wait_for(two.done, 10)).outcome == "stopped"
    assert h.sink.card_for(two.turn_id).status == "stopped"
    gate.set()
    assert (await asyncio.wait_for(one.done, 10)).outcome == "done"
    assert len(h.server.requests) == 1


async def test_access_hook_refusal_is_shown_and_no_turn_runs(tmp_path) -> None:
    async def deny(msg: InboundMessage) -> str | None:
        return None if msg.ctx.user_id == "alice" else "this channel is not enabled for the bot"

    async for h in _harness(tmp_path, ScriptedLLMServer(), access=deny):
        sub = await h.submit("hi", user="eve")
        assert sub.status == "refused"
        await asyncio.wait_for(sub.done, 5)
        assert any("not enabled" in s.error for s in h.sink.fallbacks())
        assert h.server.requests == []
        [refused] = await h.store.audit_records()  # the refusal is audited, with who and where
        assert (refused.outcome, refused.principal, refused.channel) == ("refused", "test:eve", "chat-1")
        assert refused.answer == "this channel is not enabled for the bot"
        h.server.enqueue(Script.text("welcome"))
        allowed = await h.submit("hi", user="alice")
        assert allowed.status == "started"
        assert (await asyncio.wait_for(allowed.done, 10)).outcome == "done"


async def test_a_principal_the_policy_gives_no_role_is_refused_audited_and_costs_no_model_request(tmp_path) -> None:
    # Every front door goes through this admission: whoever the policy leaves without a role gets a note, not a turn.
    access = {"roles": {"oncall": {"members": ["test:alice"], "tools": ["*"]}}, "default_role": "none"}
    async for h in _harness(tmp_path, ScriptedLLMServer(), sections={"access": access}):
        sub = await h.submit("which server is 10.0.1.100?", user="eve")
        assert sub.status == "refused"
        await asyncio.wait_for(sub.done, 5)
        note = t("en", "access_no_role", principal="test:eve")
        assert sub.message == t("en", "refused", reason=note)
        [shown] = h.sink.fallbacks()
        assert shown.error == sub.message and "test:eve" in shown.error  # the asker learns the id to give an admin
        assert h.server.requests == []
        [refused] = await h.store.audit_records()  # the refusal is audited, with who, where and why
        assert (refused.outcome, refused.principal, refused.channel) == ("refused:no_role", "test:eve", "chat-1")
        assert refused.answer == note and refused.question == "which server is 10.0.1.100?"
        # The policy refuses the roleless asker only: a member of a role is answered.
        h.server.enqueue(Script.text("web-1."))
        allowed = await h.submit("which server is 10.0.1.100?", user="alice")
        assert (await asyncio.wait_for(allowed.done, 10)).outcome == "done"
        assert len(h.server.requests) == 1


async def test_the_audit_record_masks_secrets_pasted_into_the_question(h: Harness) -> None:
    h.server.enqueue(Script.text("Please rotate that token."))
    sub = await h.submit("why does xoxb-1234-5678-abcdefgh fail? password=hunter2")
    assert (await asyncio.wait_for(sub.done, 15)).outcome == "done"
    [record] = await h.store.audit_records()
    assert "xoxb-1234" not in record.question and "hunter2" not in record.question
    assert record.question == "why does xoxb-*** fail? password=***"
    assert record.principal == "test:alice" and record.channel == "chat-1"


async def test_open_cards_left_by_a_dead_process_are_finalized(h: Harness) -> None:
    target = {"platform": "test", "chat_id": "chat-9", "turn_id": "old-turn", "user_id": "alice", "locale": "en"}
    await h.store.add_open_card(OpenCard("test", "card-old", "old-turn", target, time.time() - 60))
    await h.store.add_open_card(OpenCard("test", "card-gone", "old-turn-2", target, time.time() - 60))
    await h.store.add_open_card(OpenCard("elsewhere", "card-x", "old-turn-3", target, time.time() - 60))
    h.sink.gone.add("card-gone")
    closed = await h.gateway.recovery.recover_open_cards({"test": h.sink})
    assert closed == 1
    final = h.sink.cards["card-old"]
    assert final.status == "failed" and "ask again" in final.error
    assert h.sink.targets["card-old"].chat_id == "chat-9"
    # the card the sink could not finalize is forgotten; the other platform's card is left alone
    assert [c.card_id for c in await h.store.open_cards()] == ["card-x"]


async def test_recovery_drops_a_card_whose_finalize_fails(h: Harness) -> None:
    target = {"platform": "test", "chat_id": "c", "turn_id": "t", "locale": "zh-CN"}
    await h.store.add_open_card(OpenCard("test", "card-1", "t", target, time.time()))
    assert await h.gateway.recovery.recover_open_cards({"test": FlakySink()}) == 0
    assert await h.store.open_cards() == []


async def test_recovery_honours_a_throttle_and_still_closes_the_card(h: Harness) -> None:
    target = {"platform": "test", "chat_id": "c", "turn_id": "t", "locale": "en"}
    await h.store.add_open_card(OpenCard("test", "card-1", "t", target, time.time()))
    sink = ThrottledFinalizeSink(throttles=2)
    assert await h.gateway.recovery.recover_open_cards({"test": sink}) == 1
    assert sink.throttled == 2
    assert sink.cards["card-1"].status == "failed" and "ask again" in sink.cards["card-1"].error
    assert await h.store.open_cards() == []


async def test_shutdown_stops_running_turns_and_finalizes_their_cards(h: Harness) -> None:
    h.server.enqueue(Script.text("y " * 500, chunk_size=4, delay_s=0.02))
    sub = await h.submit("long")
    await h.sink.wait_for(lambda: (c := h.sink.card_for(sub.turn_id)) is not None and c.status == "streaming")
    await asyncio.wait_for(h.gateway.aclose(), 10)
    outcome = sub.done.result()
    assert outcome.outcome == "stopped"
    card = h.sink.card_for(sub.turn_id)
    assert card.status == "stopped" and "restarting" in card.error
    assert await h.store.open_cards() == []
    late = await h.submit("anyone there?")
    assert late.status == "refused" and "restarting" in late.message
    [refused] = [r for r in await h.store.audit_records() if r.question == "anyone there?"]  # audited too
    assert (refused.outcome, refused.answer) == ("refused:shutting_down", late.message)


async def test_a_turn_nobody_typed_refused_by_a_closing_gateway_is_audited(h: Harness) -> None:
    await h.gateway.aclose()
    nightly = gateway_principal("schedule", "nightly")
    report = dataclasses.replace(h.message("the nightly cost report"), principal=nightly)
    sub = await h.gateway.submit_unprompted(report, h.sink, h.policy, role="viewer")
    assert sub.status == "refused" and "restarting" in sub.message
    [refused] = await h.store.audit_records()
    assert (refused.outcome, refused.principal, refused.answer) == ("refused:shutting_down", "schedule:nightly",
                                                                    sub.message)
    assert h.server.requests == []


async def test_the_turn_does_not_run_in_the_callers_task(h: Harness) -> None:
    """DingTalk's SDK cancels its handler tasks; the turn must survive that."""
    h.server.enqueue(Script.text("survived", delay_s=0.01))

    async def handler() -> Any:
        sub = await h.submit("q")
        await asyncio.sleep(3600)  # cancelled below, as the SDK does
        return sub

    task = asyncio.create_task(handler())
    await h.sink.wait_for(lambda: any(c.op == "create" for c in h.sink.calls))
    task.cancel()
    turn_id = h.sink.calls[0].target.turn_id
    outcome = await asyncio.wait_for(h.gateway.wait_turn(turn_id), 10)
    assert outcome.outcome == "done" and outcome.answer == "survived"


def test_conversation_key_scopes() -> None:
    kw = dict(workspace="T1", chat="C1", thread="171.1", user="U1")
    assert conversation_key("slack", "thread", **kw) == "slack:T1:C1:171.1"
    assert conversation_key("slack", "chat", **kw) == "slack:T1:C1"
    assert conversation_key("slack", "user", **kw) == "slack:T1:C1:user:U1"
    assert conversation_key("slack", "thread", workspace="T1", chat="D1") == "slack:T1:D1"
    assert conversation_key("slack", "user", **kw) != conversation_key("slack", "user", **{**kw, "user": "U2"})


class BrokenMemory:
    """A history store whose reads fail (a corrupted database)."""

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        raise RuntimeError("database disk image is malformed")

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        raise AssertionError("never reached")


async def test_a_crashing_turn_still_ends_its_card_as_failed_in_plain_words(tmp_path) -> None:
    async with ScriptedLLMServer() as server:
        config = _config(server.base_url)
        store = SqliteStore(tmp_path / "gw.db")
        await store.open()
        llm = LLMClient(config.llm, base_url=server.base_url)
        loop = ToolLoop(llm, ToolRegistry([find_server]), BrokenMemory(), max_rounds=4, system_prompt="sys")
        gateway = Gateway(loop=loop, store=store, budget=RateBudget(), config=config)
        sink = RecordingSink()
        h = Harness(server, store, None, gateway, sink, BufferPolicy.from_config(), config)  # type: ignore[arg-type]
        try:
            sub = await h.submit("hi")
            outcome = await asyncio.wait_for(sub.done, 10)
            open_cards = await store.open_cards()
        finally:
            await gateway.aclose()
            await llm.aclose()
            await store.close()
    assert outcome.outcome == "failed:internal"
    card = sink.card_for(sub.turn_id)
    assert card.status == "failed" and "went wrong" in card.error
    assert "Traceback" not in card.error and "malformed" not in card.error
    assert sink.ops(sub.turn_id)[-1] == "finalize"
    assert open_cards == []


async def test_shutdown_cancels_closing_a_card_whose_answer_went_out_as_a_message(tmp_path) -> None:
    async with ScriptedLLMServer() as server:
        config = parse_config(
            {
                "llm": {"provider": "custom", "base_url": server.base_url, "model": "m", "max_rounds": 4},
                "card": {"final_deadline_s": 0.3, "late_close_s": 600},
            },
            env={},
        )
        store = SqliteStore(tmp_path / "gw.db")
        await store.open()
        memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
        llm = LLMClient(config.llm, base_url=server.base_url)
        loop = ToolLoop(llm, ToolRegistry([find_server]), memory, max_rounds=4, system_prompt="sys")
        gateway = Gateway(loop=loop, store=store, budget=RateBudget(), config=config)
        sink = FlakySink()  # no card can be finalized: every answer goes out as a plain message
        h = Harness(server, store, memory, gateway, sink, BufferPolicy.from_config(), config)
        try:
            server.enqueue(Script.text("web-1 it is"))
            sub = await h.submit("which server?")
            outcome = await asyncio.wait_for(sub.done, 10)
            assert outcome.outcome == "done" and [s.answer for s in sink.fallbacks()] == ["web-1 it is"]
            # The card is still being closed in the background, so it is still on record.
            assert [c.turn_id for c in await store.open_cards()] == [sub.turn_id]
            await asyncio.wait_for(gateway.aclose(), 5)  # shutdown does not wait out late_close_s
            assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("card-close")]
            left = await store.open_cards()
        finally:
            await gateway.aclose()
            await llm.aclose()
            await store.close()
    assert [c.turn_id for c in left] == [sub.turn_id]  # left for start-up recovery to close


async def test_stop_while_the_card_is_being_created_stops_before_the_model_is_asked(tmp_path) -> None:
    async for h in _harness(tmp_path, ScriptedLLMServer()):
        h.sink = RecordingSink(latency_s=0.2)
        h.server.enqueue(Script.text("should never be streamed"))
        sub = await h.submit("hi")
        assert await h.gateway.stop_turn(sub.turn_id, "alice")
        outcome = await asyncio.wait_for(sub.done, 10)
        assert outcome.outcome == "stopped"
        assert h.server.requests == []
        assert h.sink.card_for(sub.turn_id).status == "stopped"


async def test_a_stop_after_the_answer_is_complete_waits_for_the_final_card(tmp_path) -> None:
    async for h in _harness(tmp_path, ScriptedLLMServer()):
        sink = GatedFinalizeSink()
        h.sink = sink
        h.server.enqueue(Script.text("the whole answer"))
        sub = await h.submit("hi")
        await asyncio.wait_for(sink.finalizing.wait(), 10)
        # The answer is complete and its card is being finalized: too late to stop, and
        # `done` must not resolve while the card still shows its live state.
        assert await h.gateway.stop_turn(sub.turn_id, "alice") is False
        stop = await h.submit("stop")
        assert not sub.done.done()
        sink.release.set()
        outcome = await asyncio.wait_for(sub.done, 10)
        assert outcome.outcome == "done"
        card = sink.card_for(sub.turn_id)
        assert card.status == "done" and card.answer == "the whole answer"
        assert stop.status == "stopped"


async def test_clear_word_starts_a_new_conversation_but_not_while_a_turn_runs(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        if _user_texts(body)[-1] == "second?":
            await gate.wait()  # keep the second turn running while "新对话" arrives
        return Script.text("an answer")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder)):
        first = await h.submit("first?")
        await asyncio.wait_for(first.done, 10)

        cleared = await h.submit("/clear")
        assert cleared.status == "cleared"
        await asyncio.wait_for(cleared.done, 10)
        assert "new conversation" in h.sink.fallbacks()[-1].answer

        second = await h.submit("second?")
        await h.server.wait_for_requests(2)
        busy = await h.submit("新对话")
        assert busy.status == "refused" and "still running" in busy.message
        gate.set()
        await asyncio.wait_for(second.done, 10)
        # the second question went to the model without the first: history was cleared
        assert _user_texts(h.server.requests[-1]) == ["second?"]


# --- several replicas: owner-aware recovery ----------------------------------------------------

REPLICA = {"heartbeat_s": 0.05, "instance_ttl_s": 0.5, "recover_interval_s": 0.05}


async def test_recovery_spares_live_owners_and_closes_dead_ones_and_old_ownerless_cards(h: Harness) -> None:
    target = {"platform": "test", "chat_id": "chat-9", "user_id": "alice", "locale": "en"}
    now = time.time()
    await h.store.heartbeat("replica-live", 60)
    await h.store.add_open_card(OpenCard("test", "live-owner", "t1", target, now - 3600, owner="replica-live"))
    await h.store.add_open_card(OpenCard("test", "dead-owner", "t2", target, now, owner="replica-crashed"))
    await h.store.add_open_card(OpenCard("test", "fresh-ownerless", "t3", target, now))
    await h.store.add_open_card(OpenCard("test", "old-ownerless", "t4", target, now - 3600))
    await h.store.add_open_card(OpenCard("test", "mine", "t5", target, now - 3600, owner=h.gateway.instance_id))

    assert await h.gateway.recovery.recover_open_cards({"test": h.sink}, older_than_s=600) == 2
    assert sorted(h.sink.cards) == ["dead-owner", "old-ownerless"]
    assert all(card.status == "failed" and "ask again" in card.error for card in h.sink.cards.values())
    assert sorted(c.card_id for c in await h.store.open_cards()) == ["fresh-ownerless", "live-owner", "mine"]


async def test_a_replica_closes_the_cards_of_a_replica_that_stopped_beating(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()  # replica A's turn stays mid-answer until the test ends
        return Script.text("never shown")

    # Two gateways on one SQLite file, as two processes would be.
    async for a in _harness(tmp_path, ScriptedLLMServer(responder=responder), **REPLICA):
        # B answers no question again (resume_within_s 0): A's card is closed as interrupted.
        async for b in _harness(tmp_path, ScriptedLLMServer(), **REPLICA, resume_within_s=0):
            try:
                await a.gateway.start()
                await b.gateway.start()
                assert await b.store.live_instances() == {a.gateway.instance_id, b.gateway.instance_id}
                sub = await a.submit("a long question")
                await a.server.wait_for_requests(1)
                # The model request does not wait for the card: wait until the card is on record too.
                [card] = await until_read(lambda: b.store.open_cards(), lambda cards: len(cards) == 1)
                assert card.owner == a.gateway.instance_id and card.turn_id == sub.turn_id

                # While A beats, B's recovery (on demand and periodic) leaves A's card alone.
                b.gateway.recovery.watch({"test": b.sink})
                assert await b.gateway.recovery.recover_open_cards({"test": b.sink}) == 0
                stale = {"platform": "test", "chat_id": "chat-9", "locale": "en"}
                for marker in ("marker-1", "marker-2"):
                    # An ownerless left-over card: B's next periodic pass closes it, so once the second
                    # is closed, at least one whole pass has looked at A's card.
                    await b.store.add_open_card(OpenCard("test", marker, marker, stale, time.time() - 60))
                    await b.sink.wait_for(lambda m=marker: m in b.sink.cards)
                assert card.card_id not in b.sink.cards
                assert card.card_id in [c.card_id for c in await b.store.open_cards()]

                # A crashes: it can no longer beat (its store is gone), and its heartbeat expires.
                await a.store.close()
                await b.sink.wait_for(lambda: card.card_id in b.sink.cards, timeout=10)
                final = b.sink.cards[card.card_id]
                assert final.status == "failed" and "ask again" in final.error
                assert b.sink.targets[card.card_id].turn_id == sub.turn_id
                await until_read(lambda: b.store.open_cards(), lambda cards: cards == [])  # forgotten once final
                assert await b.store.live_instances() == {b.gateway.instance_id}
            finally:
                gate.set()


async def test_a_clean_shutdown_withdraws_the_heartbeat(tmp_path) -> None:
    async for h in _harness(tmp_path, ScriptedLLMServer(), **REPLICA):
        await h.gateway.start()
        assert await h.store.live_instances() == {h.gateway.instance_id}
        await h.gateway.aclose()
        assert await h.store.live_instances() == set()
        await h.gateway.start()  # a closed gateway does not come back to life
        assert await h.store.live_instances() == set()


# --- faults that must end cleanly ------------------------------------------------------------


async def test_a_model_that_streams_forever_ends_at_the_turn_deadline_and_the_next_question_runs(tmp_path) -> None:
    endless = [item for _ in range(20_000) for item in (Pause(0.05), empty_chunk())]
    server = ScriptedLLMServer()
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("So far: web-1 is "), *endless]), Script.text("web-2 is fine."))
    async for h in _harness(tmp_path, server, llm={"turn_timeout_s": 2}):
        first = await h.submit("is web-1 fine?")
        second = await h.submit("and web-2?")
        outcome = await asyncio.wait_for(first.done, 30)
        assert outcome.outcome == "failed:timeout"
        card = h.sink.card_for(first.turn_id)
        assert card is not None and card.status == "failed"
        assert card.answer == "So far: web-1 is "
        assert card.error.startswith(t("en", "failed_timeout", message="").strip())
        assert "llm.turn_timeout_s" in card.error and "Traceback" not in card.error

        assert (await asyncio.wait_for(second.done, 15)).outcome == "done"
        assert h.sink.card_for(second.turn_id).answer == "web-2 is fine."
        # The timed-out turn left no trace in history: the next question came alone.
        assert _user_texts(h.server.requests[1]) == ["and web-2?"]
        assert [m["content"] for m in await h.memory.history("conv-a")] == ["and web-2?", "web-2 is fine."]


async def test_a_question_over_the_size_cap_is_refused_with_the_limit_and_never_reaches_the_model(h: Harness) -> None:
    sub = await h.submit("x" * 150_000)
    assert sub.status == "refused"
    await asyncio.wait_for(sub.done, 10)
    (note,) = h.sink.fallbacks()
    assert "150,000" in note.error and "20,000" in note.error  # how long it was, and what fits
    assert "shorter" in note.error or "shorten" in note.error
    assert h.server.requests == []
    assert await h.memory.history("conv-a") == []
    # Audited like every refusal: who, why, what they were told, and no more of the question than a turn keeps.
    [refused] = await h.store.audit_records()
    assert (refused.outcome, refused.principal, refused.channel) == ("refused:too_long", "test:alice", "chat-1")
    assert refused.answer == note.error
    assert refused.question == "x" * 20_000 + "…"

    h.server.enqueue(Script.text("fits"))
    fits = await h.submit("y" * 20_000)
    assert (await asyncio.wait_for(fits.done, 15)).outcome == "done"


async def test_a_check_inserted_in_the_declared_order_refuses_with_its_note_and_audit_reason(tmp_path) -> None:
    """A deployment's own check is one more callable in admission's order: its refusal is told and audited like
    any other, and the checks after it (here a recording one, the size and the limits) are not asked."""
    freeze = "Change freeze until Monday: no deploys."
    seen: list[tuple[str, str]] = []
    after: list[str] = []

    async def change_freeze(msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        seen.append((msg.text, msg.ctx.principal.id if msg.ctx.principal else ""))
        return Verdict.refusal(freeze, audit="refused:change_freeze") if "deploy" in msg.text else msg

    async def recorded(msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        after.append(msg.text)
        return msg

    def with_freeze(declared: tuple[Check, ...]) -> tuple[Check, ...]:
        # Right after the policy's decision, as a deployment's own rule on who may ask what would sit.
        at = next(i for i, check in enumerate(declared) if isinstance(check, AccessPolicy)) + 1
        assert isinstance(declared[-1], AskerLimits)  # counted last, under the new turn's id
        return (*declared[:at], change_freeze, recorded, *declared[at:])

    one_a_minute = {"limits": {"turns_per_minute": 1}}
    async for h in _harness(tmp_path, ScriptedLLMServer(), sections=one_a_minute, clock=lambda: 1_000_000.0,
                            checks=with_freeze):
        refused = await h.submit("deploy web-2 now" + "!" * 30_000)  # over the size cap too: never measured
        assert (refused.status, refused.message, refused.limited) == ("refused", freeze, False)
        await asyncio.wait_for(refused.done, 10)
        (note,) = h.sink.fallbacks()
        assert note.error == freeze
        [record] = await h.store.audit_records()
        assert (record.outcome, record.principal, record.answer) == ("refused:change_freeze", "test:alice", freeze)
        assert seen == [("deploy web-2 now" + "!" * 30_000, "test:alice")]  # asked after the policy's decision
        assert after == [] and h.server.requests == []

        # Nor was the refused question counted: the one question a minute is still free, and then taken.
        h.server.enqueue(Script.text("web-2 is fine."))
        asked = await h.submit("is web-2 fine?")
        assert (await asyncio.wait_for(asked.done, 15)).outcome == "done"
        assert after == ["is web-2 fine?"]
        over = await h.submit("and web-3?")
        assert (over.status, over.limited) == ("refused", True)
        assert over.retry_after_s == 20.0  # the clock's minute (from 999_960) starts again at 1_000_020
        assert after == ["is web-2 fine?", "and web-3?"]


async def test_a_400_from_the_model_says_the_provider_refused_the_request_not_that_it_was_unreachable(h: Harness) -> None:
    h.server.enqueue(Script.error(400, "Invalid value for 'temperature': must be at most 2", code="invalid_value"))
    sub = await h.submit("hi")
    outcome = await asyncio.wait_for(sub.done, 15)
    assert outcome.outcome == "failed:llm_refused"
    card = h.sink.card_for(sub.turn_id)
    assert "could not be reached" not in card.error
    assert card.error.startswith(t("en", "failed_llm_refused", message="").strip())
    assert "HTTP 400" in card.error and "must be at most 2" in card.error


# --- fairness: one asker's flood does not hold back another ---------------------------


async def test_a_flood_of_40_questions_by_one_user_does_not_hold_back_another_users_turn(tmp_path) -> None:
    release_alice = asyncio.Event()
    bob_asked = asyncio.Event()
    started: list[str] = []

    async def responder(body: dict[str, Any]) -> Script:
        question = _user_texts(body)[-1]
        started.append(question)
        if question.startswith("bob"):
            bob_asked.set()
            return Script.text("bob's answer")
        await release_alice.wait()  # alice's turns hold their slots until bob has been answered
        return Script.text("ok")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder), max_concurrent_turns=4):
        flood = [await h.submit(f"alice {n}?", conversation=f"a{n}") for n in range(40)]
        await h.server.wait_for_requests(2)  # alice holds her fair share: 2 of the 4 slots
        bob = await h.submit("bob: is web-1 up?", conversation="b", user="bob")
        assert bob.status == "started"
        await asyncio.wait_for(bob_asked.wait(), 15)
        outcome = await asyncio.wait_for(bob.done, 15)
        assert outcome.outcome == "done" and h.sink.card_for(bob.turn_id).answer == "bob's answer"
        # bob's turn started while alice's backlog still waited: only her fair share ran before it
        assert started.index("bob: is web-1 up?") == 2
        assert sum(1 for sub in flood if not sub.done.done()) == 40
        release_alice.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*(sub.done for sub in flood)), 60)
        assert {o.outcome for o in outcomes} == {"done"}
        assert len(started) == 41
