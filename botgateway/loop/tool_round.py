"""One tool round of a turn: the model's calls run concurrently and go back to it in call order.

Each call runs through :meth:`ToolRegistry.execute` (its own timeout, its own
error result), all calls of the round at once, up to the registry's
``max_calls_per_round``: the calls past it are not run and fail with a note the
model can act on (:meth:`ToolRegistry.over_cap`). :class:`ToolCallStarted` events
come first, in call order; :class:`ToolCallFinished` events (with the sources
of each result) follow in true completion order; then the round's :class:`ToolRoundResult`: the messages and
records the turn commits, in the order the model made the calls. Each result
goes back as data with its provenance (:mod:`botgateway.tooling.provenance`).

A call that needs an approval waits at the turn's :class:`ApprovalGate` first;
its :class:`ApprovalRequested` and :class:`ApprovalDecided` events come out of
the round as they happen, and a call that is not approved fails without running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from botgateway.approvals import ApprovalGate, not_run_reason
from botgateway.events import ApprovalDecided, ApprovalRequested, ToolCallFinished, ToolCallRecord, ToolCallStarted
from botgateway.incidents import report_incident
from botgateway.model import AssembledToolCall
from botgateway.tooling import SOURCE_GATEWAY, ToolContext, ToolOutcome, ToolRegistry

__all__ = ["TOOL_CANCEL_GRACE_S", "ToolRoundResult", "run_calls", "run_tool_round", "unique_call_ids"]

log = structlog.get_logger(__name__)

TOOL_CANCEL_GRACE_S = 2.0
"""How long cancelled tool tasks get to unwind before the turn stops waiting for them."""


@dataclass(frozen=True)
class ToolRoundResult:
    """What a finished tool round adds to the turn, in the order the model made the calls."""

    messages: tuple[dict[str, Any], ...]
    """The assistant message carrying the calls, then one ``tool`` message per call."""
    records: tuple[ToolCallRecord, ...]
    """One record per call, for the turn result."""


async def run_tool_round(
    tools: ToolRegistry,
    calls: Sequence[AssembledToolCall],
    ctx: ToolContext,
    *,
    text: str,
    round_no: int,
    gate: ApprovalGate | None = None,
) -> AsyncGenerator[ToolCallStarted | ToolCallFinished | ApprovalEvent | ToolRoundResult, None]:
    """Run the round's ``calls``: started events, approval and finished events as they happen, then the result.

    ``text`` is the narration the model streamed before its calls; it travels
    in the assistant message with them. ``gate`` holds calls that need an
    approval (``None``: no call waits).
    """
    for call in calls:
        yield ToolCallStarted(call_id=call.call_id, name=call.name, arguments=dict(call.arguments))
    outcomes: dict[int, ToolOutcome] = {}
    async for item in run_calls(tools, calls, ctx, gate):
        if isinstance(item, (ApprovalRequested, ApprovalDecided)):
            yield item
            continue
        position, outcome = item
        outcomes[position] = outcome
        call = calls[position]
        yield ToolCallFinished(call_id=call.call_id, name=call.name, ok=outcome.ok, summary=outcome.summary,
                               duration_s=outcome.duration_s, sources=outcome.sources,
                               artifacts=outcome.artifacts)
    ordered = [outcomes[position] for position in range(len(calls))]
    yield ToolRoundResult(
        messages=(
            _assistant_message(text, calls),
            *(_tool_message(tools, call, outcome) for call, outcome in zip(calls, ordered, strict=True)),
        ),
        records=tuple(
            ToolCallRecord(
                call_id=call.call_id,
                name=call.name,
                arguments=dict(call.arguments),
                ok=outcome.ok,
                summary=outcome.summary,
                duration_s=outcome.duration_s,
                round=round_no,
            )
            for call, outcome in zip(calls, ordered, strict=True)
        ),
    )


def _tool_message(tools: ToolRegistry, call: AssembledToolCall, outcome: ToolOutcome) -> dict[str, Any]:
    """The ``tool`` message of one call: its result as data, delimited and labelled (:meth:`ToolRegistry.model_text`)."""
    return {"role": "tool", "tool_call_id": call.call_id, "content": tools.model_text(outcome, tool=call.name, call_id=call.call_id)}


def _assistant_message(text: str, calls: Sequence[AssembledToolCall]) -> dict[str, Any]:
    """The assistant message of a tool round.

    It carries valid JSON arguments even when the model's were malformed (some
    providers reject bad JSON in history).
    """
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.valid_arguments_json},
            }
            for call in calls
        ],
    }


ApprovalEvent = ApprovalRequested | ApprovalDecided
"""What a waiting call reports while the round runs."""


async def run_calls(
    tools: ToolRegistry, calls: Sequence[AssembledToolCall], ctx: ToolContext, gate: ApprovalGate | None = None
) -> AsyncGenerator[tuple[int, ToolOutcome] | ApprovalEvent, None]:
    """Run the calls concurrently; yields ``(position, outcome)`` as each finishes, and approval events as they happen.

    Only the first ``tools.max_calls_per_round`` calls run; the others are
    reported first, as failed without running. Leaving early (cancellation, or
    closing the iterator) cancels the calls still running (and waiting) and
    waits up to :data:`TOOL_CANCEL_GRACE_S` for them.
    """
    tasks: dict[asyncio.Task[ToolOutcome], int] = {}
    # Done-callbacks and approval events feed one queue, so everything is reported in true order.
    finished: asyncio.Queue[asyncio.Task[ToolOutcome] | ApprovalEvent] = asyncio.Queue()
    cap = tools.max_calls_per_round
    for position, call in enumerate(calls[:cap]):
        task = asyncio.create_task(_cleared_call(tools, call, ctx, gate, finished.put_nowait),
                                   name=f"tool:{call.name}:{call.call_id}")
        task.add_done_callback(finished.put_nowait)
        tasks[task] = position
    remaining = len(tasks)
    try:
        if len(calls) > cap:
            log.warning("tool_calls_over_cap", calls=len(calls), max_calls_per_round=cap)
        for position in range(cap, len(calls)):
            yield position, tools.over_cap(calls[position].arguments)
        while remaining:
            done = await finished.get()
            if not isinstance(done, asyncio.Task):
                yield done
                continue
            remaining -= 1
            position = tasks[done]
            outcome = _outcome_of(done, calls[position])
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


async def _cleared_call(
    tools: ToolRegistry, call: AssembledToolCall, ctx: ToolContext, gate: ApprovalGate | None, emit: Callable[[ApprovalEvent], None]
) -> ToolOutcome:
    """Run one call, after its approval when it needs one; a call not approved fails without running."""
    if gate is not None and gate.needs(call.name):
        started = time.monotonic()
        decided = await gate.wait(call.call_id, call.name, dict(call.arguments), emit)
        if not decided.approved:
            return tools.failure(not_run_reason(decided, gate.timeout_s), arguments=call.arguments,
                                 duration_s=time.monotonic() - started)
    # The registry parses the raw text itself, so a malformed-JSON error reaches the model verbatim.
    return await tools.execute(call.name, call.arguments_json, ctx)


def _outcome_of(task: asyncio.Task[ToolOutcome], call: AssembledToolCall) -> ToolOutcome:
    """The finished task's outcome; a crash of the registry becomes a failed outcome the model can read."""
    try:
        if task.cancelled():  # a tool that cancelled itself; our own cancel never gets here
            raise RuntimeError("the tool was cancelled")
        return task.result()
    except Exception as exc:  # execute() never raises; a broken registry must not end the turn
        incident = report_incident(log, "tool_execute_crashed", exc, reason="the tool failed unexpectedly", tool=call.name)
        return ToolOutcome(
            ok=False, content=f"Error: {incident.reason}", summary=incident.reason, duration_s=0.0, error=incident.reason,
            source=SOURCE_GATEWAY,
        )


def unique_call_ids(calls: Sequence[AssembledToolCall], used: set[str], round_no: int) -> tuple[AssembledToolCall, ...]:
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
