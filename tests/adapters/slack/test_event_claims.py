"""The claim of a Slack event made before its acknowledgement: never holding the 200 back long, never lost."""

from __future__ import annotations

import asyncio

from adapters.slack.event_claims import EventClaims
from tests.parked import parked

BODY = {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": {"type": "app_mention"}}


class GatedStore:
    """The fleet's claims, answered only once the test opens ``gate``; ``claims`` counts what was asked."""

    def __init__(self, *, first: bool = True) -> None:
        self.gate = asyncio.Event()
        self.claims: list[str] = []
        self._first = first

    async def claim(self, key: str) -> bool:
        self.claims.append(key)
        await self.gate.wait()
        return self._first


async def test_a_slow_claim_lets_the_acknowledgement_go_and_its_listener_waits_for_the_same_claim() -> None:
    store = GatedStore()
    claims = EventClaims(store.claim, ack_timeout_s=0.05)
    assert await asyncio.wait_for(claims.claim(BODY), 10)  # the store has not answered: Slack gets its 200 all the same
    listener = await parked(claims.first_delivery(BODY))
    assert not listener.done()  # it waits for the claim on its way, rather than asking a second time
    store.gate.set()
    assert await asyncio.wait_for(listener, 10)
    assert store.claims == ["event:T1:Ev1"]  # one claim: the store's answer is the one heard


async def test_a_slow_claim_that_another_process_won_drops_the_delivery_at_its_listener() -> None:
    store = GatedStore(first=False)
    claims = EventClaims(store.claim, ack_timeout_s=0.05)
    assert await asyncio.wait_for(claims.claim(BODY), 10)
    store.gate.set()
    assert not await asyncio.wait_for(claims.first_delivery(BODY), 10)
    assert len(store.claims) == 1


async def test_a_prompt_claim_answers_the_listener_without_asking_again_and_a_lost_one_is_refused_at_once() -> None:
    store = GatedStore()
    store.gate.set()
    claims = EventClaims(store.claim)
    assert await claims.claim(BODY) and await claims.first_delivery(BODY)
    assert len(store.claims) == 1
    assert await claims.first_delivery({"type": "event_callback"})  # no event id: nothing to claim
    taken = GatedStore(first=False)
    taken.gate.set()
    assert not await EventClaims(taken.claim).claim(BODY)  # another process took it: no 200-then-work
