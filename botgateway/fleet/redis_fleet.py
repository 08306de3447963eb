"""The fleet on Redis: the directory, the control channel and the conversation leases, behind :class:`Fleet`.

- A turn is announced in the directory when it starts (running or queued)
  and withdrawn when it ends; a stop for a turn this process does not hold is
  sent to the process the directory names, which applies it with its own checks
  (:class:`~botgateway.fleet.base.LocalControl`) and answers.
- A "stop" typed in a conversation goes to every other process holding
  turns of it; their tallies add up with this process's own.
- An approval's code is reserved fleet-wide when its request opens; a vote
  for a code another process holds is sent there.
- A turn holds its conversation's lease while it runs; when it ends, the lease
  is handed over once the turn's history is in the store (``settle``).

:func:`fleet_client` is the fleet's own connection pool, named after the
instance (``CLIENT LIST`` shows which process is which); the composition root
builds the parts on it (the leases and the directory first: the memory and the
approval desk take them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
import structlog

from botgateway.approvals import VoteResult
from botgateway.background import BackgroundTasks
from botgateway.fleet.base import Ballot, LocalControl, StopAnswer, StopTally
from botgateway.fleet.control import ControlChannel
from botgateway.fleet.directory import FleetDirectory
from botgateway.fleet.lease import ConversationLeases
from botgateway.fleet.wire import (
    ballot_from_wire,
    ballot_to_wire,
    stop_answer_from_wire,
    tally_from_wire,
    tally_to_wire,
    vote_from_wire,
    vote_to_wire,
)
from botgateway.stores.redis_connect import redis_client
from botgateway.strings import t

__all__ = ["FLEET_REPLY_TIMEOUT_S", "HAND_OVER_TIMEOUT_S", "RedisFleet", "fleet_client"]

log = structlog.get_logger(__name__)

HAND_OVER_TIMEOUT_S = 10.0
"""Longest wait for a turn's history to reach the store before its lease is given up anyway (the store is down:
a change written later is refused by its fencing token once another process took the conversation)."""

Settle = Callable[[str, float], Awaitable[bool]]
"""``settle(conversation_id, timeout_s)``: wait until the conversation's history changes are in the store."""


FLEET_REPLY_TIMEOUT_S = 5.0
"""Longest wait for one reply of Redis (longer than the queue's blocking read and the control channel's poll): a
Redis that accepts connections but never answers must fail the lease, the directory and the control channel over to
their fallbacks, not hang every turn before it starts."""


def fleet_client(url: str, instance_id: str) -> aioredis.Redis:
    """A client for the fleet's coordination, its connections named ``botgateway:<instance id>``."""
    return redis_client(url, client_name=f"botgateway:{instance_id}"[:200], socket_timeout=FLEET_REPLY_TIMEOUT_S)


