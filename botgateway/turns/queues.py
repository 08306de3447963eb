"""One turn at a time per conversation: the others wait in line, in order.

A conversation's history is only consistent when its turns run one after the
other, so a second question in the same conversation waits for the first; its
card says it is queued, and where.
"""

from __future__ import annotations

from botgateway.turns.turn import ScheduledTurn

__all__ = ["ConversationQueues"]


class ConversationQueues:
    """The scheduled turns of every conversation (mutable; owned by the gateway)."""

    def __init__(self) -> None:
        self._lines: dict[str, list[ScheduledTurn]] = {}
        self._turns: dict[str, ScheduledTurn] = {}

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._turns

    def get(self, turn_id: str) -> ScheduledTurn | None:
        """The scheduled turn ``turn_id``, while it is scheduled."""
        return self._turns.get(turn_id)

    def all(self) -> list[ScheduledTurn]:
        """Every scheduled turn (running or waiting)."""
        return list(self._turns.values())

    def line(self, conversation_id: str) -> list[ScheduledTurn]:
        """The conversation's turns: the running one first, then the waiting ones."""
        return list(self._lines.get(conversation_id, ()))

    def add(self, turn: ScheduledTurn) -> int:
        """Put ``turn`` at the end of its conversation's line; returns its place (0: it runs now)."""
        line = self._lines.setdefault(turn.msg.conversation_id, [])
        line.append(turn)
        self._turns[turn.turn_id] = turn
        position = len(line) - 1
        if position == 0:
            turn.go.set()
        else:
            turn.state.mark_queued(position)
        return position

    def release(self, turn: ScheduledTurn) -> list[ScheduledTurn]:
        """Take ``turn`` off its line and let the next one run; returns the turns whose place changed."""
        self._turns.pop(turn.turn_id, None)
        conversation = turn.msg.conversation_id
        line = self._lines.get(conversation)
        if line is None:
            return []
        if turn in line:
            line.remove(turn)
        if not line:
            del self._lines[conversation]
            return []
        line[0].go.set()
        for position, waiting in enumerate(line[1:], start=1):
            waiting.state.mark_queued(position)
        return line[1:]
