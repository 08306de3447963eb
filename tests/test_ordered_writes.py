"""Background writes in order per key: a removal spawned after an addition lands after it, whatever runs first."""

from __future__ import annotations

import asyncio

from botgateway.background import BackgroundTasks, OrderedWrites


async def test_a_write_waits_for_the_earlier_write_of_its_key_and_no_other() -> None:
    tasks = BackgroundTasks()
    writes = OrderedWrites(tasks)
    landed: list[str] = []
    slow = asyncio.Event()

    async def write(what: str, gate: asyncio.Event | None = None) -> None:
        if gate is not None:
            await gate.wait()  # the addition's round trip is slow
        landed.append(what)

    writes.spawn("turn-1", write("add turn-1", slow))
    writes.spawn("turn-1", write("remove turn-1"))
    writes.spawn("turn-2", write("add turn-2"))
    await writes.written("turn-2")
    assert landed == ["add turn-2"]  # another key does not wait; turn-1's removal waits for its addition
    slow.set()
    await writes.written("turn-1")
    assert landed == ["add turn-2", "add turn-1", "remove turn-1"]
    await tasks.aclose()


async def test_a_write_cancelled_before_its_turn_never_runs_and_closed_writes_start_nothing() -> None:
    tasks = BackgroundTasks()
    writes = OrderedWrites(tasks)
    ran: list[str] = []
    never = asyncio.Event()

    async def write(what: str, gate: asyncio.Event | None = None) -> None:
        if gate is not None:
            await gate.wait()
        ran.append(what)

    writes.spawn("k", write("first", never))
    writes.spawn("k", write("second"))
    await tasks.aclose()  # shutdown: both cancelled, the second before its turn came
    writes.spawn("k", write("after shutdown"))
    await writes.written("k")
    assert ran == []