class RedisFleet:
    """:class:`~botgateway.fleet.base.Fleet` on Redis.

    Args:
        control: This process's end of the control channel.
        directory: Who holds which turn, conversation and approval code.
        leases: The conversation leases (the same object :class:`~botgateway.history.memory.Memory` reads tokens from).
        settle: Waits for a conversation's history to reach the store (:meth:`Memory.settle`).
    """

    def __init__(
        self,
        control: ControlChannel,
        directory: FleetDirectory,
        leases: ConversationLeases,
        *,
        settle: Settle,
    ) -> None:
        self.instance_id = control.instance_id
        """This process's id."""
        self.control = control
        """This process's end of the control channel."""
        self.directory = directory
        """Who holds what."""
        self.leases = leases
        """The conversation leases."""
        self._settle = settle
        self._local: LocalControl | None = None
        self._hand_overs = BackgroundTasks()
        """Leases given up once their turn's history is written; directory entries removed."""

    async def start(self, local: LocalControl) -> None:
        """Answer requests with ``local`` from now on (waits, bounded, until the channel listens)."""
        self._local = local
        self.control.on("stop_turn", self._serve_stop_turn)
        self.control.on("stop_conversation", self._serve_stop_conversation)
        self.control.on("vote", self._serve_vote)
        self.control.on("released", self._serve_released)
        await self.control.start()

    async def aclose(self) -> None:
        """Finish the hand-overs in progress (bounded), then stop listening (the client is its owner's to close)."""
        await self._hand_overs.wait(timeout=HAND_OVER_TIMEOUT_S + 2)
        await self._hand_overs.aclose()
        await self.control.aclose()
        await self.leases.aclose()
        await self.directory.aclose()

    # --- turns and leases -------------------------------------------------------------

    async def announce(self, turn_id: str, conversation_id: str) -> None:
        """Enter ``turn_id`` in the directory; a failure is logged (its stops then work only through this process)."""
        try:
            await self.directory.add_turn(turn_id, conversation_id)
        except Exception as exc:
            log.warning("fleet.announce_failed", turn_id=turn_id, error=type(exc).__name__)

    def withdraw(self, turn_id: str, conversation_id: str) -> None:
        """Take ``turn_id`` out of the directory, in the background."""
        self._hand_overs.spawn(self._withdraw(turn_id, conversation_id), name=f"fleet-withdraw-{turn_id}")

    async def _withdraw(self, turn_id: str, conversation_id: str) -> None:
        try:
            await self.directory.remove_turn(turn_id, conversation_id)
        except Exception as exc:  # the entry names a process that stops being live, or lapses
            log.warning("fleet.withdraw_failed", turn_id=turn_id, error=type(exc).__name__)

    async def hold(self, conversation_id: str, holder: str, queued: Callable[[], Awaitable[None]]) -> bool:
        """Wait for the conversation's lease (see :meth:`ConversationLeases.acquire`); True when it waited."""
        return await self.leases.acquire(conversation_id, self.leases.holder_id(holder), queued)

    def hand_over(self, conversation_id: str, holder: str) -> None:
        """Once the conversation's history is in the store, give up ``holder``'s lease (nothing if not held)."""
        holder_id = self.leases.holder_id(holder)
        if self.leases.holds(conversation_id, holder_id):
            self._hand_overs.spawn(self._hand_over(conversation_id, holder_id), name=f"fleet-hand-over-{holder}")

    async def _hand_over(self, conversation_id: str, holder_id: str) -> None:
        if not await self._settle(conversation_id, HAND_OVER_TIMEOUT_S):
            log.warning("fleet.hand_over_unsettled", conversation=conversation_id, timeout_s=HAND_OVER_TIMEOUT_S,
                        note="the lease is given up before this turn's history reached the store")
        await self.leases.release(conversation_id, holder_id)

    # --- requests to the others -----------------------------------------------------

    async def stop_turn(self, turn_id: str, user_id: str) -> StopAnswer | None:
        """Ask the process holding ``turn_id`` to stop it; ``None`` when no other live process holds it."""
        try:
            owner = await self.directory.turn_owner(turn_id)
        except Exception as exc:
            log.warning("fleet.lookup_failed", turn_id=turn_id, error=type(exc).__name__)
            return "unreachable"
        if owner is None:
            return None
        reply = await self.control.ask(owner, "stop_turn", {"turn_id": turn_id, "user_id": user_id})
        try:
            return stop_answer_from_wire(reply) if reply is not None else "unreachable"
        except ValueError:
            return "unreachable"

    async def stop_conversation(self, conversation_id: str, user_id: str) -> StopTally:
        """Ask every other process holding turns of the conversation to apply the stop; their tallies summed."""
        try:
            owners = await self.directory.conversation_owners(conversation_id)
        except Exception as exc:
            log.warning("fleet.lookup_failed", conversation=conversation_id, error=type(exc).__name__)
            return StopTally(unreachable=1)
        body = {"conversation_id": conversation_id, "user_id": user_id}
        asks = [self.control.ask(owner, "stop_conversation", body) for owner in sorted(owners)]
        replies = await asyncio.gather(*asks)
        tally = StopTally()
        for reply in replies:
            try:
                tally += tally_from_wire(reply) if reply is not None else StopTally(unreachable=1)
            except ValueError:
                tally += StopTally(unreachable=1)
        return tally

    async def vote(self, ballot: Ballot) -> VoteResult | None:
        """Hand ``ballot`` to the process whose desk shows its code; ``None`` when no other live process has it."""
        unreachable = VoteResult("unreachable", t(ballot.locale, "approval_unreachable", code=ballot.code))
        try:
            owner = await self.directory.code_owner(ballot.code)
        except Exception as exc:
            log.warning("fleet.lookup_failed", code=ballot.code, error=type(exc).__name__)
            return unreachable
        if owner is None:
            return None
        reply = await self.control.ask(owner, "vote", ballot_to_wire(ballot))
        try:
            return vote_from_wire(reply) if reply is not None else unreachable
        except ValueError:
            return unreachable

    # --- requests from the others ---------------------------------------------------

    async def _serve_stop_turn(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        assert self._local is not None
        answer = self._local.stop_here(str(body["turn_id"]), str(body["user_id"]))
        return {"answer": answer or "already_done"}  # not here (any more): it ended

    async def _serve_stop_conversation(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        assert self._local is not None
        return tally_to_wire(self._local.stop_conversation_here(str(body["conversation_id"]), str(body["user_id"])))

    async def _serve_vote(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        assert self._local is not None
        return vote_to_wire(self._local.vote_here(ballot_from_wire(body)))

    async def _serve_released(self, body: Mapping[str, Any]) -> None:
        self.leases.wake(str(body["conversation"]))
