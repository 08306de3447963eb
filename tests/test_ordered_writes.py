"""Background writes in order per key: a removal spawned after an addition lands after it, whatever runs first."""

from __future__ import annotations

import asyncio

from botgateway.background import BackgroundTasks, OrderedWrites


async def write(landed: list[str], what: str, gate: asyncio.Event | None = None) -> None:
    """Note ``what`` as landed, once ``gate`` is set (a slow round trip)."""
    if gate is not None:
        await gate.wait()
    landed.append(what)


async def test_a_write_waits_for_the_earlier_write_of_its_key_and_no_other() -> None:
    tasks = BackgroundTasks()
    writes = OrderedWrites(tasks)
    landed: list[str] = []
    slow = asyncio.Event()
    writes.spawn("turn-1", write(landed, "add turn-1", slow))
    writes.spawn("turn-1", write(landed, "remove turn-1"))
    writes.spawn("turn-2", write(landed, "add turn-2"))
    await writes.written("turn-2")
    assert landed == ["add turn-2"]  # another key does not wait; turn-1's removal waits for its addition
    slow.set()
    await writes.written("turn-1")
    assert landed == ["add turn-2", "add turn-1", "remove turn-1"]
    await tasks.aclose()


async def test_a_write_cancelled_before_its_turn_never_runs_and_closed_writes_start_nothing() -> None:
    tasks = BackgroundTasks()
    writes = OrderedWrites(tasks)
    landed: list[str] = []
    writes.spawn("k", write(landed, "first", asyncio.Event()))  # never lands
    writes.spawn("k", write(landed, "second"))
    await tasks.aclose()  # shutdown: both cancelled, the second before its turn came
    writes.spawn("k", write(landed, "after shutdown"))
    await writes.written("k")
    assert landed == []
