"""The streaming tool loop: one user question in, a typed stream of :mod:`~botgateway.events` out.

One round is one streamed completion. Text and reasoning stream out as they
arrive; tool calls are assembled (:mod:`botgateway.assembly`), run concurrently
through :meth:`ToolRegistry.execute` (each with its own timeout), and their
results go back to the model in call order for the next round. The round
without tool calls is the answer. The last allowed round (``max_rounds``) is
asked to answer without tools, so a turn always closes with words instead of
silence.

History changes only when a turn completes: the user message, each assistant
message with its tool calls, the tool results and the final answer are
committed together. A failed or cancelled turn leaves history exactly as it
was. Reasoning is never stored.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack, aclosing
from dataclasses import replace
from typing import Any, Protocol

import structlog

from botgateway.assembly import (
    AssembledRound,
    AssembledToolCall,
    ReasoningPart,
    TextPart,
)
from botgateway.events import (
    AnswerDelta,
    RoundStarted,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallRecord,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    TurnResult,
    Usage,
    UsageReported,
)
from botgateway.llm import ChatModel, LLMError, LLMInterrupted
from botgateway.logs import bind_turn
from botgateway.stores.base import StoreError
from botgateway.tooling import ToolContext, ToolOutcome, ToolRegistry

__all__ = ["CLOSING_INSTRUCTION", "HistoryStore", "ToolLoop", "max_rounds_note"]

log = structlog.get_logger(__name__)

CLOSING_INSTRUCTION = (
    "You have reached the limit of tool calls for this question. Do not call any more tools. "
    "Answer now from the tool results above, and say briefly what is still unknown."
)
"""Added to the system prompt of the last allowed round, whose tools are disabled."""

TOOL_CANCEL_GRACE_S = 2.0
"""How long cancelled tool tasks get to unwind before the turn stops waiting for them."""


def max_rounds_note(max_rounds: int) -> str:
    """The fixed closing note when the model still wanted tools in its last allowed round."""
    rounds = "1 model round" if max_rounds == 1 else f"{max_rounds} model rounds"
    return (
        f"I stopped here: this question needed more than {rounds} (llm.max_rounds) to answer completely. "
        "Ask a narrower question, or raise llm.max_rounds."
    )


class HistoryStore(Protocol):
    """The part of :class:`botgateway.memory.Memory` the loop uses."""

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        """Messages to send before the new question (OpenAI format)."""
        ...

    async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
        """Store a completed turn's messages atomically."""
        ...


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
    ) -> None:
        if max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")
        self.llm = llm
        self.tools = tools
        self.memory = memory
        self.max_rounds = max_rounds
        self.system_prompt = system_prompt

    async def run_turn(
        self,
        conversation_id: str,
        user_text: str,
        ctx: ToolContext,
        *,
        turn_id: str | None = None,
    ) -> AsyncIterator[TurnEvent]:
        """Answer ``user_text``; the stream ends with exactly one :class:`TurnDone` or :class:`TurnFailed`.

        Cancelling the consuming task raises ``CancelledError`` out of the
        iterator promptly (running tools are cancelled) and leaves history
        untouched.
        """
        turn_id = turn_id or uuid.uuid4().hex
        ended = False
        answer: list[str] = []
        # bind_turn restores by value, not by reset token: safe when the generator is closed from another context.
        with (
            bind_turn(turn_id=turn_id, conversation=conversation_id, user=ctx.user_id or None, platform=ctx.platform or None),
            ExitStack() as round_context,
        ):
            try:
                async with aclosing(self._turn(conversation_id, user_text, ctx, turn_id)) as events:
                    async for event in events:
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
                        "internal",
                        f"Something went wrong on our side ({type(exc).__name__}); the details are in the log",
                        partial_answer="".join(answer),
                    )

    async def _turn(self, conversation_id: str, user_text: str, ctx: ToolContext, turn_id: str) -> AsyncIterator[TurnEvent]:
        started = time.monotonic()
        try:
            history = await self.memory.history(conversation_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("history_load_failed")
            # A store error says what to check (and never holds a password); anything else is a bug of ours.
            detail = str(exc) if isinstance(exc, StoreError) else type(exc).__name__
            yield TurnFailed("internal", f"Could not read the conversation history ({detail}); try again")
            return

        user_message = {"role": "user", "content": user_text}
        turn_messages: list[dict[str, Any]] = [user_message]
        records: list[ToolCallRecord] = []
        used_ids: set[str] = set()
        usage = Usage()
        specs = self.tools.specs()
        log.info("turn_started", history_messages=len(history), tools=len(specs))

        for round_no in range(1, self.max_rounds + 1):
            last_round = round_no == self.max_rounds
            # The last allowed round still sees the tool definitions (history holds tool
            # calls, and some providers insist on matching definitions) but may not call them.
            # With max_rounds 1 there is no tool round at all, so nothing to close.
            closing = last_round and round_no > 1 and bool(specs)
            system = self.system_prompt + ("\n\n" + CLOSING_INSTRUCTION if closing else "")
            no_tools = last_round and bool(specs)
            request = [{"role": "system", "content": system}, *history, *turn_messages]
            yield RoundStarted(round=round_no, max_rounds=self.max_rounds)

            assembled: AssembledRound | None = None
            try:
                async with aclosing(
                    self.llm.stream(
                        request,
                        tools=specs or None,
                        tool_choice="none" if no_tools else None,
                        round=round_no,
                    )
                ) as stream:
                    async for item in stream:
                        if isinstance(item, TextPart):
                            yield AnswerDelta(item.text)
                        elif isinstance(item, ReasoningPart):
                            yield ThoughtDelta(item.text)
                        elif isinstance(item, AssembledRound):
                            assembled = item
            except LLMInterrupted as exc:
                log.warning("turn_failed", reason="interrupted", partial_chars=len(exc.partial_text))
                yield TurnFailed("interrupted", exc.message, partial_answer=exc.partial_text)
                return
            except LLMError as exc:  # LLMUnavailable, or any other model failure before output
                log.warning("turn_failed", reason="llm_unavailable", status=exc.status)
                yield TurnFailed("llm_unavailable", exc.message)
                return

            if assembled is None:  # a ChatModel that ended without its round; treat as empty
                assembled = AssembledRound("", "", (), None, None)
            if assembled.usage is not None:
                usage = usage + assembled.usage
                yield UsageReported(assembled.usage.prompt_tokens, assembled.usage.completion_tokens)

            calls = _unique_ids(assembled.tool_calls, used_ids, round_no)
            if calls and last_round:
                # Out of rounds and the model still wants tools: close in plain words.
                note = max_rounds_note(self.max_rounds)
                answer = (assembled.text.rstrip() + "\n\n" + note) if assembled.text.strip() else note
                yield AnswerDelta(("\n\n" + note) if assembled.text.strip() else note)
                log.info("turn_max_rounds", rounds=round_no)
                turn_messages.append({"role": "assistant", "content": answer})
                async for event in self._finish(conversation_id, turn_id, turn_messages, answer, records, usage, round_no, True, started):
                    yield event
                return

            if not calls:
                answer = assembled.text
                if not answer.strip():
                    yield TurnFailed("llm_unavailable", _empty_answer_message(assembled.finish_reason), partial_answer="")
                    return
                if assembled.finish_reason == "length":
                    log.warning("answer_truncated", reason="length")
                turn_messages.append({"role": "assistant", "content": answer})
                async for event in self._finish(conversation_id, turn_id, turn_messages, answer, records, usage, round_no, closing, started):
                    yield event
                return

            # A tool round: the assistant message carries valid JSON arguments even
            # when the model's were malformed (some providers reject bad JSON in history).
            turn_messages.append(
                {
                    "role": "assistant",
                    "content": assembled.text or None,
                    "tool_calls": [
                        {
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.valid_arguments_json},
                        }
                        for call in calls
                    ],
                }
            )
            for call in calls:
                yield ToolCallStarted(call.call_id, call.name, dict(call.arguments))
            outcomes: dict[int, ToolOutcome] = {}
            async for position, outcome in self._run_calls(calls, ctx):
                outcomes[position] = outcome
                call = calls[position]
                yield ToolCallFinished(call.call_id, call.name, outcome.ok, outcome.summary, outcome.duration_s)
            # Records and results in the order the model made the calls, not completion order.
            for position, call in enumerate(calls):
                outcome = outcomes[position]
                records.append(
                    ToolCallRecord(
                        call_id=call.call_id,
                        name=call.name,
                        arguments=dict(call.arguments),
                        ok=outcome.ok,
                        summary=outcome.summary,
                        duration_s=outcome.duration_s,
                        round=round_no,
                    )
                )
            for position, call in enumerate(calls):
                turn_messages.append({"role": "tool", "tool_call_id": call.call_id, "content": outcomes[position].content})

        raise AssertionError("unreachable: the last round always returns")  # pragma: no cover

    async def _run_calls(self, calls: Sequence[AssembledToolCall], ctx: ToolContext) -> AsyncIterator[tuple[int, ToolOutcome]]:
        """Run the calls concurrently; yields ``(position, outcome)`` as each finishes."""
        tasks: dict[asyncio.Task[ToolOutcome], int] = {}
        # Done-callbacks feed a queue so outcomes are reported in true completion order.
        finished: asyncio.Queue[asyncio.Task[ToolOutcome]] = asyncio.Queue()
        for position, call in enumerate(calls):
            # The registry parses the raw text itself, so a malformed-JSON error reaches the model verbatim.
            task = asyncio.create_task(self.tools.execute(call.name, call.arguments_json, ctx), name=f"tool:{call.name}:{call.call_id}")
            task.add_done_callback(finished.put_nowait)
            tasks[task] = position
        remaining = len(tasks)
        try:
            while remaining:
                task = await finished.get()
                remaining -= 1
                position = tasks[task]
                try:
                    if task.cancelled():  # a tool that cancelled itself; our own cancel never gets here
                        raise RuntimeError("the tool was cancelled")
                    outcome = task.result()
                except Exception as exc:  # execute() never raises; a broken registry must not end the turn
                    log.error("tool_execute_crashed", tool=calls[position].name, error=repr(exc), exc_info=exc)
                    outcome = ToolOutcome(False, f"Error: {type(exc).__name__}", f"failed: {type(exc).__name__}", 0.0)
                log.info(
                    "tool_finished",
                    tool=calls[position].name,
                    call_id=calls[position].call_id,
                    ok=outcome.ok,
                    duration_s=round(outcome.duration_s, 3),
                )
                yield position, outcome
        finally:
            pending = [task for task in tasks if not task.done()]
            if pending:
                for task in pending:
                    task.cancel()
                # Give tools a moment to unwind, but never let a stuck one hold the stop.
                await asyncio.wait(pending, timeout=TOOL_CANCEL_GRACE_S)

    async def _finish(
        self,
        conversation_id: str,
        turn_id: str,
        turn_messages: list[dict[str, Any]],
        answer: str,
        records: list[ToolCallRecord],
        usage: Usage,
        rounds: int,
        hit_max_rounds: bool,
        started: float,
    ) -> AsyncIterator[TurnEvent]:
        try:
            await self.memory.commit(conversation_id, turn_id, turn_messages)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The answer is complete and must reach the user; losing it over history would be worse.
            log.exception("history_commit_failed")
        log.info(
            "turn_done",
            rounds=rounds,
            tool_calls=len(records),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            duration_s=round(time.monotonic() - started, 3),
        )
        yield TurnDone(
            TurnResult(
                answer=answer,
                tool_calls=tuple(records),
                usage=usage,
                rounds=rounds,
                hit_max_rounds=hit_max_rounds,
            )
        )


def _unique_ids(calls: Sequence[AssembledToolCall], used: set[str], round_no: int) -> tuple[AssembledToolCall, ...]:
    """The calls with ids unique within the turn (``used`` is updated).

    Some self-hosted gateways number calls per round (``call_0`` every round); the
    card, the turn result and ``ask --json`` key calls by id, so a repeat gets a suffix.
    """
    unique = []
    for call in calls:
        call_id, n = call.call_id, 1
        while call_id in used:
            n += 1
            call_id = f"{call.call_id}_r{round_no}" + (f"_{n}" if n > 2 else "")
        used.add(call_id)
        unique.append(call if call_id == call.call_id else replace(call, call_id=call_id))
    return tuple(unique)


def _empty_answer_message(finish_reason: str | None) -> str:
    if finish_reason == "content_filter":
        return "The model service withheld the answer (content filter); try rephrasing the question"
    if finish_reason == "length":
        return "The model ran out of tokens before answering (llm.max_tokens); raise it or ask a narrower question"
    return "The model returned an empty answer; try again or rephrase the question"
