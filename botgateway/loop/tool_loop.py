"""The streaming tool loop: one user question in, a typed stream of :mod:`~botgateway.events` out.

One round is one streamed completion. Text and reasoning stream out as they
arrive; tool calls are assembled (:mod:`botgateway.model.assembly`), run concurrently
(:mod:`botgateway.loop.tool_round`, each with its own timeout), and their results go
back to the model in call order for the next round. The round without tool
calls is the answer. The last allowed round (``max_rounds``) is asked to answer
without tools, so a turn always closes with words instead of silence.

History changes only when a turn completes: the user message, each assistant
message with its tool calls, the tool results and the final answer are
committed together. A failed or cancelled turn leaves history exactly as it
was. Reasoning is never stored.

A whole turn is bounded by ``turn_timeout_s`` (:mod:`botgateway.loop.deadline`):
a model that keeps its stream alive forever ends the turn with a ``timeout``
:class:`TurnFailed` carrying what was written so far. Time a call spends
waiting for a person's approval (:mod:`botgateway.approvals.gate`) does not count.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import ExitStack, aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from botgateway.approvals import ApprovalDesk, ApprovalGate
from botgateway.events import (
    AnswerDelta,
    FailureReason,
    ModelAnswering,
    RoundStarted,
    ThoughtDelta,
    ToolCallRecord,
    TurnDone,
    TurnEvent,
    TurnFailed,
    TurnResult,
    Usage,
    UsageReported,
)
from botgateway.history import estimate_tokens, trim_history
from botgateway.incidents import report_incident
from botgateway.logs import bind_turn
from botgateway.loop.deadline import TurnDeadline, TurnTimedOut, turn_timeout_message
from botgateway.loop.tool_round import ToolRoundResult, run_tool_round, unique_call_ids
from botgateway.model import (
    AssembledRound,
    ChatModel,
    LLMContextTooLong,
    LLMError,
    LLMInterrupted,
    LLMRefused,
    ModelItem,
    ReasoningPart,
    TextPart,
    asking,
)
from botgateway.tooling import DATA_NOT_INSTRUCTIONS, ToolContext, ToolRegistry

__all__ = ["CLOSING_INSTRUCTION", "REFRESH_NOTE", "HistoryStore", "ToolLoop", "max_rounds_note", "system_prompt"]

log = structlog.get_logger(__name__)

CLOSING_INSTRUCTION = (
    "You have reached the limit of tool calls for this question. Do not call any more tools. "
    "Answer now from the tool results above, and say briefly what is still unknown."
)
"""Added to the system prompt of the last allowed round, whose tools are disabled."""

REFRESH_NOTE = (
    "The user asked to refresh: call the tools again for current data; do not reuse earlier tool results."
)
"""Added to the system prompt of every round of a refreshed turn (``ToolContext.fresh``): the history holds the
earlier answer's tool results, which a model would otherwise happily repeat. The note is the turn's own: the
system prompt is never stored in the history."""


def system_prompt(configured: str, *, closing: bool = False, refresh: bool = False) -> str:
    """The system message of a round: the fixed data-not-instructions rule, ``llm.system_prompt``, the refresh note
    of a refreshed turn, the closing instruction.

    The rule comes first and is not configurable: tool results carry text written
    by others (inventory names, MCP output), and no configuration may drop that.
    The note is in the one system message, not one of its own after the history:
    some providers take a system message only at the start.
    """
    parts = [DATA_NOT_INSTRUCTIONS, configured.strip(), REFRESH_NOTE if refresh else "",
             CLOSING_INSTRUCTION if closing else ""]
    return "\n\n".join(part for part in parts if part)


def max_rounds_note(max_rounds: int) -> str:
    """The fixed closing note when the model still wanted tools in its last allowed round."""
    rounds = "1 model round" if max_rounds == 1 else f"{max_rounds} model rounds"
    return (
        f"I stopped here: this question needed more than {rounds} (llm.max_rounds) to answer completely. "
        "Ask a narrower question, or raise llm.max_rounds."
    )


class HistoryStore(Protocol):
    """The part of :class:`botgateway.history.memory.Memory` the loop uses."""

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        """Messages to send before the new question (OpenAI format)."""
        ...

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        """Store a completed turn's messages atomically."""
        ...


