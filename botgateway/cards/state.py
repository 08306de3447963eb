"""The card's state: a pure fold of one turn's events into what its card shows.

``CardState`` knows nothing of timing (that is :mod:`botgateway.cards.streamer`)
nor of platform markup (each adapter's job, helped by :mod:`botgateway.cards.render`);
it produces :class:`~botgateway.snapshot.CardSnapshot` render data. The blocks
above the answer (narration, tool lines, approvals waiting) are its
:class:`~botgateway.cards.board.StatusBoard`'s; the footer, with the model
that answered and the sources the answer used (aged when a snapshot is
taken, also on a tool line whose result came from an old cache), is its
:class:`~botgateway.cards.footer.CardFooter`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from botgateway.artifacts import ArtifactPlacement
from botgateway.cards import render
from botgateway.cards.board import StatusBoard
from botgateway.cards.footer import CardFooter, FooterOptions
from botgateway.cards.pictures import CardPictures
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
from botgateway.strings import normalize_locale, t

__all__ = ["CardState"]

_FAILURE_KEYS = {
    "llm_unavailable": "failed_llm_unavailable",
    "interrupted": "failed_interrupted",
    "internal": "failed_internal",
    "timeout": "failed_timeout",
    "llm_refused": "failed_llm_refused",
}


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` on one line, starting at a word when one is near."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[-limit:]
    space = cut.find(" ")
    if 0 <= space < 20:
        cut = cut[space + 1 :]
    return "…" + cut


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
        self.show_thought = show_thought and thought_chars > 0
        self.thought_chars = thought_chars
        self.asker = asker
        self._clock = clock
        options = FooterOptions(stats=footer, tokens=footer_tokens, sources=sources, stale_after_s=stale_after_s,
                                model_label=model_label, follow_model=follow_model)
        self._footer_view = CardFooter(options, locale=self.locale, wall_clock=wall_clock)
        self._status: CardStatus = "working"
        self._queue_position = 0
        self._board = StatusBoard(self.locale)
        self.pictures = CardPictures()
        """The turn's pictures (charts) and where each one's delivery is."""
        self._round = 0
        self._max_rounds = 0
        self._round_text = ""
        self._answer_epoch = 0
        self._round_called_tools = False
        self._thought = ""
        self._tokens = 0
        self._error = ""
        self._phase: Phase = "thinking"
        self._started_at = clock()
        self._ended_at: float | None = None
        self._seen_event = False
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
        return self._status

    @property
    def final(self) -> bool:
        """True once done, failed or stopped."""
        return self._status in ("done", "failed", "stopped")

    @property
    def answer(self) -> str:
        """The answer text so far (the current round's visible text)."""
        return self._round_text

    @property
    def answer_epoch(self) -> int:
        """Identity of the current answer text: changes whenever the text so far turns into narration.

        Offsets into :attr:`answer` (kept by the streamer for continuation parts)
        stay valid while the epoch is unchanged.
        """
        return self._answer_epoch

    @property
    def block_count(self) -> int:
        """How many narration and tool blocks the card has."""
        return len(self._board)

    def snapshot(self) -> CardSnapshot:
        """The whole card as of now (first part; the streamer derives continuation parts)."""
        thought = ""
        if (
            self.show_thought
            and not self.final
            and self._phase == "thinking"
            and not self._round_text
            and self._thought.strip()
        ):
            thought = _tail(self._thought, self.thought_chars)
        return CardSnapshot(
            status=self._status,
            blocks=self._footer_view.aged(self._board.blocks),
            thought=thought,
            answer=self._round_text,
            error=self._error,
            footer=self._footer(),
            locale=self.locale,
            asker=self.asker,
            part=1,
            seq=self.version,
            queue_position=self._queue_position if self._status == "queued" else 0,
            approvals=self._board.approvals,
            artifacts=self.pictures.views,
        )

    def part_snapshot(self, part: int, first_block: int, answer_offset: int, answer_epoch: int) -> CardSnapshot:
        """The card of continuation ``part``: blocks from ``first_block`` on and the answer past what earlier parts showed.

        ``answer_offset`` characters of the answer of epoch ``answer_epoch`` were
        shown by earlier parts; if the answer text has been replaced since
        (it became narration), the whole of the current text is new.
        """
        full = self.snapshot()
        if part == 1 and first_block == 0 and (answer_offset == 0 or answer_epoch != self._answer_epoch):
            return full  # the first part, whole: the usual card, built once
        answer = full.answer[answer_offset:] if answer_epoch == self._answer_epoch else full.answer
        return replace(
            full, part=part, blocks=full.blocks[first_block:], answer=answer, asker=full.asker if part == 1 else "",
            artifacts=full.artifacts if part == 1 else (),
        )

    # --- writing ---------------------------------------------------------

    def _touch(self) -> None:
        self.version += 1

    def _begin(self) -> None:
        if not self._seen_event:
            self._seen_event = True
            if self._status == "queued":
                self._status = "working"
                self._queue_position = 0
                self._error = ""
                self._started_at = self._clock()

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
        if self._seen_event or self.final:
            return
        self._status = "queued"
        self._queue_position = max(position, 0)
        if busy:
            self._error = t(self.locale, "queued_busy", position=max(position, 1))
        elif position > 0:
            self._error = t(self.locale, "queued_position", position=position)
        else:
            self._error = t(self.locale, "queued")
        self._touch()

    def mark_started(self) -> None:
        """The turn left the queue and runs now (the first event does this too)."""
        self._begin()
        self._touch()

    def mark_stopped(self, note: str = "") -> None:
        """The asker (or an admin) stopped the turn: final, partial answer kept, ``note`` or a default shown."""
        if self.final:
            return
        if self._status == "queued":
            self._error = ""
        self._end("stopped", note or t(self.locale, "stopped"), tool_reason=t(self.locale, "tool_stopped"))

    def mark_failed(self, message: str = "") -> None:
        """End the card as failed with a plain-words ``message``, keeping whatever answer streamed."""
        if self.final:
            return
        message = message or t(self.locale, "failed_unfinished")
        self._end("failed", t(self.locale, "failed", message=message), tool_reason=message)

    def _end(self, status: CardStatus, error: str, *, tool_reason: str) -> None:
        self._board.end(tool_reason)
        self._status = status
        self._error = error
        self._queue_position = 0
        self._ended_at = self._clock()
        self._touch()

    def apply(self, event: TurnEvent) -> int:
        """Fold one event in; returns how many visible characters changed (0 when nothing visible did)."""
        if self.final:
            return 0
        self._begin()
        for kind in type(event).__mro__:
            fold = self._folds.get(kind)
            if fold is not None:
                return fold(event)
        return 0

    def _round_started(self, event: RoundStarted) -> int:
        self._close_round()
        self._round = event.round
        self._max_rounds = event.max_rounds
        self._thought = ""
        self._round_called_tools = False
        self._phase = "thinking"
        self._touch()
        return 0

    def _thought_delta(self, event: ThoughtDelta) -> int:
        if not event.text:
            return 0
        # Keep a bounded tail: only the last ~thought_chars are ever shown.
        self._thought = (self._thought + event.text)[-max(4 * self.thought_chars, 400) :]
        shown = self.show_thought and not self._round_text
        if shown:
            self._phase = "thinking"
            self._touch()
        return len(event.text) if shown else 0

    def _answer_delta(self, event: AnswerDelta) -> int:
        if not event.text:
            return 0
        self._round_text += event.text
        self._phase = "answer"
        if self._status == "working":
            self._status = "streaming"
        self._touch()
        return len(event.text)

    def _tool_started(self, event: ToolCallStarted) -> int:
        self._to_narration()
        self._round_called_tools = True
        line = self._board.started(event)
        self._status = "working"
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
        before = len(self._round_text)
        # The result is authoritative: it holds the whole answer even if a delta was missed.
        if result.answer:
            if not result.answer.startswith(self._round_text):
                self._answer_epoch += 1  # a different text: earlier offsets no longer apply
            self._round_text = result.answer
        self._phase = "answer"
        self._end("done", "", tool_reason=t(self.locale, "failed_unfinished"))
        return max(abs(len(self._round_text) - before), 1)

    def _failed(self, event: TurnFailed) -> int:
        if event.partial_answer and len(event.partial_answer) >= len(self._round_text):
            if not event.partial_answer.startswith(self._round_text):
                self._answer_epoch += 1
            self._round_text = event.partial_answer
        if event.reason == "cancelled":
            self._end("stopped", t(self.locale, "stopped"), tool_reason=t(self.locale, "tool_stopped"))
        else:
            key = _FAILURE_KEYS.get(event.reason, "failed")
            error = t(self.locale, key, message=event.message).strip()
            self._end("failed", error, tool_reason=event.message or t(self.locale, "failed_unfinished"))
        return 1

    def _to_narration(self) -> None:
        """The current round called a tool: its visible text so far is narration, not answer."""
        if self._round_text.strip():
            self._board.narrate(self._round, self._round_text)
        if self._round_text:
            self._answer_epoch += 1
        self._round_text = ""

    def _close_round(self) -> None:
        if self._round_called_tools:
            self._to_narration()

    def _footer(self) -> str:
        if self._status == "queued" or not self._footer_view.shown:
            return ""
        end = self._ended_at if self._ended_at is not None else self._clock()
        return self._footer_view.text(
            round=self._round, max_rounds=self._max_rounds, tokens=self._tokens, elapsed_s=end - self._started_at
        )
