"""The fleet's queue of moved questions on the real Redis: what a draining process puts, another takes, once.

A question moves whole (principal, groups, roles, access grant, locale, thread,
card target); one conversation's questions move as one entry and are taken in
their order; an entry held by a process that is gone is claimed by a live one,
one held before a restart is taken by the restarted process, and one read but
not handed on when a process stops serving goes back for the others.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from botgateway.fleet.handoff import MovedQuestion
from botgateway.fleet.redis_fleet import fleet_client
from botgateway.fleet.redis_handoff import GROUP, RedisHandoff, moved_stream
from botgateway.fleet.wire import moved_from_wire, moved_to_wire
from botgateway.grant import Grant, Limits, Scope
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix


def question(text: str, *, conversation: str = "slack:T1:C1:170.1", turn_id: str = "t1") -> MovedQuestion:
    """A question as a Slack thread's turn carries it after admission: every field that decides how it runs."""
    principal = Principal.of("slack", "U1", team="T2", external=True, groups=frozenset({"slack:S0ONCALL"}), name="Ann")
    grant = Grant(
        roles=("oncall", "viewer"), tools=frozenset({"aliyun__list_instances", "restart_server"}),
        scopes=(Scope(provider="aliyun", account="prod", region="cn-hangzhou", tags={"env": "!prod"}),),
        approval=frozenset({"restart_server"}), approver=True,
        limits=Limits(turns_per_minute=5, concurrent_turns=2, tokens_per_day=100_000),
    )
    target = CardTarget(platform="slack", chat_id="C1", turn_id=turn_id, thread_id="170.1", user_id="U1",
                        user_name="Ann", is_group=True, locale="zh-CN", workspace_id="T1",
                        extra={"assistant_thread": False, "channel_type": "channel"})
    ctx = ToolContext(user_id="U1", user_name="Ann", platform="slack", conversation_id=conversation, chat_id="C1",
                      is_group=True, roles=frozenset({"oncall", "viewer", "admin"}), principal=principal, grant=grant)
    msg = InboundMessage("slack", "170.2", conversation, text, target, ctx, principal=principal)
    return MovedQuestion(msg=msg, turn_id=turn_id, moved_at=1_700_000_000.5, moved_by="replica-a")


def test_a_moved_question_crosses_as_json_without_losing_anything() -> None:
    moved = question("which hosts run in cn-hangzhou?")
    assert moved_from_wire(json.loads(json.dumps(moved_to_wire(moved)))) == moved
    bare = MovedQuestion(msg=InboundMessage("dingtalk", "", "dingtalk::c", "hi", CardTarget("dingtalk", "c"),
                                            ToolContext()), turn_id="t2", moved_at=1.0, moved_by="b")
    assert moved_from_wire(json.loads(json.dumps(moved_to_wire(bare)))) == bare


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("message"),
    lambda d: d["message"]["ctx"]["principal"].update(groups="slack:S0ONCALL"),
    lambda d: d["message"]["ctx"]["grant"].update(scopes=[{"provider": "aliyun"}]),
    lambda d: d["message"]["target"].update(thread_id=170.1),
    lambda d: d.update(moved_at="yesterday"),
])
def test_a_malformed_moved_question_is_refused(damage: Callable[[dict], object]) -> None:
    data = json.loads(json.dumps(moved_to_wire(question("q"))))
    damage(data)
    with pytest.raises(ValueError):
        moved_from_wire(data)


class Taker:
    """What a gateway does with the questions it takes, recorded (and held at will)."""

    def __init__(self) -> None:
        self.taken: list[MovedQuestion] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self._changed = asyncio.Condition()

    async def __call__(self, moved: MovedQuestion) -> None:
        await self.hold.wait()
        self.taken.append(moved)
        async with self._changed:
            self._changed.notify_all()

    def texts(self) -> list[str]:
        return [moved.msg.text for moved in self.taken]

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(10):
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.taken) >= count)


def _live(*ids: str) -> Callable[[], Awaitable[set[str]]]:
    async def live() -> set[str]:
        return set(ids)

    return live


@asynccontextmanager
async def redis_for_test() -> AsyncIterator[tuple[aioredis.Redis, str]]:
    prefix = unique_prefix()
    client = fleet_client(REDIS_URL, "test")
    try:
        yield client, prefix
    finally:
        await client.aclose()
        await purge_prefix(prefix)


