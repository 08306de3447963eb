"""Stops and approval decisions, wherever the turn runs: here, or in another process of the fleet.

A stop (a Stop button for one turn, or a "stop" typed in a conversation) and
an approval vote are applied where the turn or the approval is. When that is
this process, :class:`TurnControl` checks and applies them: only the asker or
an admin stops a turn; only an approver decides an approval, with the
four-eyes rule and the button's token (:class:`~botgateway.approvals.approvers.Approvers`).
When it is another process, the request goes there through the fleet
(:mod:`botgateway.fleet`), where the very same methods check and apply it, and
the answer comes back here to the one who asked.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from botgateway.approvals import Approvers, VoteResult
from botgateway.fleet.base import Ballot, Fleet, StopAnswer, StopTally
from botgateway.strings import t
from botgateway.turns.queues import ConversationQueues
from botgateway.turns.turn import ScheduledTurn

__all__ = ["TurnControl"]

log = structlog.get_logger(__name__)


class TurnControl:
    """Stops and votes for this process's turns (:class:`~botgateway.fleet.base.LocalControl`), and for the fleet's.

    Args:
        queues: This process's scheduled turns.
        is_admin: Whether a user may stop anyone's turn.
        cancel: Stops one turn (``cancel(turn, stopped_by)``): the scheduler's, so its card says who stopped it.
        approvers: Who may decide; ``None`` when no call can be approved here.
        fleet: The other processes on the store; ``None`` with one process.
    """

    def __init__(
        self,
        queues: ConversationQueues,
        *,
        is_admin: Callable[[str], bool],
        cancel: Callable[[ScheduledTurn, str], None],
        approvers: Approvers | None,
        fleet: Fleet | None,
    ) -> None:
        self._queues = queues
        self._is_admin = is_admin
        self._cancel = cancel
        self._approvers = approvers
        self._fleet = fleet

    # --- this process's turns -------------------------------------------------------

    def stop_here(self, turn_id: str, user_id: str) -> StopAnswer | None:
        """Stop ``turn_id`` if it runs or waits here and ``user_id`` may; ``None`` when it is not this process's."""
        turn = self._queues.get(turn_id)
        if turn is None:
            return None
        if turn.done.done() or turn.finishing:
            return "already_done"  # the answer is complete and its card being finalized
        if user_id != turn.user_id and not self._is_admin(user_id):
            log.info("gateway.stop_refused", turn_id=turn_id, user=user_id)
            return "not_yours"
        self._cancel(turn, user_id)
        return "stopped"

    def stop_conversation_here(self, conversation_id: str, user_id: str) -> StopTally:
        """End the stopper's running and waiting turns of the conversation here (anyone's, for an admin)."""
        turns = self._queues.line(conversation_id)
        mine = [turn for turn in turns if turn.user_id == user_id or self._is_admin(user_id)]
        for turn in mine:
            self._cancel(turn, user_id)
        return StopTally(tuple(turn.turn_id for turn in mine), len(turns) - len(mine))

    def vote_here(self, ballot: Ballot) -> VoteResult:
        """Count ``ballot`` on this process's desk if the voter may decide it there."""
        if self._approvers is None:
            return VoteResult("unknown", t(ballot.locale, "approval_unknown", code=ballot.code))
        return self._approvers.vote(ballot.code, ballot.principal, approved=ballot.approved, locale=ballot.locale,
                                    channel=ballot.channel, token=ballot.token)

    # --- wherever the turn is -------------------------------------------------------

    async def stop(self, turn_id: str, user_id: str) -> StopAnswer:
        """Stop ``turn_id`` here or in the process that holds it."""
        answer = self.stop_here(turn_id, user_id)
        if answer is None and self._fleet is not None:
            answer = await self._fleet.stop_turn(turn_id, user_id)
        return answer or "already_done"

    async def stop_conversation(self, conversation_id: str, user_id: str) -> StopTally:
        """A "stop" typed in the conversation: this process's turns of it, and every other process's."""
        tally = self.stop_conversation_here(conversation_id, user_id)
        if self._fleet is not None:
            tally += await self._fleet.stop_conversation(conversation_id, user_id)
        return tally

    async def vote(self, ballot: Ballot) -> VoteResult:
        """Count ``ballot`` where its approval waits: here, or in the process whose desk shows its code."""
        result = self.vote_here(ballot)
        if result.answer != "unknown" or self._fleet is None or self._approvers is None:
            return result
        return await self._fleet.vote(ballot) or result
