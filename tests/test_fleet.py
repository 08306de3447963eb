"""Two gateway processes on one Redis behave as one bot: stops, approval votes, one turn per conversation, limits,
and the waiting questions of a draining process answered by the other.

Each :class:`Process` is a whole process's runtime (its own RedisStore, memory,
model client, approval desk, fleet connections, queue of moved questions,
instance id and recording sink), built as ``botgateway run`` builds one; the two share one Redis key
prefix, which is all they share. The model is the scripted server on loopback,
Redis the real one. Tests wait on conditions (a card's state, a request
reaching the model, a turn's end), never on the clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog.testing

from botgateway.access import PrincipalLimits, limits_from_config
from botgateway.approvals import ApprovalDesk
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import Config, parse_config
from botgateway.fleet.control import ControlChannel
from botgateway.fleet.directory import FleetDirectory
from botgateway.fleet.handoff import MovedQuestion
from botgateway.fleet.lease import RECHECK_S, ConversationLeases
from botgateway.fleet.redis_fleet import RedisFleet, fleet_client
from botgateway.fleet.redis_handoff import RedisHandoff
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import InboundMessage, Submission
from botgateway.model import LLMClient
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.stores.redis import RedisStore
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.gateway import RecordingSink
from tests.fakes.restart import restart_tool
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tests.polling import until_read
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

ACCESS: dict[str, Any] = {
    "default_role": "oncall",
    "roles": {
        "admin": {"members": ["test:UADMIN"], "tools": ["*"], "approve": True},
        "oncall": {"tools": ["*"]},
    },
    "approvals": {"tools": ["restart_*"], "timeout_s": 300},
}
FIXED_NOW = 1_700_000_010.0
"""The per-asker limits' clock: one minute for the whole test, whatever the machine's load."""


@dataclass
class Process:
    """One gateway process's worth of runtime."""

    name: str
    store: RedisStore
    memory: Memory
    fleet: RedisFleet
    gateway: Gateway
    sink: RecordingSink
    restarts: list[str]
    policy: BufferPolicy
    handoff: RedisHandoff

    def message(self, text: str, *, user: str = "alice", conversation: str = "conv") -> InboundMessage:
        target = CardTarget(platform="test", chat_id="chat-1", user_id=user, user_name=user, locale="en")
        ctx = ToolContext(user_id=user, user_name=user, platform="test", chat_id="chat-1", is_group=True)
        return InboundMessage("test", f"{self.name}-{time.monotonic_ns()}", conversation, text, target, ctx)

    async def submit(self, text: str, **kwargs: Any) -> Submission:
        return await self.gateway.submit(self.message(text, **kwargs), self.sink, self.policy)


def _config(base_url: str, *, limits: dict[str, Any] | None = None, gateway: dict[str, Any] | None = None) -> Config:
    return parse_config(
        {
            "llm": {"provider": "custom", "base_url": base_url, "model": "m", "max_rounds": 4},
            "gateway": {"admins": ["root"], **(gateway or {})},
            "card": {"final_deadline_s": 5},
            "access": ACCESS,
            **({"limits": limits} if limits else {}),
        },
        env={},
    )


@asynccontextmanager
async def _process(
    stack: AsyncExitStack, name: str, prefix: str, base_url: str, *, limits: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None, lease_ttl_s: float = 30.0, renew_s: float = 10.0,
    recheck_s: float = RECHECK_S,
) -> AsyncIterator[Process]:
    """Build one process as the composition root does (``botgateway.cli.runtime``), and close it in order."""
    config = _config(base_url, limits=limits, gateway=gateway)
    store = RedisStore(REDIS_URL, prefix, history_ttl_s=3600)
    await store.open()
    stack.push_async_callback(store.close)
    client = fleet_client(REDIS_URL, name)
    stack.push_async_callback(client.aclose)
    leases = ConversationLeases(client, prefix, name, ttl_s=lease_ttl_s, renew_s=renew_s, recheck_s=recheck_s)
    directory = FleetDirectory(client, prefix, name, live=store.live_instances)
    desk = ApprovalDesk(shared=directory)
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2, fences=leases.token)
    stack.push_async_callback(memory.aclose)
    llm = LLMClient(config.llm, base_url=base_url)
    stack.push_async_callback(llm.aclose)
    restarts: list[str] = []
    loop = ToolLoop(llm, ToolRegistry([restart_tool(restarts)]), memory, max_rounds=4, system_prompt="sys",
                    approvals=desk, approval_timeout_s=300)
    fleet = RedisFleet(ControlChannel(client, prefix, name), directory, leases, settle=memory.settle)
    handoff = RedisHandoff(client, prefix, name, live=store.live_instances)
    stack.push_async_callback(handoff.aclose)
    gateway = Gateway(
        loop=loop, store=store, budget=RateBudget(), config=config, instance_id=name, approvals=desk, fleet=fleet,
        clear_history=memory.clear, handoff=handoff,
        limits=PrincipalLimits(store, limits_from_config(config.limits), clock=lambda: FIXED_NOW),
    )
    stack.push_async_callback(gateway.aclose)
    await gateway.start()
    process = Process(name, store, memory, fleet, gateway, RecordingSink(), restarts,
                      BufferPolicy.from_config(config.adapters.terminal.policy), handoff)
    # As `botgateway run` does once its adapters are up: moved questions of the platform are answered here.
    handoff.serve(["test"], lambda moved: gateway.take_over(moved, process.sink, process.policy))
    yield process


