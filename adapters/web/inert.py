"""What the web hands out made inert: the console's card snapshots, the API's events and answers.

The console draws Markdown and any API client may too, so model and tool text
goes out through the rule every platform shares
(:func:`~botgateway.cards.inert.inert_markup`: images as text, only http(s)
links, each showing its host, masked links and HTML as text). A snapshot is
whole each time (:func:`inert_snapshot`); an answer or a thought sent as
deltas grows append-only (:class:`~botgateway.cards.inert_stream.InertStream`),
so the deltas join into the inert whole. A tool call's arguments stay as the
model gave them (they are data, and an approver must see them exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from botgateway.cards.inert import inert_markup
from botgateway.cards.inert_stream import InertStream
from botgateway.events import AnswerDelta, ThoughtDelta, ToolCallFinished, TurnDone, TurnEvent, TurnFailed
from botgateway.snapshot import CardSnapshot, Narration, ToolLine

__all__ = ["InertEvents", "inert_snapshot", "web_inert"]


def web_inert(locale: str) -> Callable[[str], str]:
    """The rule for text in ``locale`` (an image's note is localized)."""
    return lambda text: inert_markup(text, locale)


def inert_snapshot(snapshot: CardSnapshot) -> CardSnapshot:
    """``snapshot`` with its model, tool and outside text inert (approval arguments as they are)."""
    inert = web_inert(snapshot.locale)
    blocks = tuple(
        dataclasses.replace(block, text=inert(block.text)) if isinstance(block, Narration)
        else dataclasses.replace(block, args_preview=inert(block.args_preview), summary=inert(block.summary),
                                 approval=inert(block.approval))
        if isinstance(block, ToolLine) else block
        for block in snapshot.blocks
    )
    return dataclasses.replace(
        snapshot, blocks=blocks, thought=inert(snapshot.thought), answer=inert(snapshot.answer),
        error=inert(snapshot.error), preamble=inert(snapshot.preamble),
    )


class InertEvents:
    """One turn's events as a client receives them: answer and thought deltas through a stream each, the rest
    whole. Call it with each event; it returns the events to send (none while a delta's text is held back)."""

    def __init__(self, locale: str) -> None:
        self._inert = web_inert(locale)
        self._answer = InertStream(self._inert)
        self._thought = InertStream(self._inert)

    def __call__(self, event: TurnEvent) -> list[TurnEvent]:
        """The inert events that ``event`` turns into."""
        if isinstance(event, AnswerDelta):
            return _delta(AnswerDelta, self._answer.push(event.text))
        if isinstance(event, ThoughtDelta):
            return _delta(ThoughtDelta, self._thought.push(event.text))
        if isinstance(event, ToolCallFinished):
            return [dataclasses.replace(event, summary=self._inert(event.summary))]
        if isinstance(event, TurnDone):
            result = dataclasses.replace(event.result, answer=self._inert(event.result.answer))
            return [*self._rest(), dataclasses.replace(event, result=result)]
        if isinstance(event, TurnFailed):
            return [*self._rest(), dataclasses.replace(event, message=self._inert(event.message),
                                                       partial_answer=self._inert(event.partial_answer))]
        return [event]

    def _rest(self) -> list[TurnEvent]:
        """What the streams still held back, once the turn ended."""
        return [*_delta(ThoughtDelta, self._thought.close()), *_delta(AnswerDelta, self._answer.close())]


def _delta(kind: type[AnswerDelta | ThoughtDelta], text: str) -> list[TurnEvent]:
    return [kind(text=text)] if text else []
