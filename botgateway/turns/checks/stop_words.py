"""Stop words: "stop" ends its asker's running turn and drops their waiting questions, in every process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from botgateway.fleet.base import StopTally
from botgateway.messages import InboundMessage, Submission, TurnOutcome
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict, matches
from botgateway.turns.turn import ScheduledTurn

__all__ = ["StopWords"]


class StopWords:
    """Answers a stop word by stopping the conversation's turns its sender may stop.

    Args:
        words: The stop words (``gateway.stop_words``).
        stop: Stops a conversation's turns of a user, here and in the fleet (:meth:`TurnControl.stop_conversation`).
        turn_here: The turn of an id scheduled in this process, if any.
    """

    def __init__(
        self, words: Sequence[str], *, stop: Callable[[str, str], Awaitable[StopTally]],
        turn_here: Callable[[str], ScheduledTurn | None],
    ) -> None:
        self._words = words
        self._stop = stop
        self._turn_here = turn_here

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless it is a stop word: then the stopped turn, or why nothing was stopped."""
        if not matches(msg.text, self._words):
            return msg
        tally = await self._stop(msg.conversation_id, msg.ctx.user_id or msg.target.user_id)
        if not tally.stopped:
            key = "not_yours" if tally.refused else "stop_unreachable" if tally.unreachable else "nothing_to_stop"
            return Verdict.refusal(t(msg.target.locale, key), status="stopped")
        turn = self._turn_here(tally.stopped[0])
        if turn is not None:
            return Verdict.done(Submission(status="stopped", turn_id=turn.turn_id, done=turn.done))
        # Stopped in another process: its card is finished there.
        done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        done.set_result(TurnOutcome(turn_id=tally.stopped[0], outcome="stopped"))
        return Verdict.done(Submission(status="stopped", turn_id=tally.stopped[0], done=done))
