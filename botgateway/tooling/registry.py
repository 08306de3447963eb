"""Running calls safely: timeout, permission hook, size cap, and every failure turned into a result the model can read.

Blocking tool functions run on the registry's own bounded pool of daemon
threads (:mod:`.threads`) and are abandoned at their timeout. A tool's
unexpected exception reaches the model and the card as plain words and an
error id (:mod:`botgateway.incidents`); its text goes only to the log.

The registry also remembers recent outcomes by the text the model was sent
(:class:`~botgateway.tooling.contract.RecentOutcomes`), so a model running in
this process (the demo) reads the data behind a tool message instead of
parsing its text. The text sent is :meth:`ToolRegistry.model_text`: the result
inside its provenance delimiters, with the sources its tool named (and their
ages); :meth:`ToolRegistry.recall` takes that text.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
from cachetools import LRUCache

from botgateway.incidents import report_incident
from botgateway.tooling.contract import (
    PermissionHook,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolOutput,
    one_line,
)
from botgateway.tooling.provenance import SOURCE_GATEWAY, SOURCE_TOOL, tool_result_body, wrap_tool_result
from botgateway.tooling.threads import DEFAULT_SYNC_WORKERS, Loan, SyncWorkers, lend

__all__ = [
    "DEFAULT_MAX_CALLS_PER_ROUND",
    "RECENT_OUTCOMES",
    "TRUNCATION_NOTE",
    "ToolRegistry",
    "allow_all",
    "cap_text",
    "parse_arguments",
]

log = structlog.get_logger(__name__)

TRUNCATION_NOTE = "\n[output truncated: {omitted} of {total} characters omitted; narrow the query to see more]"

RECENT_OUTCOMES = 256
"""Outcomes a registry remembers for :meth:`ToolRegistry.recall` (a few turns' worth of calls)."""

DEFAULT_MAX_CALLS_PER_ROUND = 16
"""Calls of one model round that run unless configured (``tools.max_calls_per_round``)."""


def cap_text(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, saying so in a note the model can act on."""
    if len(text) <= limit:
        return text
    note = TRUNCATION_NOTE.format(omitted=len(text) - limit, total=len(text))
    return text[:limit] + note


def parse_arguments(raw_arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    """The arguments object of a call; raises :class:`ToolArgumentError` saying how to fix malformed JSON."""
    if isinstance(raw_arguments, Mapping):
        return dict(raw_arguments)
    text = (raw_arguments or "").strip() or "{}"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object") from None
    if not isinstance(parsed, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    return parsed


async def allow_all(tool: Tool, ctx: ToolContext) -> str | None:
    """The default permission hook: every caller may use every tool."""
    return None


class ToolRegistry:
    """The set of tools offered to the model, and the safe way to run them.

    It is also the :class:`RecentOutcomes` of the calls it ran.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        default_timeout_s: float = 30.0,
        max_result_chars: int = 8000,
        permission: PermissionHook = allow_all,
        recent_outcomes: int = RECENT_OUTCOMES,
        sync_workers: int = DEFAULT_SYNC_WORKERS,
        max_calls_per_round: int = DEFAULT_MAX_CALLS_PER_ROUND,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``wall_clock`` (Unix time) dates the model-facing ages of sources."""
        if max_calls_per_round < 1:
            raise ValueError("max_calls_per_round must be at least 1")
        self._tools: dict[str, Tool] = {}
        self.default_timeout_s = default_timeout_s
        self.max_result_chars = max_result_chars
        self.permission = permission
        self.max_calls_per_round = max_calls_per_round
        """Calls of one model round that run; the round's later calls fail with :meth:`over_cap`."""
        self._wall_clock = wall_clock
        self._workers = SyncWorkers(sync_workers)
        self._recent: LRUCache[str, ToolOutcome] = LRUCache(maxsize=max(1, recent_outcomes))
        for t in tools:
            self.add(t)

    def close(self) -> None:
        """Stop the threads of blocking tools: waiting calls are dropped, running ones are not waited for."""
        self._workers.close()

    def add(self, tool: Tool) -> None:
        """Offer ``tool`` to the model; a later tool of the same name replaces it."""
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        """Stop offering the tool called ``name`` (no error if absent)."""
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if offered."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Names of the offered tools, in registration order."""
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def approval_required(self) -> frozenset[str]:
        """Names of the tools that ask for an approval of every call themselves (``needs_approval``: MCP tools
        annotated destructive and not read-only), whatever ``access.approvals`` lists."""
        return frozenset(name for name, tool in self._tools.items() if getattr(tool, "needs_approval", False) is True)

    def read_only_names(self) -> frozenset[str]:
        """Names of the tools that say they only look things up (``read_only`` is True): what an unattended turn
        (an alert's investigation, a scheduled report) may be offered."""
        return frozenset(name for name, tool in self._tools.items() if getattr(tool, "read_only", False) is True)

    def specs(self, ctx: ToolContext | None = None) -> list[dict[str, Any]]:
        """The tools in the OpenAI ``tools`` request format; only those ``ctx``'s asker may use, when given."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in self._tools.values()
            if ctx is None or ctx.may_use(t.name)
        ]

    def recall(self, content: str) -> ToolOutcome | None:
        """The outcome of a recent call whose model-facing text is exactly ``content``; ``None`` when not remembered.

        Keyed by the text rather than the call id because the text is what the
        model was sent: whoever holds a tool message finds the data behind it,
        whatever ids the model or the loop chose. Equal texts render equal data.
        ``content`` may be the delimited text of :meth:`model_text` or the bare result.
        """
        return self._recent.get(tool_result_body(content))

    def model_text(self, outcome: ToolOutcome, *, tool: str, call_id: str) -> str:
        """What the model reads of ``outcome``: the result as data, delimited and labelled with its provenance
        (who wrote it, and where its data came from and how old it is now)."""
        return wrap_tool_result(
            outcome.content, tool=tool, call_id=call_id, source=outcome.source, sources=outcome.sources,
            now=self._wall_clock(),
        )

    async def execute(self, name: str, raw_arguments: str | Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run one call. Never raises except on cancellation: failures become error outcomes."""
        started = time.monotonic()
        arguments: dict[str, Any] = {}
        try:
            arguments = parse_arguments(raw_arguments)
            output = await self._run(name, arguments, ctx)
        except ToolError as exc:
            outcome = self.failure(str(exc) or type(exc).__name__, arguments=arguments, duration_s=time.monotonic() - started)
        else:
            outcome = ToolOutcome(
                ok=True,
                content=cap_text(output.content, self.max_result_chars),
                summary=one_line(output.summary, 120),
                duration_s=time.monotonic() - started,
                arguments=arguments,
                data=output.data,
                source=SOURCE_TOOL,
                sources=output.sources,
                artifacts=output.artifacts,
            )
        self._recent[outcome.content] = outcome
        return outcome

    def failure(self, reason: str, *, arguments: Mapping[str, Any] | None = None, duration_s: float = 0.0) -> ToolOutcome:
        """The failed outcome that tells the model (``Error: reason``) and the card (``reason``) why a call did not work."""
        return ToolOutcome(
            ok=False,
            content=cap_text(f"Error: {reason}", self.max_result_chars),
            summary=one_line(reason, 120),
            duration_s=duration_s,
            arguments=dict(arguments or {}),
            error=reason,
            source=SOURCE_GATEWAY,
        )

    def over_cap(self, arguments: Mapping[str, Any] | None = None) -> ToolOutcome:
        """The outcome of a call past :attr:`max_calls_per_round`: not run, and the model told how to go on."""
        limit = self.max_calls_per_round
        return self.failure(f"not run: at most {limit} tool calls per round; call again with fewer", arguments=arguments)

    async def _run(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Find, check and invoke the tool; every failure is raised as a :class:`ToolError` in the model's words."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(n for n in self._tools if ctx.may_use(n)) or "none"
            raise ToolError(f"unknown tool {name!r}; available tools: {known}")
        if not ctx.may_use(name):
            # The model was never offered it; a call anyway (a guess, an injected instruction) is refused again here.
            raise ToolError(f"not allowed: {name!r} is not offered to this asker in this channel")
        await self._check_permission(tool, ctx)
        timeout = tool.timeout_s if tool.timeout_s is not None else self.default_timeout_s
        with lend(self._workers) as loan:
            try:
                async with asyncio.timeout(timeout):
                    return await tool.invoke(arguments, ctx)
            except TimeoutError:
                raise ToolError(self._timed_out(timeout, loan)) from None
            except ToolError:
                raise
            except Exception as exc:
                # A tool bug must not end the turn; its text (hosts, even passwords) is for the log only.
                incident = report_incident(log, "tool.crashed", exc, reason="the tool failed unexpectedly", tool=name)
                raise ToolError(incident.reason) from None

    def _timed_out(self, timeout: float, loan: Loan) -> str:
        """Why a call timed out, saying whether a blocking call still runs in its thread."""
        if loan.fate == "abandoned":
            return f"timed out after {timeout:g} s; the call was abandoned (it may still be running)"
        if loan.fate == "never_started":
            busy = self._workers.max_workers
            return f"timed out after {timeout:g} s before it could start (all {busy} tools.sync_workers were busy)"
        return f"timed out after {timeout:g} s"

    async def _check_permission(self, tool: Tool, ctx: ToolContext) -> None:
        try:
            refusal = await self.permission(tool, ctx)
        except Exception as exc:
            # A broken policy must refuse, never allow, and never end the turn.
            log.exception("tool.permission_check_failed", tool=tool.name, error=type(exc).__name__)
            raise ToolError("not allowed: the permission check failed") from None
        if refusal is not None:
            raise ToolError(f"not allowed: {refusal}")
