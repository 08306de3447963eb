"""``schedules run NAME`` handed to the running gateway: the records the CLI and the gateway exchange in the Store.

Why the Store and not an HTTP call: every process of a deployment already
shares it (a fleet's Redis, one host's SQLite file), the CLI reaches it with
the credentials config.yaml gives it, and a gateway whose HTTP server is off
(Socket Mode, Stream mode) takes requests all the same. Whoever can write the
Store is trusted with far more than a report, so no new way in is opened, and
the slot claims that already keep a report to one replica keep a request to one
process.

The exchange, all through documents with a TTL, claims and a lease:

- each gateway that runs schedules says so under :func:`taker_key` (its
  instance id and the schedules it runs); it counts only while its instance
  heartbeat is live, so a stopped gateway stops counting at once;
- the CLI holds the schedule's lease (:func:`request_lease_key`, one request of
  a schedule at a time), writes a :class:`RunRequest` under
  :func:`request_key` and waits for its :class:`RunOutcome`;
- each gateway polls the request keys of its schedules; the one that wins the
  request's claim (:func:`request_claim_key`) runs it and writes the outcome
  under :func:`outcome_key`: ``taken`` at once, then ``ended`` with each
  card's result, or ``failed``. A CLI that gave up claims the request itself,
  so no gateway runs it late.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from botgateway.schedules.report import CardResult
from botgateway.stores.base import ClaimStore, DocumentStore, InstanceStore, LeaseStore

__all__ = [
    "OUTCOME_TTL_S", "REQUEST_CLAIM_TTL_S", "HandoverStore", "OutcomeState", "RunOutcome", "RunRequest", "TakerStore",
    "outcome_key", "request_claim_key", "request_key", "request_lease_key", "taker_key",
]

OUTCOME_TTL_S = 86400.0
"""How long an outcome is kept: far past any report, so a CLI that waits finds it."""

REQUEST_CLAIM_TTL_S = 86400.0
"""How long a request's claim is kept: past the request's own life, so it is never run twice."""

OutcomeState = Literal["taken", "ended", "failed"]
"""``taken``: a gateway runs it; ``ended``: its cards are final (each card says how); ``failed``: it could not run."""


class TakerStore(DocumentStore, ClaimStore, Protocol):
    """What a gateway taking requests needs of the Store."""


class HandoverStore(DocumentStore, ClaimStore, LeaseStore, InstanceStore, Protocol):
    """What the CLI handing a run over needs of the Store."""


def taker_key(instance_id: str) -> str:
    """Where gateway ``instance_id`` says which schedules it runs (and so takes requests for)."""
    return f"schedule-run:taker:{instance_id}"


def request_key(name: str) -> str:
    """Where the request to run schedule ``name`` now waits for a gateway."""
    return f"schedule-run:request:{name}"


def request_lease_key(name: str) -> str:
    """The lease a CLI holds while its request of schedule ``name`` waits (one request of a schedule at a time)."""
    return f"schedule-run:asking:{name}"


def request_claim_key(request_id: str) -> str:
    """Claimed by the one process that runs request ``request_id`` (or by the CLI that gave up on it)."""
    return f"schedule-run:{request_id}"


def outcome_key(request_id: str) -> str:
    """Where the outcome of request ``request_id`` is written."""
    return f"schedule-run:outcome:{request_id}"


@dataclass(frozen=True)
class RunRequest:
    """A request to run one schedule's report now."""

    request_id: str
    """Unique per request (the claim and the outcome are keyed by it)."""
    name: str
    """The schedule."""
    asked_by: str = ""
    """Who asked (``host:pid`` of the CLI), for the gateway's log."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready document."""
        return {"request_id": self.request_id, "name": self.name, "asked_by": self.asked_by}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRequest | None:
        """The request a document holds; None when it is not one."""
        request_id, name = data.get("request_id"), data.get("name")
        if not isinstance(request_id, str) or not request_id or not isinstance(name, str):
            return None
        return cls(request_id, name, str(data.get("asked_by") or ""))


@dataclass(frozen=True)
class RunOutcome:
    """Where a request is: taken by a gateway, ended with its cards, or failed."""

    request_id: str
    """The request."""
    state: OutcomeState
    """See :data:`OutcomeState`."""
    instance_id: str
    """The gateway process that took it."""
    slot: str = ""
    """The moment the report was asked for (ISO 8601, UTC): its heading shows it in the schedule's zone."""
    cards: tuple[CardResult, ...] = field(default=())
    """Each destination's card, once ``ended``."""
    error: str = ""
    """Why it ``failed``."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready document."""
        return {
            "request_id": self.request_id, "state": self.state, "instance_id": self.instance_id, "slot": self.slot,
            "cards": [{"destination": c.destination, "outcome": c.outcome, "turn_id": c.turn_id, "reason": c.reason}
                      for c in self.cards],
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunOutcome | None:
        """The outcome a document holds; None when it is not one."""
        state = data.get("state")
        if state not in ("taken", "ended", "failed") or not isinstance(data.get("request_id"), str):
            return None
        cards = tuple(
            CardResult(str(c.get("destination") or ""), str(c.get("outcome") or ""), str(c.get("turn_id") or ""),
                       str(c.get("reason") or ""))
            for c in data.get("cards") or () if isinstance(c, Mapping)
        )
        return cls(str(data["request_id"]), state, str(data.get("instance_id") or ""), str(data.get("slot") or ""),
                   cards, str(data.get("error") or ""))
