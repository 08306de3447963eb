"""A turn waiting for one of the gateway's turn slots: its card says its place in line, and follows it as it moves.

Every slot is taken by turns the model holds back; the next askers' cards say
where they are (the order :class:`~botgateway.turns.FairSlots` will serve them
in: round-robin by asker), move up as slots free, and run once they get one.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from botgateway.strings import t
from botgateway.turns import FairSlots
from tests.test_gateway import _harness, _user_texts
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


async def test_places_follow_the_round_robin_and_are_told_when_they_change() -> None:
    slots = FairSlots(1, per_key=1)
    told: dict[str, list[int]] = {"a2": [], "b1": [], "a3": []}
    holding = asyncio.Event()
    release = asyncio.Event()

    async def turn(key: str, name: str) -> None:
        async with slots.hold(key, on_place=told[name].append if name in told else None):
            holding.set()
            await release.wait()

    first = asyncio.create_task(turn("a", "a1"))
    await holding.wait()
    waiting = [asyncio.create_task(turn("a", "a2")), asyncio.create_task(turn("a", "a3")),
               asyncio.create_task(turn("b", "b1"))]
    for _ in range(5):
        await asyncio.sleep(0)
    # a's second turn is next, then b's first (round-robin by asker), then a's third
    assert sorted(slots.places().values()) == [1, 2, 3]
    assert told == {"a2": [1], "a3": [2, 3], "b1": [2]}
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *waiting), 5)
    assert told["b1"][-1] == 1 and told["a3"][-1] == 1  # each moved up before its turn came


async def test_a_turn_waiting_for_a_slot_shows_its_place_and_then_runs(tmp_path: Any) -> None:
    gates = {name: asyncio.Event() for name in ("ann", "ben", "cid", "dee")}

    async def responder(body: dict[str, Any]) -> Script:
        name = re.findall(r"^(\w+):", _user_texts(body)[-1])[-1]
        await gates[name].wait()
        return Script.text(f"{name}'s answer")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder), max_concurrent_turns=2):
        subs = {name: await h.submit(f"{name}: is web-1 up?", conversation=name, user=name) for name in gates}
        await h.server.wait_for_requests(2)  # ann and ben hold both slots
        cid, dee = subs["cid"].turn_id, subs["dee"].turn_id

        def shows(turn_id: str, place: int) -> bool:
            card = h.sink.card_for(turn_id)
            return card is not None and card.status == "queued" and card.queue_position == place

        await h.sink.wait_for(lambda: shows(cid, 1) and shows(dee, 2))
        assert h.sink.card_for(dee).error == t("en", "queued_busy", position=2)  # type: ignore[union-attr]
        gates["ann"].set()  # ann's turn ends: cid runs, dee moves up
        await h.sink.wait_for(lambda: shows(dee, 1) and h.sink.card_for(cid).status != "queued")  # type: ignore[union-attr]
        for gate in gates.values():
            gate.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*(sub.done for sub in subs.values())), 20)
        assert [o.outcome for o in outcomes] == ["done"] * 4
        assert h.sink.card_for(dee).answer == "dee's answer"  # type: ignore[union-attr]
