"""``botgateway ask "question"``: one turn from the command line.

Plain mode prints the answer on stdout and the tool calls as they run on
stderr, so ``botgateway ask … > answer.md`` captures only the answer. ``--json``
prints one JSON object per line on stdout: every :mod:`~botgateway.events`
event (``kind``, its fields and ``t``, monotonic seconds since the start), then
one ``{"kind": "result", …}`` with the answer, every tool call with its
arguments and outcome, and the usage. The exit status is 1 when the turn
failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import structlog

from botgateway.config import Config
from botgateway.events import (
    AnswerDelta,
    RoundStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    Usage,
    UsageReported,
    event_to_dict,
)
from botgateway.tooling import ToolContext, local_user

if TYPE_CHECKING:
    from botgateway.cli.runtime import Runtime

__all__ = ["run_ask"]

log = structlog.get_logger(__name__)

EXIT_OK = 0
"""The turn completed."""
EXIT_FAILED = 1
"""The turn failed, or never started."""


@dataclass
class _Tally:
    """What the result line reports, gathered from the events (so a failed turn reports too)."""

    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    round: int = 0
    answer: list[str] = field(default_factory=list)
    """Answer text of the current round, reported if the turn is interrupted."""
    final: TurnDone | TurnFailed | None = None
    """The event that ended the turn, once it came."""

    def apply(self, event: TurnEvent) -> None:
        """Fold one event into the tally."""
        if isinstance(event, ToolCallStarted):
            self.calls[event.call_id] = {
                "call_id": event.call_id,
                "name": event.name,
                "arguments": event.arguments,
                "ok": None,
                "summary": "",
                "duration_s": None,
                "round": self.round,
            }
        elif isinstance(event, ToolCallFinished):
            entry = self.calls.setdefault(
                event.call_id, {"call_id": event.call_id, "name": event.name, "arguments": {}, "round": self.round}
            )
            entry.update(ok=event.ok, summary=event.summary, duration_s=round(event.duration_s, 3))
        elif isinstance(event, UsageReported):
            self.usage = self.usage + Usage(prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens)
        elif isinstance(event, RoundStarted):
            self.round = event.round
            self.answer.clear()
        elif isinstance(event, AnswerDelta):
            self.answer.append(event.text)


def _usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _emit(out: TextIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    out.flush()


async def run_ask(
    config: Config,
    question: str,
    *,
    json_mode: bool,
    conversation_id: str = "cli",
    new: bool = False,
    as_principal: str = "",
    channel: str = "",
) -> int:
    """Run one turn for ``question`` and print it; returns the exit status (1 when the turn failed).

    ``as_principal`` (``slack:U0123``) runs the turn under that identity in
    ``channel`` (a qualified channel id; empty: a direct chat), through the same
    access policy as a chat question: a refusal ends it at once, and the model is
    offered only that principal's tools there.
    ``new`` forgets the conversation's history first. When the command is
    interrupted (Ctrl-C), ``--json`` still ends with a result line (reason
    ``cancelled``) before the interruption propagates.
    """
    from botgateway.cli.runtime import build_runtime

    out, err = sys.stdout, sys.stderr
    started = time.monotonic()

    if not question.strip():
        message = "the question is empty; usage: botgateway ask \"which server is 10.0.1.100?\""
        if json_mode:
            _emit(out, _result_line(TurnFailed(reason="usage", message=message), _Tally(), _since(started)))
        else:
            print(f"botgateway ask: {message}", file=err)
        return EXIT_FAILED

    tally = _Tally()
    try:
        async with build_runtime(config) as runtime:
            if new:
                await runtime.memory.clear(conversation_id)
            if not json_mode and out.isatty() and not as_principal:
                # On a terminal, draw the same live card a chat platform gets; piped output stays plain.
                from adapters.terminal import render_ask

                return await render_ask(runtime.gateway, config.adapters.terminal, question, conversation_id=conversation_id)
            ctx = _context(config, runtime, conversation_id, as_principal, channel)
            if isinstance(ctx, TurnFailed):
                tally.final = ctx
            else:
                await _stream_turn(runtime, question, ctx, tally, json_mode, out, err, started)
    except asyncio.CancelledError:
        # Ctrl-C: a script reading --json still gets its result line (and the exit status is 130).
        if json_mode:
            ending = tally.final or TurnFailed(
                reason="cancelled", message="interrupted before the turn ended", partial_answer="".join(tally.answer)
            )
            _emit(out, _result_line(ending, tally, _since(started)))
        raise
    except Exception as exc:  # start-up problems (store, tools, endpoint) in plain words, never a traceback
        return _startup_failed(exc, tally, json_mode, out, err, _since(started))

    return _report(tally.final, tally, json_mode, _since(started))


def _since(started: float) -> float:
    """Seconds since ``started`` (monotonic), as the ``t`` of a JSON line."""
    return round(time.monotonic() - started, 3)


def _context(config: Config, runtime: Runtime, conversation_id: str, as_principal: str, channel: str) -> ToolContext | TurnFailed:
    """Who the turn runs as: the local user, or ``as_principal`` with what the policy grants it in ``channel``."""
    if not as_principal:
        user = local_user()
        return ToolContext(user_id=user, user_name=user, platform="cli", conversation_id=conversation_id, chat_id=conversation_id)
    from botgateway.access import Place, decide, effective_policy, refusal_note
    from botgateway.cli.access import parse_principal
    from botgateway.grant import Limits

    try:
        principal = parse_principal(as_principal)
    except ValueError as exc:
        return TurnFailed(reason="usage", message=str(exc))
    limits = config.limits
    decision = decide(
        effective_policy(config.access),
        principal,
        Place(channel=channel or f"{principal.platform}:direct", direct=not channel),
        runtime.tools.names,
        limits=Limits(turns_per_minute=limits.turns_per_minute, concurrent_turns=limits.concurrent_turns,
                      tokens_per_day=limits.tokens_per_day),
        always_approve=runtime.tools.approval_required(),
    )
    if decision.grant is None:
        return TurnFailed(reason="refused", message=refusal_note(decision, "en"))
    return ToolContext(
        user_id=principal.user, user_name=principal.user, platform=principal.platform, conversation_id=conversation_id,
        chat_id=channel.partition(":")[2] if channel else conversation_id, is_group=bool(channel),
        principal=principal, grant=decision.grant,
    )


async def _stream_turn(
    runtime: Runtime,
    question: str,
    ctx: ToolContext,
    tally: _Tally,
    json_mode: bool,
    out: TextIO,
    err: TextIO,
    started: float,
) -> None:
    """Run the turn as ``ctx`` says, printing each event; ``tally.final`` holds how it ended."""
    turn_id = uuid.uuid4().hex
    # Nobody can press Approve here: a call that needs an approval is denied at once instead of waiting.
    async for event in runtime.loop.run_turn(ctx.conversation_id, question, ctx, turn_id=turn_id, approvals=False):
        tally.apply(event)
        if json_mode:
            _emit(out, {**event_to_dict(event), "t": _since(started)})
        else:
            _print_progress(event, err)
        if isinstance(event, (TurnDone, TurnFailed)):
            tally.final = event


def _startup_failed(exc: Exception, tally: _Tally, json_mode: bool, out: TextIO, err: TextIO, t: float) -> int:
    """Report a failure around the turn (start-up or shutdown of the runtime); returns the exit status."""
    if tally.final is not None:
        # The turn ended; only shutting the runtime down failed. Report the turn as it was.
        log.warning("ask_shutdown_failed", error=type(exc).__name__)
        return _report(tally.final, tally, json_mode, t)
    log.error("ask_failed", error=type(exc).__name__)
    log.debug("ask_failed.traceback", exc_info=exc)  # a bug of ours is diagnosable with log.level: debug
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if json_mode:
        _emit(out, _result_line(TurnFailed(reason="internal", message=message), tally, t))
    else:
        print(f"botgateway ask: {message}", file=err)
    return EXIT_FAILED


def _report(final: TurnDone | TurnFailed | None, tally: _Tally, json_mode: bool, t: float) -> int:
    """Print the outcome; returns the exit status."""
    out, err = sys.stdout, sys.stderr
    if json_mode:
        _emit(out, _result_line(final, tally, t))
    elif isinstance(final, TurnDone):
        print(final.result.answer.rstrip(), file=out)
    elif isinstance(final, TurnFailed):
        if final.partial_answer:
            print(final.partial_answer.rstrip(), file=out)
        print(f"botgateway ask: {final.message}", file=err)
    else:
        print("botgateway ask: the turn ended without a result", file=err)
    return EXIT_OK if isinstance(final, TurnDone) else EXIT_FAILED


def _result_line(final: TurnDone | TurnFailed | None, tally: _Tally, t: float) -> dict[str, Any]:
    if isinstance(final, TurnDone):
        result = final.result
        return {
            "kind": "result",
            "ok": True,
            "answer": result.answer,
            "tool_calls": [
                {
                    "call_id": r.call_id,
                    "name": r.name,
                    "arguments": r.arguments,
                    "ok": r.ok,
                    "summary": r.summary,
                    "duration_s": round(r.duration_s, 3),
                    "round": r.round,
                }
                for r in result.tool_calls
            ],
            "usage": _usage_dict(result.usage),
            "rounds": result.rounds,
            "hit_max_rounds": result.hit_max_rounds,
            "error": None,
            "t": t,
        }
    reason, message, partial = ("internal", "the turn ended without a result", "")
    if isinstance(final, TurnFailed):
        reason, message, partial = final.reason, final.message, final.partial_answer
    return {
        "kind": "result",
        "ok": False,
        "answer": partial,
        "tool_calls": list(tally.calls.values()),
        "usage": _usage_dict(tally.usage),
        "rounds": tally.round,
        "hit_max_rounds": False,
        "error": {"reason": reason, "message": message},
        "t": t,
    }


def _print_progress(event: TurnEvent, err: TextIO) -> None:
    """Tool activity on stderr, so stdout carries only the answer."""
    if isinstance(event, ToolCallStarted):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in event.arguments.items())
        print(f"→ {event.name}({args})", file=err, flush=True)
    elif isinstance(event, ToolCallFinished):
        mark = "✓" if event.ok else "✗"
        print(f"{mark} {event.name}: {event.summary} ({event.duration_s:.1f} s)", file=err, flush=True)
        for chart in event.artifacts:  # a terminal shows a chart as its shape; the figures are in the answer
            print(f"📈 {' '.join(chart.title.split())}  {chart.sparkline}".rstrip(), file=err, flush=True)