@asynccontextmanager
async def two_processes(server: ScriptedLLMServer, **options: Any) -> AsyncIterator[tuple[Process, Process]]:
    """Processes ``a`` and ``b`` on one fresh prefix; ``options`` per process name (``{"a": {...}}``) or shared."""
    prefix = unique_prefix()
    base_url = await server.start()
    try:
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(_process(stack, "a", prefix, base_url, **options.get("a", {})))
            b = await stack.enter_async_context(_process(stack, "b", prefix, base_url, **options.get("b", {})))
            yield a, b
    finally:
        await server.stop()
        await purge_prefix(prefix)


def _user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def _held_until(gate: asyncio.Event, *questions: str) -> Callable[[dict[str, Any]], Awaitable[Script]]:
    """A model that answers ``questions`` only once ``gate`` is set, and anything else at once."""

    async def responder(body: dict[str, Any]) -> Script:
        question = _user_texts(body)[-1]
        if question in questions:
            await gate.wait()
        return Script.text(f"answer to {question}")

    return responder


# --- stops --------------------------------------------------------------------------------


async def test_a_stop_typed_through_b_stops_the_turn_running_on_a_and_only_for_its_asker() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "a long question"))
    async with two_processes(server) as (a, b):
        try:
            sub = await a.submit("a long question")
            await server.wait_for_requests(1)  # running on A

            other = await b.submit("stop", user="mallory")
            assert other.status == "stopped" and other.turn_id == ""
            assert "Only the person who asked" in other.message
            assert not sub.done.done()

            stop = await b.submit("Stop!")
            assert stop.status == "stopped" and stop.turn_id == sub.turn_id
            assert (await asyncio.wait_for(sub.done, 10)).outcome == "stopped"
            card = a.sink.card_for(sub.turn_id)
            assert card is not None and card.status == "stopped"
            assert await a.store.load_turns("conv") == []  # history left as it was
        finally:
            gate.set()


async def test_a_stop_button_pressed_through_b_is_checked_on_a_and_answered_to_b() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "a long question"))
    async with two_processes(server) as (a, b):
        try:
            sub = await a.submit("a long question")
            await server.wait_for_requests(1)
            assert await b.gateway.stop(sub.turn_id, "mallory") == "not_yours"
            assert await b.gateway.stop(sub.turn_id, "root") == "stopped"  # an admin may
            assert (await asyncio.wait_for(sub.done, 10)).outcome == "stopped"
            card = a.sink.card_for(sub.turn_id)
            assert card is not None and "Stopped by root" in card.error
            await until_read(lambda: b.gateway.stop(sub.turn_id, "alice"), lambda answer: answer == "already_done")
            assert await b.gateway.stop("no-such-turn", "alice") == "already_done"
        finally:
            gate.set()


async def test_the_control_channel_comes_back_after_its_connection_is_killed() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "a long question"))
    async with two_processes(server) as (a, b), aioredis.Redis.from_url(REDIS_URL, decode_responses=True) as raw:
        try:
            async def subscriber_of_a() -> str | None:
                clients = await raw.client_list(_type="pubsub")
                return next((c["id"] for c in clients if c.get("name") == "botgateway:a"), None)

            killed = await until_read(subscriber_of_a, lambda found: found is not None)
            await raw.client_kill_filter(_id=killed)
            # A resubscribes on a new connection (the Backoff paces it); until then it could not hear requests.
            await until_read(subscriber_of_a, lambda found: found not in (None, killed))
            assert await a.fleet.control.start(timeout_s=10)  # waits until the new subscription is confirmed

            sub = await a.submit("a long question")
            await server.wait_for_requests(1)
            assert await b.gateway.stop(sub.turn_id, "alice") == "stopped"
            assert (await asyncio.wait_for(sub.done, 10)).outcome == "stopped"
        finally:
            gate.set()


