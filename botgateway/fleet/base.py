"""The fleet's contracts: what the gateway asks of the other processes on its store, and what it answers them.

With SQLite there is one process and no fleet (``None`` wherever a
:class:`Fleet` is taken). With Redis, several processes serve one bot, and a
turn, an approval or a conversation's lease belongs to exactly one of them; the
others forward to it. The gateway's side is :class:`LocalControl` (applying a
request to its own turns with the same checks as a local one); the Redis side is
:class:`~botgateway.fleet.redis_fleet.RedisFleet`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from botgateway.approvals import VoteResult
from botgateway.principal import Principal

__all__ = ["Ballot", "Fleet", "LocalControl", "StopAnswer", "StopTally"]

StopAnswer: TypeAlias = Literal["stopped", "not_yours", "already_done", "unreachable"]
"""What became of a stop: told to stop, refused (neither the asker nor an admin), over already, or its process
did not answer in time."""


@dataclass(frozen=True)
class StopTally:
    """What a "stop" typed in a conversation did, in one process or summed over the fleet."""

    stopped: tuple[str, ...] = ()
    """The turns told to stop (the asker's own, or anyone's for an admin)."""
    refused: int = 0
    """Turns in the conversation the stopper may not stop."""
    unreachable: int = 0
    """Processes holding turns of the conversation that did not answer in time."""

    def __add__(self, other: StopTally) -> StopTally:
        return StopTally(
            self.stopped + other.stopped, self.refused + other.refused, self.unreachable + other.unreachable
        )


@dataclass(frozen=True, kw_only=True)
class Ballot:
    """One Approve/Deny press or ``approve 4821`` reply, as received (checked where the approval waits)."""

    code: str
    """The approval's code."""
    principal: Principal
    """Who decides (with the groups the receiving adapter resolved)."""
    approved: bool
    """Approve (True) or deny."""
    locale: str
    """The language of the note for the decider."""
    channel: str | None = None
    """Where a typed vote was typed (it counts only where the card is); ``None`` for a button."""
    token: str | None = None
    """A button's request token; ``None`` for a typed vote."""


class LocalControl(Protocol):
    """This process's side of a control request: its own turns and approvals, checked as for a local request."""

    def stop_here(self, turn_id: str, user_id: str) -> StopAnswer | None:
        """Stop ``turn_id`` if it runs or waits here and ``user_id`` may; ``None`` when it is not this process's."""
        ...

    def stop_conversation_here(self, conversation_id: str, user_id: str) -> StopTally:
        """A "stop" typed in the conversation, applied to this process's turns of it."""
        ...

    def vote_here(self, ballot: Ballot) -> VoteResult:
        """Count ``ballot`` on this process's desk if the voter may decide it."""
        ...


class Fleet(Protocol):
    """The other processes on the same store: who holds which turn, approval and conversation, and how to reach them."""

    async def start(self, local: LocalControl) -> None:
        """Listen for requests (answered by ``local``) before any turn of this process is announced."""
        ...

    async def aclose(self) -> None:
        """Hand over the leases still held (bounded), stop listening and release the connections."""
        ...

    async def announce(self, turn_id: str, conversation_id: str) -> None:
        """``turn_id`` (running or waiting) is this process's: stops for it are sent here. Never raises."""
        ...

    def withdraw(self, turn_id: str, conversation_id: str) -> None:
        """``turn_id`` has ended (in the background)."""
        ...

    async def hold(self, conversation_id: str, holder: str, queued: Callable[[], Awaitable[None]]) -> bool:
        """Wait until ``holder`` holds the conversation's lease; ``queued()`` first when another holds it.

        True when it had to wait. Cancelling the wait leaves nothing held.
        """
        ...

    def hand_over(self, conversation_id: str, holder: str) -> None:
        """``holder``'s turn ended: once its history is in the store, give the lease up (in the background)."""
        ...

    async def stop_turn(self, turn_id: str, user_id: str) -> StopAnswer | None:
        """Ask the process holding ``turn_id`` to stop it; ``None`` when no other live process holds it."""
        ...

    async def stop_conversation(self, conversation_id: str, user_id: str) -> StopTally:
        """A "stop" in the conversation, applied by every other process holding turns of it."""
        ...

    async def vote(self, ballot: Ballot) -> VoteResult | None:
        """Hand ``ballot`` to the process where its approval waits; ``None`` when no other live process has it."""
        ...
