"""Votes: an ``approve 4821`` reply is counted as a vote on that approval, typed where its card is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from botgateway.access import place_of
from botgateway.approvals import VoteResult, parse_command
from botgateway.fleet import Ballot
from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict

__all__ = ["Votes"]


class Votes:
    """Counts an ``approve``/``deny`` reply as a ballot and answers the voter.

    Args:
        vote: Counts a ballot where its approval waits, here or in the fleet (:meth:`TurnControl.vote`).
    """

    def __init__(self, vote: Callable[[Ballot], Awaitable[VoteResult]]) -> None:
        self._vote = vote

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it is a vote: then what became of it (to the voter alone unless it decided)."""
        command = parse_command(msg.text)
        if command is None:
            return msg
        # Typed where the card is: a vote from any other chat counts for nothing.
        ballot = Ballot(code=command.code, principal=msg.asker, approved=command.approved, locale=msg.target.locale,
                        channel=place_of(msg).channel)
        result = await self._vote(ballot)
        return Verdict.answered(result.note, status="approval", private=result.answer != "decided")