# --- approvals --------------------------------------------------------------------------------


async def test_a_vote_through_b_decides_the_approval_waiting_on_a_and_a_non_approvers_is_refused() -> None:
    server = ScriptedLLMServer()
    server.enqueue(Script.tool_calls([("c1", "restart_server", json.dumps({"host": "web-1"}))]),
                   Script.text("web-1 was restarted."))
    async with two_processes(server) as (a, b):
        sub = await a.submit("restart web-1", user="U1")
        await a.sink.wait_for(lambda: bool((card := a.sink.card_for(sub.turn_id)) and card.approvals))
        [prompt] = a.sink.card_for(sub.turn_id).approvals  # type: ignore[union-attr]

        # A button press received by B: checked on A, where the approval waits, and answered to B.
        refused = await b.gateway.decide_approval(prompt.code, Principal.of("test", "U2"), approved=True,
                                                  locale="en", token=prompt.token)
        assert refused.answer == "not_approver" and "Only an approver" in refused.note
        wrong_token = await b.gateway.decide_approval(prompt.code, Principal.of("test", "UADMIN"), approved=True,
                                                      locale="en", token="not-the-buttons")
        assert wrong_token.answer == "unknown"
        assert a.restarts == [] and not sub.done.done()

        # An approver types the decision in the card's chat, and B receives it.
        typed = await b.submit(f"approve {prompt.code}", user="UADMIN")
        assert typed.status == "approval" and f"Approval {prompt.code}: approved" in typed.message
        outcome = await asyncio.wait_for(sub.done, 15)
        assert outcome.outcome == "done" and a.restarts == ["web-1"]
        [record] = [r for r in await a.store.audit_records() if r.turn_id == sub.turn_id]
        assert record.tool_calls[0]["approval"] == "approved by test:UADMIN"
        late = await b.gateway.decide_approval(prompt.code, Principal.of("test", "UADMIN"), approved=False,
                                               locale="en", token=prompt.token)
        assert late.answer == "unknown"  # decided: the code is quarantined fleet-wide, nothing waits


async def test_approval_codes_are_never_shown_by_two_processes_at_once() -> None:
    server = ScriptedLLMServer()
    async with two_processes(server) as (a, b):
        codes = iter(["4821", "4821", "5555"])
        # Both desks draw the same first code: the second process must take another.
        a_desk = ApprovalDesk(codes=lambda: "4821", shared=a.fleet.directory)
        b_desk = ApprovalDesk(codes=lambda: next(codes), shared=b.fleet.directory)
        asker = Principal.of("test", "U1")
        first = await a_desk.reserve(turn_id="t1", call_id="c", tool="restart_server", arguments={}, asker=asker,
                                     channel="test:chat-1")
        second = await b_desk.reserve(turn_id="t2", call_id="c", tool="restart_server", arguments={}, asker=asker,
                                      channel="test:chat-1")
        assert first is not None and second is not None
        assert (first.request.code, second.request.code) == ("4821", "5555")
        assert await b.fleet.directory.code_owner("4821") == "a"  # a vote for it received by B goes to A
        a_desk.close(first)
        await until_read(lambda: b.fleet.directory.code_owner("4821"), lambda owner: owner is None)  # ended on A
        assert await b.fleet.directory.claim("4821") is False  # quarantined fleet-wide, not free


# --- one turn per conversation ---------------------------------------------------------------


async def test_two_questions_of_one_conversation_on_a_and_b_run_one_after_the_other_and_both_commit_in_order() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "first?"))
    # B tries again only when A's release notice wakes it: no fallback re-check within the test.
    async with two_processes(server, b={"recheck_s": 600}) as (a, b):
        one = await a.submit("first?")
        await server.wait_for_requests(1)
        two = await b.submit("second?")
        # B's card says it waits behind the question being answered, and B does not ask the model yet.
        await b.sink.wait_for(lambda: (c := b.sink.card_for(two.turn_id)) is not None and c.status == "queued")
        assert "Waiting for the previous question" in b.sink.card_for(two.turn_id).error  # type: ignore[union-attr]
        assert len(server.requests) == 1

        gate.set()
        assert (await asyncio.wait_for(one.done, 15)).outcome == "done"
        second = await asyncio.wait_for(two.done, 15)
        assert second.outcome == "done" and second.answer == "answer to second?"
        # The second turn ran after the first and read its history from the store.
        assert _user_texts(server.requests[1]) == ["first?", "second?"]
        await b.memory.flush()
        assert [t.turn_id for t in await b.store.load_turns("conv")] == [one.turn_id, two.turn_id]


