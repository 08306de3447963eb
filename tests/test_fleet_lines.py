"""A channel's line kept for the whole fleet, in the real Redis: each ChannelLines here stands for one replica.

The answers of one Slack channel are spread over the replicas; they take its
new messages in the order their questions were asked, whichever replica runs
them, a dead replica's places leave the line once it stops counting as live,
and Redis out of reach leaves each replica its own line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.slack.channel_line import ChannelLines
from botgateway.fleet.lines import RedisLines
from botgateway.sink import CardTarget
from botgateway.stores.redis_connect import redis_client
from tests.fakes.stores import REDIS_URL
from tests.parked import parked


class Clock:
    """Unix time the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_010.0  # the test's questions were asked ten seconds ago

    def __call__(self) -> float:
        return self.now


def asked(turn: str, ts: str, channel: str = "C1") -> CardTarget:
    return CardTarget(platform="slack", chat_id=channel, thread_id=ts, turn_id=turn, user_id="U1", is_group=True,
                      workspace_id="T1", extra={"ts": ts})


@pytest.fixture
async def clients() -> AsyncIterator[list]:
    made: list = []
    try:
        yield made
    finally:
        for client in made:
            await client.aclose()


def _client(clients: list, url: str = REDIS_URL) -> Any:
    """A replica's own Redis connections (closed by the ``clients`` fixture)."""
    client = redis_client(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    clients.append(client)
    return client


def replica(prefix: str, clients: list, clock: Clock | None = None, *, url: str = REDIS_URL) -> RedisLines:
    """One replica's lines on the test's Redis (its own connections, as a process has)."""
    return RedisLines(_client(clients, url), prefix, ttl_s=30.0, clock=clock or Clock())


async def until_said(lines: RedisLines, member: str, said: tuple[bool, int]) -> None:
    """Ask the fleet's line of T1:C1 about ``member`` until it says ``said`` (its place written by now)."""
    async with asyncio.timeout(5):
        while (await lines.first("T1:C1", member))[:2] != said:
            await asyncio.sleep(0)


async def test_a_channels_answers_on_two_replicas_take_its_slots_in_the_order_they_were_asked(
    redis_prefix: str, clients: list,
) -> None:
    a_lines, b_lines = replica(redis_prefix, clients), replica(redis_prefix, clients)
    a, b = ChannelLines(fleet=a_lines), ChannelLines(fleet=b_lines)
    third = a.line_up(asked("t3", "1800000000.000300"))  # the first to line up, on replica a...
    first = b.line_up(asked("t1", "1800000000.000100"))  # ...but asked after these two, on replica b
    second = b.line_up(asked("t2", "1800000000.000200"))
    await asyncio.wait_for(first.turn(), 5)  # b's local head, and the fleet's
    waiting_third, waiting_second = await parked(third.turn()), await parked(second.turn())
    await until_said(a_lines, third.member, (False, 2))  # third is a's local head, not the fleet's
    assert not waiting_third.done()
    b.made(asked("t1", "1800000000.000100"))  # its message is being made: the next one goes
    await asyncio.wait_for(waiting_second, 5)
    assert not waiting_third.done()
    second.leave()  # an answer that ended without a message gives its place up
    await asyncio.wait_for(waiting_third, 5)
    third.leave()
    async with asyncio.timeout(5):  # every place left (in the background): the line is empty
        while await a_lines.size("T1:C1"):
            await asyncio.sleep(0)


async def test_a_stop_control_waits_for_the_other_replicas_answers_of_its_channel(redis_prefix: str, clients: list) -> None:
    a, b = ChannelLines(fleet=replica(redis_prefix, clients)), ChannelLines(fleet=replica(redis_prefix, clients))
    queued = b.line_up(asked("t1", "1800000000.000100"))
    await asyncio.wait_for(queued.turn(), 5)
    idle = await parked(a.idle(asked("control", "1800000000.000900")))  # a's own line is empty
    with pytest.raises(TimeoutError):  # several of a's polls of the fleet's line: none lets the control go
        await asyncio.wait_for(asyncio.shield(idle), 0.3)
    queued.leave()
    await asyncio.wait_for(idle, 5)
    await asyncio.wait_for(a.idle(asked("control", "1800000000.000900", channel="C2")), 5)  # another channel


async def test_a_dead_replicas_places_leave_the_line_once_it_stops_counting_as_live(redis_prefix: str, clients: list) -> None:
    clock = Clock()
    dead = ChannelLines(fleet=replica(redis_prefix, clients, clock))
    alive_lines = replica(redis_prefix, clients, clock)
    alive = ChannelLines(fleet=alive_lines)
    for n in range(3):  # lined up, then the replica died: nothing of it pushes their expiries forward again
        await dead.join(dead.line_up(asked(f"d{n}", f"1800000000.00000{n}")))
    mine = alive.line_up(asked("t9", "1800000000.000900"))
    waiting = await parked(mine.turn())
    clock.now += 29.0
    await until_said(alive_lines, mine.member, (False, 3))
    assert not waiting.done()
    clock.now += 2.0  # past their ttl they are gone, while the live place's own expiry was kept
    await asyncio.wait_for(waiting, 5)
    assert await alive_lines.size("T1:C1") == 1


async def test_redis_out_of_reach_leaves_each_replica_its_own_line(redis_prefix: str, clients: list) -> None:
    lines = ChannelLines(fleet=replica(redis_prefix, clients, url="redis://127.0.0.1:1/0"))
    first, second = lines.line_up(asked("t1", "1800000000.000100")), lines.line_up(asked("t2", "1800000000.000200"))
    await asyncio.wait_for(first.turn(), 10)
    waiting = await parked(second.turn())
    assert not waiting.done()
    first.leave()
    await asyncio.wait_for(waiting, 10)
    second.leave()
    await asyncio.wait_for(lines.idle(asked("t3", "1800000000.000300")), 10)


async def test_a_head_waiting_for_the_fleet_steps_back_for_a_question_asked_before_it(
    redis_prefix: str, clients: list,
) -> None:
    """A question asked earlier but lined up later on the same replica goes first: else that replica's head would
    wait for the fleet's head, which waits behind it, for good."""
    a, b = ChannelLines(fleet=replica(redis_prefix, clients)), ChannelLines(fleet=replica(redis_prefix, clients))
    other = b.line_up(asked("t1", "1800000000.000100"))
    await asyncio.wait_for(other.turn(), 5)  # b's answer heads the fleet's line
    late = a.line_up(asked("t5", "1800000000.000500"))
    waiting_late = await parked(late.turn())  # a's head, waiting for the fleet's line
    early = a.line_up(asked("t2", "1800000000.000200"))  # asked before it, lined up after it
    waiting_early = await parked(early.turn())
    assert early.head.is_set() and not late.head.is_set()
    other.leave()
    await asyncio.wait_for(waiting_early, 5)
    assert not waiting_late.done()
    early.leave()
    await asyncio.wait_for(waiting_late, 5)
    late.leave()


async def test_a_fresh_question_lets_one_asked_a_moment_before_it_on_another_replica_join_first(
    redis_prefix: str, clients: list,
) -> None:
    """In a burst the questions reach the replicas a moment apart: a head whose question is younger than the settle
    time waits while others wait in its channel, so one asked just before it elsewhere can still take its place."""
    clock = Clock()
    clock.now = 1_800_000_000.1  # the questions below were asked a tenth of a second ago
    a_lines, b_lines = replica(redis_prefix, clients, clock), replica(redis_prefix, clients, clock)
    a, b = ChannelLines(fleet=a_lines), ChannelLines(fleet=b_lines)
    alone = a.line_up(asked("t0", "1800000000.000000", channel="C9"))
    await asyncio.wait_for(alone.turn(), 5)  # alone in its channel: at once, however fresh
    await b.join(b.line_up(asked("t9", "1800000000.000900")))  # someone else waits in the channel
    later = a.line_up(asked("t2", "1800000000.000200"))
    waiting = await parked(later.turn())
    await until_said(a_lines, later.member, (True, 0))  # it heads the fleet's line, but its question is fresh...
    earlier = b.line_up(asked("t1", "1800000000.000100"))  # ...and one asked before it arrives on replica b
    waiting_earlier = await parked(earlier.turn())
    clock.now += 0.5
    await asyncio.wait_for(waiting_earlier, 5)
    assert not waiting.done()
    earlier.leave()
    await asyncio.wait_for(waiting, 5)


async def test_an_announced_question_holds_its_place_until_its_card_takes_it_over_or_it_expires(
    redis_prefix: str, clients: list,
) -> None:
    """A question taken on one replica holds its place before its card lines up; its card's place takes the
    announcement over (the line does not count it twice), and an announcement no card took over (its process died
    first) leaves the line after ``announced_ttl_s``."""
    clock = Clock()
    a_lines = RedisLines(_client(clients), redis_prefix, ttl_s=30.0, announced_ttl_s=5.0, clock=clock)
    b_lines = replica(redis_prefix, clients, clock)
    a, b = ChannelLines(fleet=a_lines), ChannelLines(fleet=b_lines)
    a.announce("T1", "C1", "1800000000.000100")
    later = b.line_up(asked("t2", "1800000000.000200"))
    waiting = await parked(later.turn())
    await until_said(b_lines, later.member, (False, 1))
    early = a.line_up(asked("t1", "1800000000.000100"))
    await asyncio.wait_for(early.turn(), 5)  # its card took the announcement's place: nothing ahead of it
    assert await a_lines.size("T1:C1") == 2
    assert not waiting.done()
    early.leave()
    await asyncio.wait_for(waiting, 5)
    later.leave()

    a.announce("T1", "C1", "1800000000.000300")  # its process dies before its card lines up
    last = b.line_up(asked("t4", "1800000000.000400"))
    waiting = await parked(last.turn())
    await until_said(b_lines, last.member, (False, 1))
    clock.now += 5.1
    await asyncio.wait_for(waiting, 5)
    last.leave()
