"""The CLI's side of ``schedules run NAME`` beside a running gateway: find it, hand the run over, wait for the end.

See :mod:`botgateway.schedules.requests` for the exchange. A gateway counts as
running the schedule when its instance heartbeat is live and it said it takes
that schedule's requests (:func:`find_takers`). :func:`hand_over` asks and
returns once a gateway has taken the request; :func:`wait_ended` then waits for
its cards, as long as the gateway that took it lives. Every way this can fail
raises :class:`HandoverFailed` with a sentence for the operator.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from dataclasses import dataclass

from botgateway.schedules.requests import (
    HandoverStore,
    RunOutcome,
    RunRequest,
    outcome_key,
    request_claim_key,
    request_key,
    request_lease_key,
    taker_key,
)
from botgateway.schedules.taker import POLL_S

__all__ = ["LIVENESS_S", "PICKUP_S", "HandoverFailed", "Takers", "find_takers", "hand_over", "wait_ended"]

PICKUP_S = 30.0 + POLL_S
"""How long a request waits for a running gateway to take it (gateways read requests every :data:`POLL_S`)."""

_POLL_S = 0.25
"""How often the CLI reads the outcome."""

LIVENESS_S = 5.0
"""How often, while it waits, the CLI checks that the gateway that took the run still lives."""


class HandoverFailed(Exception):
    """The run could not be handed over, or the gateway that took it stopped; the message says so to the operator."""


@dataclass(frozen=True)
class Takers:
    """The running gateway processes, as the Store knows them."""

    live: frozenset[str]
    """Every live instance (a gateway, or a CLI command that built one: ``ask``, ``chat``)."""
    taking: tuple[str, ...]
    """The live instances that run the schedule asked about, and so take its requests."""


async def find_takers(store: HandoverStore, name: str) -> Takers:
    """The live instances, and those among them that run schedule ``name``."""
    live = frozenset(await store.live_instances())
    taking = []
    for instance_id in sorted(live):
        said = await store.get_document(taker_key(instance_id))
        names = said.get("names") if said is not None else None
        if isinstance(names, list) and name in names:
            taking.append(instance_id)
    return Takers(live, tuple(taking))


async def hand_over(store: HandoverStore, name: str, *, pickup_s: float = PICKUP_S) -> RunOutcome:
    """Ask the running gateways to run schedule ``name`` now; the ``taken`` outcome once one has.

    Raises :class:`HandoverFailed` when another request of the schedule is waiting, or when no gateway takes it
    within ``pickup_s`` (it is then withdrawn: no gateway runs it later).
    """
    request = RunRequest(uuid.uuid4().hex, name, f"{socket.gethostname()}:{os.getpid()}")
    lease = request_lease_key(name)
    if not await store.take_lease(lease, request.request_id, 1, pickup_s * 2):
        raise HandoverFailed(f"another 'schedules run {name}' is being handed to the gateway right now; "
                             "try again once it has been taken")
    try:
        await store.put_document(request_key(name), request.as_dict(), pickup_s)
        taken = await _outcome(store, request.request_id, pickup_s)
        if taken is None and await store.claim(request_claim_key(request.request_id), pickup_s * 2):
            raise HandoverFailed(f"no running gateway took the run within {pickup_s:g} s, so nothing was posted; "
                                 "see the gateway's log (is its Store the one config.yaml names?)")
        # Lost the claim: a gateway took it as the wait ended, and writes that it did at once.
        taken = taken or await _outcome(store, request.request_id, pickup_s)
        if taken is None:
            raise HandoverFailed("a gateway took the run but never said so; see the gateways' logs")
        return taken
    finally:
        await store.drop_lease(lease, request.request_id)


async def wait_ended(store: HandoverStore, taken: RunOutcome, *, liveness_s: float = LIVENESS_S) -> RunOutcome:
    """Wait for the run ``taken`` to end (``ended`` or ``failed``) while the gateway that took it lives (checked
    every ``liveness_s``)."""
    checked = time.monotonic()
    while True:
        outcome = await _read(store, taken.request_id)
        if outcome is not None and outcome.state != "taken":
            return outcome
        if time.monotonic() - checked >= liveness_s:
            checked = time.monotonic()
            if taken.instance_id not in await store.live_instances():
                raise HandoverFailed(f"the gateway that took the run (instance {taken.instance_id}) stopped before "
                                     "the report ended; its cards are closed as interrupted")
        await asyncio.sleep(_POLL_S)  # the pace of reading; nothing signals an outcome across processes


async def _outcome(store: HandoverStore, request_id: str, within_s: float) -> RunOutcome | None:
    """The request's outcome once one is written, or None after ``within_s``."""
    deadline = time.monotonic() + within_s
    while (outcome := await _read(store, request_id)) is None and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)  # the pace of reading; nothing signals an outcome across processes
    return outcome


async def _read(store: HandoverStore, request_id: str) -> RunOutcome | None:
    data = await store.get_document(outcome_key(request_id))
    return RunOutcome.from_dict(data) if data is not None else None
