"""Which delivery of a Slack event is answered: the first one claimed, by ``event_id``, in the gateway's store.

Slack delivers an event again when its first delivery was not acknowledged in
time, and behind a load balancer the retry may reach another process. The
claim (:meth:`~botgateway.gateway.Gateway.first_delivery`) is shared by the
fleet, so exactly one delivery goes on.

In HTTP mode the claim is made before Slack gets its 200
(:meth:`EventClaims.claim`): the process that acknowledged a delivery is
the one that runs it, and a delivery another process took ends there, before
bolt parses it. The listener that takes the event up later asks again
(:meth:`EventClaims.first_delivery`) and is answered from what this process
claimed, with no second round trip. In Socket Mode the listener's question is
the only claim. Slack wants its 200 within 3 s, so a claim that takes longer
than :data:`ACK_CLAIM_TIMEOUT_S` (a slow store) does not hold the
acknowledgement back: it goes on, and the listener waits for its answer. It is
never abandoned: a claim the store made but nobody heard of would drop the
event as taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from cachetools import TTLCache

__all__ = ["ACK_CLAIM_TIMEOUT_S", "EventClaims"]

log = structlog.get_logger(__name__)

ACK_CLAIM_TIMEOUT_S = 1.0
"""Longest wait for the claim before an acknowledgement; past it the delivery goes on unclaimed (its listener claims)."""

_HELD_MAX = 10_000
"""Events claimed before their acknowledgement and not yet taken up, kept at most (an ignored event is never)."""

_HELD_S = 60.0
"""How long such a claim waits for its listener; bolt dispatches within moments of the acknowledgement."""


class EventClaims:
    """Claims each Slack event once for this process; ``claim_id(key)`` is the fleet-wide claim (True: first)."""

    def __init__(self, claim_id: Callable[[str], Awaitable[bool]], *, ack_timeout_s: float = ACK_CLAIM_TIMEOUT_S) -> None:
        """``ack_timeout_s``: how long :meth:`claim` may hold an acknowledgement back."""
        self._claim_id = claim_id
        self._ack_timeout_s = ack_timeout_s
        self._held: TTLCache[str, asyncio.Future[bool]] = TTLCache(_HELD_MAX, _HELD_S)

    async def claim(self, body: Mapping[str, Any]) -> bool:
        """Before the acknowledgement: True when this delivery is the event's first (or has no ``event_id``), and
        its listener's :meth:`first_delivery` will say so without asking again."""
        key = _key(body)
        if not key:
            return True
        claim = asyncio.ensure_future(self._claim_id(key))
        claim.add_done_callback(_retrieved)
        done, _ = await asyncio.wait({claim}, timeout=self._ack_timeout_s)
        if not done:
            log.warning("slack.claim_slow", timeout_s=self._ack_timeout_s,
                        note="acknowledged before the claim's answer; the event's listener waits for it")
            self._held[key] = claim
            return True
        if claim.result():
            self._held[key] = claim
            return True
        return False

    async def first_delivery(self, body: Mapping[str, Any]) -> bool:
        """False for a delivery of an event already taken (by any process); a claim made before its acknowledgement
        counts once."""
        key = _key(body)
        if not key:
            return True
        held = self._held.pop(key, None)
        if held is not None:
            return await held
        return await self._claim_id(key)


def _retrieved(claim: asyncio.Future[bool]) -> None:
    """Mark the outcome of a claim nobody awaited (its event was ignored) as seen: the claim logs its own errors."""
    if not claim.cancelled():
        claim.exception()


def _key(body: Mapping[str, Any]) -> str:
    """The event's claim key (its team and ``event_id``), or "" when the request is no event callback."""
    event_id = body.get("event_id")
    if not event_id or not isinstance(event_id, str):
        return ""
    return f"event:{body.get('team_id', '')}:{event_id}"