async def test_a_lease_given_back_wakes_the_waiting_process_at_once() -> None:
    prefix = unique_prefix()
    async with fleet_client(REDIS_URL, "x") as client:
        x = ConversationLeases(client, prefix, "x", ttl_s=30, renew_s=10)
        y = ConversationLeases(client, prefix, "y", ttl_s=30, renew_s=10, recheck_s=600)  # only a notice wakes it
        control = ControlChannel(client, prefix, "y")

        async def released(body: Any) -> None:
            y.wake(str(body["conversation"]))

        control.on("released", released)
        try:
            assert await control.start()
            assert await x.acquire("c", "x/t1", queued=_never) is False
            first = x.token("c")
            queued = asyncio.Event()

            async def show_queued() -> None:
                queued.set()

            waiting = asyncio.create_task(y.acquire("c", "y/t2", queued=show_queued))
            await queued.wait()
            await x.release("c", "x/t1")
            assert await asyncio.wait_for(waiting, 10) is True
            second = y.token("c")
            assert first is not None and second is not None and second > first  # a new token at each acquisition
        finally:
            await control.aclose()
            await x.aclose()
            await y.aclose()
            await purge_prefix(prefix)


async def _never() -> None:
    raise AssertionError("the lease was free: nobody should wait")


async def test_a_lease_not_renewed_lapses_the_other_proceeds_and_the_late_commit_is_refused() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "first?"))
    # A renews far too late for its lease, as a process paused past the lease's expiry does.
    options = {"a": {"lease_ttl_s": 0.3, "renew_s": 600}, "b": {"recheck_s": 0.05}}
    async with two_processes(server, **options) as (a, b):
        with structlog.testing.capture_logs() as logs:
            one = await a.submit("first?")
            await server.wait_for_requests(1)
            two = await b.submit("second?")
            # A's lease lapses while its turn still runs: B takes the conversation and answers.
            second = await asyncio.wait_for(two.done, 15)
            assert second.outcome == "done" and not one.done.done()
            await b.memory.flush()

            gate.set()  # A wakes up and finishes its answer; its commit carries the token of the lease it lost
            first = await asyncio.wait_for(one.done, 15)
            assert first.outcome == "done" and first.answer == "answer to first?"  # the answer still reaches A's asker
            assert await a.memory.settle("conv", timeout_s=10)
        assert [t.turn_id for t in await b.store.load_turns("conv")] == [two.turn_id]
        fenced = [entry for entry in logs if entry["event"] == "history.write_fenced"]
        assert len(fenced) == 1 and fenced[0]["conversation"] == "conv"
        assert "first?" not in repr(fenced[0])


# --- per-asker limits --------------------------------------------------------------------------


async def test_two_processes_share_an_askers_concurrent_turn_limit_and_per_minute_quota() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "first?"))
    limits = {"concurrent_turns": 1, "turns_per_minute": 2}
    async with two_processes(server, a={"limits": limits}, b={"limits": limits}) as (a, b):
        one = await a.submit("first?", conversation="c1")
        assert one.status == "started"
        busy = await b.submit("second?", conversation="c2")  # alice's one turn in progress is on A
        assert busy.status == "refused" and "already have 1 question(s) in progress" in busy.message
        gate.set()
        await asyncio.wait_for(one.done, 15)

        three = await b.submit("third?", conversation="c3")  # her second question this minute
        assert three.status == "started"
        await asyncio.wait_for(three.done, 15)
        over = await a.submit("fourth?", conversation="c4")  # the third, on the other process
        assert over.status == "refused" and "asked 2 questions this minute" in over.message
        other = await a.submit("fifth?", conversation="c5", user="bob")  # someone else's quota is their own
        assert other.status == "started"
        await asyncio.wait_for(other.done, 15)


# --- questions moved by a draining process ------------------------------------------------------


def _card_status(process: Process, turn_id: str) -> str:
    card = process.sink.card_for(turn_id)
    return card.status if card is not None else ""


