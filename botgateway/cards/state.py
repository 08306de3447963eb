"""The card's state: a pure fold of one turn's events into what its card shows.

``CardState`` knows nothing of timing (that is :mod:`botgateway.cards.streamer`)
nor of platform markup (each adapter's job, helped by :mod:`botgateway.cards.render`);
it produces :class:`~botgateway.snapshot.CardSnapshot` render data. The blocks
above the answer (narration, tool lines, approvals waiting) are its
:class:`~botgateway.cards.board.StatusBoard`'s; the footer, with the model
that answered and the sources the answer used (aged when a snapshot is
taken, also on a tool line whose result came from an old cache), is its
:class:`~botgateway.cards.footer.CardFooter`'s; the answer (or narration) of
the round under way and the thought before it are its
:class:`~botgateway.cards.round_text.RoundText`'s; where the turn is in its
life (queued, running, ended), and the note the card shows for that, is its
:class:`~botgateway.cards.lifecycle.CardLifecycle`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botgateway.artifacts import ArtifactPlacement
from botgateway.cards import lifecycle, render
from botgateway.cards.board import StatusBoard
from botgateway.cards.footer import CardFooter, FooterOptions
from botgateway.cards.lifecycle import CardLifecycle, Ending
from botgateway.cards.pictures import CardPictures
from botgateway.cards.round_text import RoundText
from botgateway.events import (
    AnswerDelta,
    ApprovalDecided,
    ApprovalRequested,
    ModelAnswering,
    RoundStarted,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    UsageReported,
)
from botgateway.snapshot import CardSnapshot, CardStatus, Phase
from botgateway.strings import normalize_locale

__all__ = ["CardState"]


class CardState:
    """Folds the events of one turn into what its card shows.

    Pure and synchronous: :meth:`apply` one event at a time, take a
    :meth:`snapshot` whenever the card should be redrawn. Visible text of a
    round is shown as the answer while it streams; when the same round calls a
    tool, that text becomes the round's narration, above the tool lines.
    """

    def __init__(
        self,
        *,
        locale: str = "en",
        show_thought: bool = True,
        thought_chars: int = 200,
        footer: bool = True,
        model_label: str = "",
        asker: str = "",
        clock: Callable[[], float] = time.monotonic,
        footer_tokens: bool = True,
        sources: bool = True,
        stale_after_s: float = 300.0,
        follow_model: bool = True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``footer``: round, tokens (``footer_tokens``), elapsed and model; ``sources``: the sources line, with or
        without the rest; ``stale_after_s``: a tool line says its result came from a cache older than this;
        ``follow_model``: the model that answered (:class:`ModelAnswering`) replaces ``model_label``;
        ``wall_clock`` (Unix time) ages the sources."""
        self.locale = normalize_locale(locale)
        self.asker = asker
        options = FooterOptions(stats=footer, tokens=footer_tokens, sources=sources, stale_after_s=stale_after_s,
                                model_label=model_label, follow_model=follow_model)
        self._footer_view = CardFooter(options, locale=self.locale, wall_clock=wall_clock)
        self._life = CardLifecycle(self.locale, clock=clock)
        self._board = StatusBoard(self.locale)
        self.pictures = CardPictures()
        """The turn's pictures (charts) and where each one's delivery is."""
        self._round_text = RoundText(show_thought=show_thought, thought_chars=thought_chars)
        self._round = 0
        self._max_rounds = 0
        self._tokens = 0
        self._phase: Phase = "thinking"
        self._folds: dict[type, Callable[[Any], int]] = {
            RoundStarted: self._round_started,
            ThoughtDelta: self._thought_delta,
            AnswerDelta: self._answer_delta,
            ToolCallStarted: self._tool_started,
            ToolCallFinished: self._tool_finished,
            ApprovalRequested: self._approval_requested,
            ApprovalDecided: self._approval_decided,
            ModelAnswering: self._model_answering,
            UsageReported: self._usage,
            TurnDone: self._done,
            TurnFailed: self._failed,
        }
        self.version = 0
        """Bumped on every visible change; snapshots carry it as ``seq``."""

    # --- reading ---------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """``thinking``, ``tool`` or ``answer``: what the last event was about."""
        return self._phase

    @property
    def status(self) -> CardStatus:
        """The card's lifecycle status."""
        return self._life.status

    @property
    def final(self) -> bool:
        """True once done, failed or stopped."""
        return self._life.final

    @property
    def answer(self) -> str:
        """The answer text so far (the current round's visible text)."""
        return self._round_text.answer

    @property
    def answer_epoch(self) -> int:
        """Identity of the current answer text: changes whenever the text so far turns into narration.

        Offsets into :attr:`answer` (kept by :class:`~botgateway.cards.parts.PartCursor` for continuation parts)
        stay valid while the epoch is unchanged.
        """
        return self._round_text.epoch

    @property
    def block_count(self) -> int:
        """How many narration and tool blocks the card has."""
        return len(self._board)

    def snapshot(self) -> CardSnapshot:
        """The whole card as of now (first part; :class:`~botgateway.cards.parts.PartCursor` derives the others)."""
        thought = self._round_text.thought() if self._phase == "thinking" and not self.final else ""
        return CardSnapshot(
            status=self._life.status,
            blocks=self._footer_view.aged(self._board.blocks),
            thought=thought,
            answer=self._round_text.answer,
            error=self._life.note,
            footer=self._footer(),
            locale=self.locale,
            asker=self.asker,
            part=1,
            seq=self.version,
            queue_position=self._life.queue_position,
            approvals=self._board.approvals,
            artifacts=self.pictures.views,
        )

    # --- writing ---------------------------------------------------------

    def _touch(self) -> None:
        self.version += 1

    def artifact_placed(self, ref: str, placement: ArtifactPlacement) -> bool:
        """Picture ``ref`` was delivered (``placement``: what the card shows for it); True when the card changed."""
        changed = self.pictures.placed(ref, placement)
        if changed:
            self._touch()
        return changed

    def artifact_failed(self, ref: str, error: str) -> bool:
        """Picture ``ref`` could not be delivered (``error``: why, one line); True when the card changed."""
        changed = self.pictures.failed(ref, error)
        if changed:
            self._touch()
        return changed

    def mark_queued(self, position: int = 0, *, busy: bool = False) -> None:
        """Show the card as waiting for the previous question of the conversation (``position`` 1 = next), or with
        ``busy`` for a free turn slot of the gateway, every slot answering someone."""
        if self._life.queue(position, busy=busy):
            self._touch()

    def mark_started(self) -> None:
        """The turn left the queue and runs now (the first event does this too)."""
        self._life.begin()
        self._touch()

    def mark_stopped(self, note: str = "") -> None:
        """The asker (or an admin) stopped the turn: final, partial answer kept, ``note`` or a default shown."""
        if not self.final:
            self._end(lifecycle.stopped(self.locale, note))

    def mark_failed(self, message: str = "") -> None:
        """End the card as failed with a plain-words ``message``, keeping whatever answer streamed."""
        if not self.final:
            self._end(lifecycle.failed(self.locale, message))

    def _end(self, ending: Ending) -> None:
        self._board.end(ending.tool_reason)
        self._life.end(ending)
        self._touch()

    def apply(self, event: TurnEvent) -> int:
        """Fold one event in; returns how many visible characters changed (0 when nothing visible did)."""
        if self.final:
            return 0
        self._life.begin()
        for kind in type(event).__mro__:
            fold = self._folds.get(kind)
            if fold is not None:
                return fold(event)
        return 0

    def _round_started(self, event: RoundStarted) -> int:
        self._narrate(self._round_text.new_round())
        self._round = event.round
        self._max_rounds = event.max_rounds
        self._phase = "thinking"
        self._touch()
        return 0

    def _thought_delta(self, event: ThoughtDelta) -> int:
        if not event.text:
            return 0
        shown = self._round_text.add_thought(event.text)
        if shown:
            self._phase = "thinking"
            self._touch()
        return shown

    def _answer_delta(self, event: AnswerDelta) -> int:
        if not event.text:
            return 0
        self._round_text.add(event.text)
        self._phase = "answer"
        self._life.answering()
        self._touch()
        return len(event.text)

    def _tool_started(self, event: ToolCallStarted) -> int:
        self._narrate(self._round_text.tool_called())
        line = self._board.started(event)
        self._life.calling()
        return self._tool_changed(len(render.tool_line_text(line, self.locale)))

    def _tool_finished(self, event: ToolCallFinished) -> int:
        self._footer_view.tool_finished(event)
        self.pictures.add(event.artifacts)
        line = self._board.finished(event)
        return self._tool_changed(len(render.tool_line_text(line, self.locale)))

    def _approval_requested(self, event: ApprovalRequested) -> int:
        prompt = self._board.approval_requested(event)
        return self._tool_changed(len(prompt.tool) + len(prompt.arguments))

    def _approval_decided(self, event: ApprovalDecided) -> int:
        return self._tool_changed(len(self._board.approval_decided(event)))

    def _tool_changed(self, chars: int) -> int:
        """A status line (or an approval) changed: the phase is tools, and ``chars`` changed."""
        self._phase = "tool"
        self._touch()
        return chars

    def _model_answering(self, event: ModelAnswering) -> int:
        self._footer_view.model_answering(event)
        self._touch()
        return 0

    def _usage(self, event: UsageReported) -> int:
        self._tokens += event.prompt_tokens + event.completion_tokens
        return 0

    def _done(self, event: TurnDone) -> int:
        result = event.result
        if result.usage.total_tokens:
            self._tokens = result.usage.total_tokens
        if self._round == 0:
            self._round = result.rounds
        before = len(self._round_text.answer)
        # The result is authoritative: it holds the whole answer even if a delta was missed.
        if result.answer:
            self._round_text.settle(result.answer)
        self._phase = "answer"
        self._end(lifecycle.done(self.locale))
        return max(abs(len(self._round_text.answer) - before), 1)

    def _failed(self, event: TurnFailed) -> int:
        if event.partial_answer and len(event.partial_answer) >= len(self._round_text.answer):
            self._round_text.settle(event.partial_answer)
        self._end(lifecycle.turn_failed(self.locale, event))
        return 1

    def _narrate(self, text: str) -> None:
        """``text``, the current round's so far, is narration: the board shows it above the tool lines."""
        if text.strip():
            self._board.narrate(self._round, text)

    def _footer(self) -> str:
        if self._life.status == "queued" or not self._footer_view.shown:
            return ""
        return self._footer_view.text(
            round=self._round, max_rounds=self._max_rounds, tokens=self._tokens, elapsed_s=self._life.elapsed_s()
        )
