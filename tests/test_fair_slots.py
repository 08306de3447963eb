"""FairSlots: a cap per asker and round-robin hand-over of free slots (pure asyncio, ordered by events, no clocks)."""

from __future__ import annotations

import asyncio

from botgateway.fair_slots import FairSlots, fair_share


class Turns:
    """Tasks holding a slot until told to finish; ``started`` lists them in the order they got one."""

    def __init__(self, slots: FairSlots) -> None:
        self.slots = slots
        self.started: list[str] = []
        self.finish: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def submit(self, key: str, name: str) -> None:
        self.finish[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(self._run(key, name))

    async def _run(self, key: str, name: str) -> None:
        async with self.slots.hold(key):
            self.started.append(name)
            await self.finish[name].wait()

    async def settle(self) -> None:
        """Let every task that can move do so (each step is a handful of loop iterations)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def end(self, name: str) -> None:
        self.finish[name].set()
        await self.tasks[name]
        await self.settle()


def test_fair_share_is_a_part_of_the_slots_and_at_least_one() -> None:
    assert fair_share(64, 0.5) == 32
    assert fair_share(2, 0.5) == 1
    assert fair_share(1, 0.5) == 1
    assert fair_share(5, 1.0) == 5


async def test_one_asker_holds_at_most_its_share_and_another_gets_a_slot_at_once() -> None:
    turns = Turns(FairSlots(2, per_key=1))
    for n in range(40):
        turns.submit("slack:A", f"a{n}")
    await turns.settle()
    turns.submit("slack:B", "b")
    await turns.settle()
    assert turns.started == ["a0", "b"]
    assert turns.slots.waiting("slack:A") == 39


async def test_free_slots_go_round_robin_by_asker_not_first_come() -> None:
    turns = Turns(FairSlots(2, per_key=2))
    for n in range(5):
        turns.submit("A", f"a{n}")
    await turns.settle()
    turns.submit("B", "b0")
    turns.submit("B", "b1")
    turns.submit("C", "c0")
    await turns.settle()
    assert turns.started == ["a0", "a1"]  # A came first and may hold both while nobody waits
    await turns.end("a0")
    await turns.end("a1")
    await turns.end("b0")
    # A was waiting first, so it is served first; then B, then C, then A, B, A again.
    assert turns.started == ["a0", "a1", "a2", "b0", "c0"]
    for name in ("a2", "c0", "a3"):
        await turns.end(name)
    assert turns.started[5:] == ["a3", "b1", "a4"]


async def test_a_cancelled_waiter_gives_up_its_place_and_a_granted_one_passes_the_slot_on() -> None:
    turns = Turns(FairSlots(1, per_key=1))
    turns.submit("A", "a0")
    turns.submit("B", "b0")
    turns.submit("C", "c0")
    await turns.settle()
    turns.tasks["b0"].cancel()
    await turns.settle()
    await turns.end("a0")
    assert turns.started == ["a0", "c0"]
    await turns.end("c0")
    assert turns.slots.held("A") == turns.slots.held("C") == 0
    turns.submit("D", "d0")
    await turns.settle()
    assert turns.started[-1] == "d0"
