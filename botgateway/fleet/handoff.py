"""Questions a draining process moves to the rest of the fleet, before they start: the contract.

When a process of a fleet drains (SIGTERM), a question still waiting in it (behind
the running turn of its conversation, for the conversation's lease, or for a
turn slot) would otherwise have to be answered within ``gateway.drain_s`` or
end with "please ask again". Instead the gateway puts it on a shared queue as a
:class:`MovedQuestion`, finishes its card here with a note that another
instance answers, and a process that is not draining takes it and answers it in
the same thread. The waiting questions of one conversation move together, in
their order, so one process takes them all and keeps that order; the
conversation's lease keeps them behind the turn still running in the draining
process.

The card itself does not move: each process finishes only the cards it
created, so a card's open-card record, its reserved final and the platform's
private state of it (a Slack stream, a Stop control) never cross processes. A
waiting card shows only its place in the line, so nothing of value is lost; the
cost is one more message in the thread.

With SQLite there is one process and nothing to move to (``None`` wherever a
:class:`Handoff` is taken); with Redis it is
:class:`~botgateway.fleet.redis_handoff.RedisHandoff`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from botgateway.messages import InboundMessage

__all__ = ["Handoff", "MovedQuestion", "TakeMoved"]


@dataclass(frozen=True, kw_only=True)
class MovedQuestion:
    """A question admitted by one process and moved, before it started, to whichever process takes it."""

    msg: InboundMessage
    """The question as admitted: principal (with groups), roles, access grant, locale, thread, card target."""
    turn_id: str
    """Its turn id, kept: its asker's in-progress count is held under it, and its audit record is written under it."""
    moved_at: float
    """Unix time it was moved (its age decides whether it is still worth answering)."""
    moved_by: str
    """The instance id of the draining process."""


TakeMoved: TypeAlias = Callable[[MovedQuestion], Awaitable[object]]
"""Schedules one moved question in this process (the gateway, with the sink of the question's platform)."""


class Handoff(Protocol):
    """The fleet's shared queue of moved questions: the draining side puts, every other process takes."""

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms this process takes moved questions of (its own turns of others never move: nobody could
        answer them)."""
        ...

    async def put(self, questions: Sequence[MovedQuestion]) -> bool:
        """Queue one conversation's waiting questions, in their order, as one unit; True once the queue holds them.

        Never raises: False (logged) when they could not be queued, and they stay here.
        """
        ...

    def serve(self, platforms: Collection[str], take: TakeMoved) -> None:
        """From now on, take the moved questions of ``platforms`` (in the background) and hand each to ``take``."""
        ...

    async def stop_serving(self) -> None:
        """Take no more (a question being handed to ``take`` is handed first); what was taken but not handed on
        goes back on the queue. Idempotent."""
        ...

    async def aclose(self) -> None:
        """Stop serving and release what it holds."""
        ...
