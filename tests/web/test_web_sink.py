"""The web sink keeps each turn's newest card for a while and within bounds; a watcher of a card it lets go ends."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from adapters.web.routes import send_board
from adapters.web.sink import WebSink
from adapters.web.sse import SseStream
from botgateway.http import HttpServer
from botgateway.sink import CardHandle, CardTarget
from botgateway.snapshot import CardSnapshot
from tests.parked import parked


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def target(turn_id: str) -> CardTarget:
    return CardTarget(platform="web", chat_id="c", user_id="api:ci", turn_id=turn_id)


def snapshot(answer: str, *, final: bool = False, seq: int = 1) -> CardSnapshot:
    return CardSnapshot(status="done" if final else "answering", answer=answer, seq=seq)


async def test_a_finished_card_is_kept_for_late_watchers_then_let_go() -> None:
    clock = Clock()
    sink = WebSink(keep_final_s=60.0, clock=clock)
    handle = await sink.create(target("t1"), snapshot("half"))
    await sink.finalize(handle, snapshot("whole", final=True, seq=2))
    clock.now += 59
    kept = sink.board("t1")
    assert kept is not None and kept.snapshot.answer == "whole"
    clock.now += 2
    assert sink.board("t1") is None and len(sink) == 0 and sink.kept_chars == 0
    assert kept.dropped


async def test_running_cards_are_kept_until_the_bounds_make_room() -> None:
    clock = Clock()
    sink = WebSink(max_boards=3, max_total_chars=1000, clock=clock)
    for n in range(3):
        await sink.create(target(f"t{n}"), snapshot("x" * 100))
    clock.now += 3600  # running cards do not expire
    assert [sink.board(f"t{n}") is not None for n in range(3)] == [True, True, True]
    await sink.create(target("t3"), snapshot("x" * 100))  # one card too many: the least recently changed goes
    assert sink.board("t0") is None and len(sink) == 3
    await sink.update(sink_handle("t1"), snapshot("y" * 900, seq=2))  # too many characters: the oldest goes
    assert sink.board("t2") is None and sink.board("t1") is not None
    assert sink.kept_chars <= 1000


def sink_handle(turn_id: str) -> CardHandle:
    return CardHandle(card_id=turn_id, target=target(turn_id))


async def test_a_watcher_of_a_card_the_sink_lets_go_is_woken_and_told() -> None:
    sink = WebSink(max_boards=1)
    await sink.create(target("t1"), snapshot("running"))
    board = sink.board("t1")
    assert board is not None
    waiting = await parked(board.changed_since(board.version))
    assert not waiting.done()  # inside its wait for a change
    await sink.create(target("t2"), snapshot("another"))  # pushes t1 out
    await asyncio.wait_for(waiting, 5)  # woken, not left hanging
    assert board.dropped


async def test_a_watcher_waits_for_a_queued_turn_to_open_its_card() -> None:
    sink = WebSink()
    found = await parked(sink.wait_board("t9"))
    assert not found.done()  # inside its wait for the card
    await sink.create(target("t9"), snapshot("started"))
    board = await asyncio.wait_for(found, 5)
    assert board.snapshot.answer == "started"


async def test_a_card_stream_whose_card_is_let_go_ends_with_an_end_message() -> None:
    sink = WebSink(max_boards=1)
    await sink.create(target("t1"), snapshot("running"))

    async def card(request: web.Request) -> web.StreamResponse:
        board = sink.board("t1")
        assert board is not None
        stream = await SseStream.open(request)
        await send_board(stream, board, "t1")
        await stream.close()
        return stream.response

    server = HttpServer("127.0.0.1", 0)
    server.add_routes([web.get("/card", card)])
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/card") as response:
            assert await response.content.readline() == b"event: snapshot\n"
            await sink.create(target("t2"), snapshot("another"))  # pushes t1 out while it is watched
            rest = (await asyncio.wait_for(response.content.read(), 10)).decode()
    finally:
        await server.aclose()
    assert rest.rstrip().endswith('event: end\ndata: {"turn_id": "t1", "reason": "dropped"}')