async def test_a_draining_process_moves_its_waiting_questions_to_the_other_which_answers_each_once_in_order() -> None:
    gate = asyncio.Event()
    server = ScriptedLLMServer(responder=_held_until(gate, "first?"))
    # A runs one turn at a time, so the question of the other conversation waits there for a slot.
    async with two_processes(server, a={"gateway": {"max_concurrent_turns": 1}}) as (a, b):
        try:
            running = await a.submit("first?", conversation="c1")
            await server.wait_for_requests(1)
            second = await a.submit("second?", conversation="c1")
            third = await a.submit("third?", conversation="c1")
            other = await a.submit("other?", conversation="c2")
            assert (second.status, third.status) == ("queued", "queued") and len(server.requests) == 1

            drain = asyncio.create_task(a.gateway.drain(60))
            # A's cards of the waiting questions end at once, saying that another instance answers.
            waiting = (second, third, other)
            moved = await asyncio.wait_for(asyncio.gather(*(sub.done for sub in waiting if sub.done)), 15)
            assert [outcome.outcome for outcome in moved] == ["moved"] * 3
            for sub in waiting:
                card = a.sink.card_for(sub.turn_id)
                assert card is not None and card.status == "stopped" and "Moved to another instance" in card.error
            # B answers the other conversation's question; c1's wait there behind the turn still running on A.
            await b.sink.wait_for(lambda: _card_status(b, other.turn_id) == "done", timeout=15)
            await b.sink.wait_for(lambda: _card_status(b, second.turn_id) == "queued", timeout=15)
            assert sorted(_user_texts(r)[-1] for r in server.requests) == ["first?", "other?"]
            assert not drain.done()  # the running turn has the whole drain_s

            gate.set()
            assert await asyncio.wait_for(drain, 15) is True
            assert (await asyncio.wait_for(running.done, 5)).outcome == "done"  # type: ignore[arg-type]
            await b.sink.wait_for(lambda: _card_status(b, third.turn_id) == "done", timeout=15)
        finally:
            gate.set()
        # Each question reached the model once; c1's in their order, each after the one before had committed.
        asked = [_user_texts(request) for request in server.requests]
        assert sorted(texts[-1] for texts in asked) == ["first?", "other?", "second?", "third?"]
        assert [texts for texts in asked if texts[0] == "first?"] == [
            ["first?"], ["first?", "second?"], ["first?", "second?", "third?"]]
        await b.memory.flush()
        assert [t.turn_id for t in await b.store.load_turns("c1")] == [running.turn_id, second.turn_id, third.turn_id]
        # One audit record per question, written where it was answered (after its card), under the turn id it was
        # admitted with.
        expected = sorted((sub.turn_id, "done") for sub in (running, second, third, other))
        records = await until_read(b.store.audit_records, lambda found: len(found) >= len(expected))
        assert sorted((r.turn_id, r.outcome) for r in records) == expected


async def test_a_moved_question_taken_too_late_is_not_answered_and_its_asker_is_asked_to_ask_again() -> None:
    server = ScriptedLLMServer()
    async with two_processes(server, b={"gateway": {"handoff_max_age_s": 600}}) as (a, b):
        await a.handoff.stop_serving()  # B alone takes it, as the first process up after the whole fleet restarted
        msg = a.message("a question from before the restart?")
        old = MovedQuestion(msg=msg, turn_id="t-old", moved_at=time.time() - 3600, moved_by="gone")
        assert await a.handoff.put([old])
        await b.sink.wait_for(lambda: any("waited too long" in note.error for note in b.sink.fallbacks()))
        assert server.requests == [] and b.sink.card_for("t-old") is None
        assert [r.outcome for r in await b.store.audit_records() if r.turn_id == "t-old"] == ["expired"]


async def test_a_moved_question_delivered_twice_is_answered_once() -> None:
    # The queue delivers at least once: an entry read again after a failed acknowledgement, or claimed from a
    # process that died before acknowledging it, reaches a gateway a second time.
    server = ScriptedLLMServer(responder=lambda body: Script.text("moved answer"))
    async with two_processes(server) as (a, b):
        msg = a.message("which host is 10.0.1.100?")
        moved = MovedQuestion(msg=msg, turn_id="t-twice", moved_at=time.time(), moved_by="gone")
        first = await b.gateway.take_over(moved, b.sink, b.policy)
        again = await a.gateway.take_over(moved, a.sink, a.policy)
        assert first.status == "started" and again.status == "duplicate"
        assert first.done is not None
        await first.done
        assert server.request_count == 1