async def _consumers(client: aioredis.Redis, stream: str) -> set[str]:
    return {str(c["name"]) for c in await client.xinfo_consumers(stream, GROUP)}


async def test_one_conversation_s_questions_are_taken_by_one_process_in_their_order() -> None:
    async with redis_for_test() as (client, prefix):
        a = RedisHandoff(client, prefix, "a", live=_live("a", "b"))
        b = RedisHandoff(client, prefix, "b", live=_live("a", "b"))
        taker = Taker()
        try:
            b.serve(["slack"], taker)
            assert b.platforms == {"slack"}
            line = [question(f"q{n}", turn_id=f"t{n}") for n in range(3)]
            assert await a.put(line)
            await taker.wait_for(3)
            assert taker.taken == line
            assert await client.xlen(moved_stream(prefix, "slack")) == 0  # taken entries are deleted
        finally:
            await a.aclose()
            await b.aclose()


async def test_an_entry_held_by_a_process_that_is_gone_is_claimed_by_a_live_one_and_the_gone_one_forgotten() -> None:
    async with redis_for_test() as (client, prefix):
        a = RedisHandoff(client, prefix, "a", live=_live("a", "b"))
        b = RedisHandoff(client, prefix, "b", live=_live("b"))  # "gone" has stopped beating
        taker = Taker()
        stream = moved_stream(prefix, "slack")
        try:
            assert await a.put([question("taken by a process that died")])
            await client.xgroup_create(stream, GROUP, id="0")
            # "gone" read it (so it is pending under its name) and died before handing it on.
            assert await client.xreadgroup(GROUP, "gone", {stream: ">"}, count=10)
            b.serve(["slack"], taker)
            await taker.wait_for(1)
            assert taker.texts() == ["taken by a process that died"]
            assert await _consumers(client, stream) == {"b"}
        finally:
            await a.aclose()
            await b.aclose()


async def test_a_process_restarted_under_its_id_takes_what_it_held_before() -> None:
    async with redis_for_test() as (client, prefix):
        a = RedisHandoff(client, prefix, "a", live=_live("a", "b"))
        b = RedisHandoff(client, prefix, "b", live=_live("a", "b"))  # b is live again: nobody else may claim it
        taker = Taker()
        stream = moved_stream(prefix, "slack")
        try:
            assert await a.put([question("held by b's previous life")])
            await client.xgroup_create(stream, GROUP, id="0")
            assert await client.xreadgroup(GROUP, "b", {stream: ">"}, count=10)
            b.serve(["slack"], taker)
            await taker.wait_for(1)
            assert taker.texts() == ["held by b's previous life"]
        finally:
            await a.aclose()
            await b.aclose()


async def test_what_a_process_read_and_did_not_hand_on_when_it_stops_serving_goes_to_the_others() -> None:
    async with redis_for_test() as (client, prefix):
        a = RedisHandoff(client, prefix, "a", live=_live("a", "b"))
        b = RedisHandoff(client, prefix, "b", live=_live("a", "b"))
        at_a, at_b = Taker(), Taker()
        try:
            assert await b.put([question("first", conversation="c1", turn_id="t1")])
            assert await b.put([question("second", conversation="c2", turn_id="t2")])
            stream = moved_stream(prefix, "slack")
            await client.xgroup_create(stream, GROUP, id="0")
            at_a.hold.clear()
            a.serve(["slack"], at_a)  # reads both entries at once, and is held handing on the first
            async with asyncio.timeout(10):
                while len(await client.xpending_range(stream, GROUP, min="-", max="+", count=10, consumername="a")) < 2:
                    await asyncio.sleep(0.02)  # state only Redis holds: polled
            stopping = asyncio.create_task(a.stop_serving())
            at_a.hold.set()
            await stopping
            assert at_a.texts() == ["first"]  # the question being handed on was handed on
            b.serve(["slack"], at_b)
            await at_b.wait_for(1)
            assert at_b.texts() == ["second"]
            assert "a" not in await _consumers(client, stream)
        finally:
            await a.aclose()
            await b.aclose()


async def test_a_move_that_redis_refuses_says_so_and_raises_nothing() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", decode_responses=True, socket_connect_timeout=1)
    try:
        handoff = RedisHandoff(client, unique_prefix(), "a", live=_live("a"))
        assert await handoff.put([question("q")]) is False
        await handoff.aclose()
    finally:
        await client.aclose()

