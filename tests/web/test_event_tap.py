"""One client's tap on a turn's events: in order, never blocking the turn, ended when the client falls behind."""

from __future__ import annotations

import asyncio

from adapters.web.tap import EventTap
from botgateway.events import AnswerDelta, TurnEvent
from botgateway.messages import TurnOutcome


async def read_all(tap: EventTap, done: asyncio.Future[TurnOutcome]) -> list[TurnEvent]:
    return [event async for event in tap.events(done)]


async def test_events_come_in_order_until_the_turn_is_final() -> None:
    tap = EventTap(max_pending=16)
    done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
    reader = asyncio.ensure_future(read_all(tap, done))
    for i in range(5):
        tap(AnswerDelta(text=str(i)))
    done.set_result(TurnOutcome(turn_id="t", outcome="done"))
    events = await reader
    assert [e.text for e in events if isinstance(e, AnswerDelta)] == ["0", "1", "2", "3", "4"]


async def test_a_reader_that_falls_behind_overflows_and_its_stream_ends() -> None:
    tap = EventTap(max_pending=16)
    for i in range(20):  # the turn goes on: no call blocks, none raises
        tap(AnswerDelta(text=str(i)))
    assert tap.overflowed.is_set()
    done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
    assert await read_all(tap, done) == []  # the stream ends at once (its owner stops the turn), never done
    assert not done.done()
