"""FairSlots: a cap per asker and round-robin hand-over of free slots (pure asyncio, ordered by events, no clocks)."""

from __future__ import annotations

import asyncio

from botgateway.turns import FairSlots, fair_share
from tests.parked import parked


class Turns:
    """Tasks holding a slot until told to finish; ``started`` lists them in the order they got one."""

    def __init__(self, slots: FairSlots) -> None:
        self.slots = slots
        self.started: list[str] = []
        self.finish: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._keys: set[str] = set()
        self._moved = asyncio.Condition()  # notified as a turn takes up its slot

    async def submit(self, key: str, name: str) -> None:
        """Start a turn of ``key``; when this returns it holds a slot or waits in line for one."""
        self.finish[name] = asyncio.Event()
        self._keys.add(key)
        self.tasks[name] = await parked(self._run(key, name))

    async def _run(self, key: str, name: str) -> None:
        async with self.slots.hold(key):
            self.started.append(name)
            async with self._moved:
                self._moved.notify_all()
            await self.finish[name].wait()

    def _still(self) -> bool:
        """Every turn not ended holds a slot and shows in ``started``, or waits in line: nothing can move."""
        live = [name for name, task in self.tasks.items() if not task.done()]
        holding = sum(1 for name in live if name in self.started)
        return holding + sum(self.slots.waiting(key) for key in self._keys) == len(live)

    async def settle(self) -> None:
        """Wait until every slot handed over is taken up by its turn (the others wait in line)."""
        async with asyncio.timeout(10), self._moved:
            await self._moved.wait_for(self._still)

    async def end(self, name: str) -> None:
        """Let ``name`` finish, and wait for the turns its slot went to."""
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
        await turns.submit("slack:A", f"a{n}")
    await turns.settle()
    await turns.submit("slack:B", "b")
    await turns.settle()
    assert turns.started == ["a0", "b"]
    assert turns.slots.waiting("slack:A") == 39


async def test_free_slots_go_round_robin_by_asker_not_first_come() -> None:
    turns = Turns(FairSlots(2, per_key=2))
    for n in range(5):
        await turns.submit("A", f"a{n}")
    await turns.settle()
    await turns.submit("B", "b0")
    await turns.submit("B", "b1")
    await turns.submit("C", "c0")
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
    await turns.submit("A", "a0")
    await turns.submit("B", "b0")
    await turns.submit("C", "c0")
    await turns.settle()
    turns.tasks["b0"].cancel()
    await asyncio.wait([turns.tasks["b0"]])
    assert turns.tasks["b0"].cancelled() and turns.slots.waiting("B") == 0  # its place in line is given up
    await turns.end("a0")
    assert turns.started == ["a0", "c0"]
    await turns.end("c0")
    assert turns.slots.held("A") == turns.slots.held("C") == 0
    await turns.submit("D", "d0")
    await turns.settle()
    assert turns.started[-1] == "d0"
