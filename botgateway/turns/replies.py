"""Answering a message with a note instead of a turn: the adapter's submission at once, the note behind it.

A refusal ("over your limit", "the line is full"), a neutral answer
("conversation cleared", ``/whoami``) or a note for the asker alone is not a
turn: no card is streamed. The adapter gets its
:class:`~botgateway.messages.Submission` right away (platforms want an ack
within seconds) and the note goes out in the background (:mod:`botgateway.turns.notes`);
the submission's ``done`` resolves once it was sent or given up.
"""

from __future__ import annotations

import asyncio

from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.messages import InboundMessage, Submission, SubmissionStatus, TurnOutcome
from botgateway.sink import CardSink
from botgateway.turns.notes import note_snapshot, send_note, send_private

__all__ = ["Replies"]


class Replies:
    """Notes in place of turns, each sent in a task of ``side`` through the shared ``budget``.

    Args:
        budget: The rate budget the notes' calls draw from, like every card call.
        deadline_s: How long one note is retried before it is given up (``card.final_deadline_s``).
        side: The gateway's side tasks, waited for at shutdown like the turns.
    """

    def __init__(self, *, budget: RateBudget, deadline_s: float, side: BackgroundTasks) -> None:
        self._budget = budget
        self._deadline_s = deadline_s
        self._side = side

    def tell(self, msg: InboundMessage, sink: CardSink, note: str, *, status: SubmissionStatus, private: bool) -> Submission:
        """Answer ``msg`` with a neutral ``note``; to the asker alone when ``private`` and the platform can."""
        return self.refuse(msg, sink, note, status=status, as_answer=True, private=private)

    def refuse(
        self, msg: InboundMessage, sink: CardSink, note: str, *, status: SubmissionStatus = "refused", as_answer: bool = False,
        private: bool = False,
    ) -> Submission:
        """Tell the asker ``note`` as a plain message, in the background (as a neutral answer or as an error).

        ``private``: to the asker alone where the sink can (:class:`PrivateNotes`), else in the thread as usual.
        """
        done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        snapshot = note_snapshot(note, msg.target.locale, as_answer=as_answer)

        async def deliver() -> None:
            try:
                if private and await send_private(sink, msg.target, msg.target.user_id or msg.ctx.user_id, note):
                    return
                await send_note(sink, msg.target, snapshot, budget=self._budget, owner=f"note-{msg.message_id}",
                                deadline_s=self._deadline_s)
            finally:
                if not done.done():
                    done.set_result(TurnOutcome(turn_id="", outcome=status, snapshot=snapshot))

        self._side.spawn(deliver())
        return Submission(status=status, turn_id="", done=done, message=note)