# Mutable on purpose: it gathers one running turn's output, and is committed whole or dropped.
@dataclass
class _Turn:
    """What one turn has produced so far."""

    conversation_id: str
    turn_id: str
    started: float
    history: list[dict[str, Any]]
    specs: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    deadline: TurnDeadline
    fresh: bool = False
    records: list[ToolCallRecord] = field(default_factory=list)
    used_ids: set[str] = field(default_factory=set)
    usage: Usage = field(default_factory=Usage)


class ToolLoop:
    """Runs turns: model rounds, concurrent tool calls, history commit on success."""

    def __init__(
        self,
        llm: ChatModel,
        tools: ToolRegistry,
        memory: HistoryStore,
        *,
        max_rounds: int,
        system_prompt: str,
        turn_timeout_s: float | None = None,
        approvals: ApprovalDesk | None = None,
        approval_timeout_s: float = 300.0,
    ) -> None:
        """``turn_timeout_s`` bounds a whole turn (``llm.turn_timeout_s``); ``None`` leaves it unbounded.

        ``approvals`` is where calls that need an approval wait (``access.approvals``), each up to
        ``approval_timeout_s``; ``None`` denies such calls (nobody could approve them).
        """
        if max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")
        self.llm = llm
        self.tools = tools
        self.memory = memory
        self.max_rounds = max_rounds
        self.system_prompt = system_prompt
        self.turn_timeout_s = turn_timeout_s
        self.approvals = approvals
        self.approval_timeout_s = approval_timeout_s

    async def run_turn(
        self,
        conversation_id: str,
        user_text: str,
        ctx: ToolContext,
        *,
        turn_id: str | None = None,
        approvals: bool = True,
    ) -> AsyncGenerator[TurnEvent, None]:
        """Answer ``user_text``; the stream ends with exactly one :class:`TurnDone` or :class:`TurnFailed`.

        ``approvals`` False: nobody can approve calls of this turn (a command line), so those that need an
        approval are denied at once instead of waiting.

        Cancelling the consuming task raises ``CancelledError`` out of the
        iterator promptly (running tools are cancelled) and leaves history
        untouched; so does the turn deadline, which then ends the stream with a
        ``timeout`` :class:`TurnFailed`.
        """
        turn_id = turn_id or uuid.uuid4().hex
        ended = False
        answer: list[str] = []
        deadline = TurnDeadline(self.turn_timeout_s)
        # bind_turn restores by value, not by reset token: safe when the generator is closed from another context.
        with (
            bind_turn(turn_id=turn_id, conversation=conversation_id, user=ctx.user_id or None, platform=ctx.platform or None),
            asking(ctx),  # llm.routes choose the model by the asker: for each round and for a history summary
            ExitStack() as round_context,
        ):
            try:
                desk = self.approvals if approvals else None
                async with aclosing(self._turn(conversation_id, user_text, ctx, turn_id, deadline, desk)) as events:
                    deadline.start()
                    while not ended:
                        # Only the turn's own step runs under the deadline, never the consumer between events.
                        try:
                            event = await deadline.run(anext(events))
                        except StopAsyncIteration:
                            break
                        except TurnTimedOut:
                            event = self._timed_out("".join(answer))
                        if isinstance(event, RoundStarted):
                            answer.clear()
                            round_context.enter_context(bind_turn(round=event.round))
                        elif isinstance(event, AnswerDelta):
                            answer.append(event.text)
                        ended = isinstance(event, (TurnDone, TurnFailed))
                        yield event
            except Exception as exc:
                # A bug of ours must still end the turn with one plain-words event, never a traceback.
                log.exception("turn_crashed")
                if not ended:
                    yield TurnFailed(
                        reason="internal",
                        message=f"Something went wrong on our side ({type(exc).__name__}); the details are in the log",
                        partial_answer="".join(answer),
                    )

    def _timed_out(self, partial_answer: str) -> TurnFailed:
        """The end of a turn that ran out of time; history is left as it was."""
        assert self.turn_timeout_s is not None
        log.warning("turn_failed", reason="timeout", timeout_s=self.turn_timeout_s, partial_chars=len(partial_answer))
        return TurnFailed(reason="timeout", message=turn_timeout_message(self.turn_timeout_s), partial_answer=partial_answer)

    async def _turn(
        self, conversation_id: str, user_text: str, ctx: ToolContext, turn_id: str, deadline: TurnDeadline,
        desk: ApprovalDesk | None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """The rounds of one turn, until an answer, a failure, or the last allowed round."""
        started = time.monotonic()
        history = await self._load_history(conversation_id)
        if isinstance(history, TurnFailed):
            yield history
            return
        user_message = {"role": "user", "content": user_text}
        turn = _Turn(conversation_id, turn_id, started, history, self.tools.specs(ctx), [user_message], deadline,
                     fresh=ctx.fresh)
        log.info("turn_started", history_messages=len(history), tools=len(turn.specs))
        gate = ApprovalGate(desk, turn_id=turn_id, ctx=ctx, timeout_s=self.approval_timeout_s, pause=deadline.paused)

        for round_no in range(1, self.max_rounds + 1):
            assembled: AssembledRound | None = None
            answering = ""  # the model a ModelAnswering named for this round, if any
            async with aclosing(self._stream_round(turn, round_no)) as items:
                async for item in items:
                    if isinstance(item, AssembledRound):
                        assembled = item
                    else:
                        if isinstance(item, ModelAnswering):
                            answering = item.model
                        yield item
            if assembled is None:  # the model failed; the round ended with its TurnFailed
                return
            if assembled.usage is not None:
                turn.usage = turn.usage + assembled.usage
                yield _usage_reported(assembled.usage, assembled.model or answering or getattr(self.llm, "model", ""))

            calls = unique_call_ids(assembled.tool_calls, turn.used_ids, round_no)
            if not calls or round_no == self.max_rounds:
                async with aclosing(self._close(turn, assembled, round_no, wants_tools=bool(calls))) as events:
                    async for event in events:
                        yield event
                return
            tool_round = run_tool_round(self.tools, calls, ctx, text=assembled.text, round_no=round_no, gate=gate)
            async with aclosing(tool_round) as tool_items:
                async for tool_item in tool_items:
                    if isinstance(tool_item, ToolRoundResult):
                        turn.messages.extend(tool_item.messages)
                        turn.records.extend(tool_item.records)
                    else:
                        yield tool_item

        raise AssertionError("unreachable: the last round always returns")  # pragma: no cover

    async def _load_history(self, conversation_id: str) -> list[dict[str, Any]] | TurnFailed:
        """The history to send before the question, or the :class:`TurnFailed` that ends the turn."""
        try:
            return await self.memory.history(conversation_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A store error names hosts, ports and files: what to check is for the log; the asker gets an error id.
            incident = report_incident(log, "history_load_failed", exc, reason="Could not read the conversation history")
            return TurnFailed(reason="internal", message=f"{incident.reason}; try again")

    def _closing(self, round_no: int, turn: _Turn) -> bool:
        """Whether ``round_no`` is the last allowed round after tool rounds, told to answer without tools.

        With max_rounds 1 there is no tool round at all, so nothing to close.
        """
        return round_no == self.max_rounds and round_no > 1 and bool(turn.specs)

    async def _stream_round(self, turn: _Turn, round_no: int) -> AsyncGenerator[TurnEvent | AssembledRound, None]:
        """One streamed completion: :class:`RoundStarted`, text and thought as they arrive, then the assembled round.

        A request the provider refuses as too long for the model is sent once more
        with trimmed history (it failed before any output, so the card repeats
        nothing). A model failure ends the stream with a :class:`TurnFailed` instead of the round.
        """
        yield RoundStarted(round=round_no, max_rounds=self.max_rounds)
        assembled: AssembledRound | None = None
        retried = False
        while True:
            try:
                async with aclosing(self._completion(turn, round_no)) as stream:
                    async for item in stream:
                        if isinstance(item, TextPart):
                            yield AnswerDelta(text=item.text)
                        elif isinstance(item, ReasoningPart):
                            yield ThoughtDelta(text=item.text)
                        elif isinstance(item, ModelAnswering):  # a chain of endpoints says which one answers
                            yield item
                        elif isinstance(item, AssembledRound):
                            assembled = item
                break
            except LLMContextTooLong as exc:
                if retried or not _trim_history(turn):
                    yield _model_failed(exc)
                    return
                retried = True
            except LLMError as exc:  # interrupted, refused, or unavailable
                yield _model_failed(exc)
                return
        if assembled is None:  # a ChatModel that ended without its round; treat as empty
            assembled = AssembledRound("", "", (), None, None)
        yield assembled

    def _completion(self, turn: _Turn, round_no: int) -> AsyncGenerator[ModelItem, None]:
        """The model's streamed completion for ``round_no`` of ``turn``."""
        # The last allowed round still sees the tool definitions (history holds tool
        # calls, and some providers insist on matching definitions) but may not call them.
        system = system_prompt(self.system_prompt, closing=self._closing(round_no, turn), refresh=turn.fresh)
        no_tools = round_no == self.max_rounds and bool(turn.specs)
        request = [{"role": "system", "content": system}, *turn.history, *turn.messages]
        return self.llm.stream(request, tools=turn.specs or None, tool_choice="none" if no_tools else None, round=round_no)

    async def _close(self, turn: _Turn, assembled: AssembledRound, round_no: int, *, wants_tools: bool) -> AsyncGenerator[TurnEvent, None]:
        """The round that ends the turn: its answer, or a plain-words note when the model still wanted tools."""
        if wants_tools:
            # Out of rounds and the model still wants tools: close in plain words.
            note = max_rounds_note(self.max_rounds)
            answer = (assembled.text.rstrip() + "\n\n" + note) if assembled.text.strip() else note
            yield AnswerDelta(text=("\n\n" + note) if assembled.text.strip() else note)
            log.info("turn_max_rounds", rounds=round_no)
            hit_max_rounds = True
        else:
            answer = assembled.text
            if not answer.strip():
                yield TurnFailed(reason="llm_unavailable", message=_empty_answer_message(assembled.finish_reason), partial_answer="")
                return
            if assembled.finish_reason == "length":
                log.warning("answer_truncated", reason="length")
            hit_max_rounds = self._closing(round_no, turn)
        turn.messages.append({"role": "assistant", "content": answer})
        turn.deadline.disarm()  # the answer is complete: a deadline now could only cut its commit in half
        yield await self._commit(turn, answer, round_no, hit_max_rounds)

    async def _commit(self, turn: _Turn, answer: str, rounds: int, hit_max_rounds: bool) -> TurnDone:
        """Store the turn in history, then the :class:`TurnDone` that reports it."""
        try:
            await self.memory.commit(turn.conversation_id, turn.turn_id, turn.messages)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The answer is complete and must reach the user; losing it over history would be worse.
            log.exception("history_commit_failed")
        log.info(
            "turn_done",
            rounds=rounds,
            tool_calls=len(turn.records),
            prompt_tokens=turn.usage.prompt_tokens,
            completion_tokens=turn.usage.completion_tokens,
            duration_s=round(time.monotonic() - turn.started, 3),
        )
        return TurnDone(
            result=TurnResult(
                answer=answer,
                tool_calls=tuple(turn.records),
                usage=turn.usage,
                rounds=rounds,
                hit_max_rounds=hit_max_rounds,
            )
        )


def _usage_reported(usage: Usage, model: str) -> UsageReported:
    """The event reporting one round's ``usage``, by ``model`` (the provider's name for it, else the configured one)."""
    return UsageReported(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        model=model if isinstance(model, str) else "",
    )


def _trim_history(turn: _Turn) -> bool:
    """Halve the history ``turn`` sends (newest whole turns kept); False when there is none to trim."""
    if not turn.history:
        return False
    tokens = estimate_tokens(turn.history)
    turn.history = trim_history(turn.history, tokens // 2)
    log.warning("llm_context_too_long_retry", history_tokens=tokens, trimmed_tokens=estimate_tokens(turn.history))
    return True


def _model_failed(exc: LLMError) -> TurnFailed:
    """The :class:`TurnFailed` for a model failure: interrupted mid-answer, refused (4xx), or unavailable."""
    if isinstance(exc, LLMInterrupted):
        log.warning("turn_failed", reason="interrupted", partial_chars=len(exc.partial_text))
        return TurnFailed(reason="interrupted", message=exc.message, partial_answer=exc.partial_text)
    reason: FailureReason = "llm_refused" if isinstance(exc, LLMRefused) else "llm_unavailable"
    log.warning("turn_failed", reason=reason, status=exc.status)
    return TurnFailed(reason=reason, message=exc.message)


def _empty_answer_message(finish_reason: str | None) -> str:
    """Why a round with neither text nor tool calls is no answer, and what to do about it."""
    if finish_reason == "content_filter":
        return "The model service withheld the answer (content filter); try rephrasing the question"
    if finish_reason == "length":
        return "The model ran out of tokens before answering (llm.max_tokens); raise it or ask a narrower question"
    return "The model returned an empty answer; try again or rephrase the question"
