"""The demo model's turn logic: one streamed reply per chat-completions request.

A request is answered in one of four ways, as a small tool-using model would:
a history summary when memory asks for one; a widened search when the
per-provider lookups found nothing; the answer when tool results are in; else
the first round, which calls the lookup tools for what the question names (or
explains what the demo can do when it names nothing).

Estate questions ("what's behind api.example.com?", "who stopped prod-db-03?")
go to the estate tools when the request offers them
(:mod:`tools.demo.estate_planning`); questions about servers go to the server
tools first, as they always did. "How is prod-db-01 doing?" reads the host's metrics with
``resource_metrics`` when offered (:mod:`tools.demo.metric_questions`) and answers with the figures
(:mod:`tools.demo.metric_answers`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from botgateway.tooling import RecentOutcomes
from tools.demo import script as ss
from tools.demo.answers import (
    compose_answer,
    compose_help,
    compose_thought,
    help_thought,
    results_thought,
    widen_thought,
)
from tools.demo.estate_answers import compose_estate_answer, estate_results_thought, estate_thought
from tools.demo.estate_findings import read_estate_findings
from tools.demo.estate_planning import plan_estate_calls
from tools.demo.estate_questions import EstateAsk, read_estate_question
from tools.demo.findings import read_findings
from tools.demo.metric_answers import (
    compose_metric_answer,
    metric_results_thought,
    metric_thought,
    read_metric_findings,
)
from tools.demo.metric_questions import MetricAsk, plan_metric_calls, read_metric_question
from tools.demo.planning import PlannedCall, offered_tools, plan_tool_calls, widen_search
from tools.demo.question import Lookup, analyze_question, is_chinese, last_user_text, since_last_question
from tools.demo.summary import compose_summary, is_summary_request

__all__ = ["CHARS_PER_CHUNK", "CHUNK_DELAY_S", "DemoResponder", "HostDirectory"]

CHARS_PER_CHUNK = 4
"""Characters per streamed chunk: small enough that the card visibly types."""
CHUNK_DELAY_S = 0.03
"""Pause between chunks (~130 characters a second, a brisk real model)."""


class HostDirectory(Protocol):
    """Where the demo learns the host names it recognises in a question (the static inventory)."""

    def host_names(self) -> list[str]:
        """Every known host name."""
        ...


@dataclass(frozen=True, kw_only=True)
class _Round:
    """What one reply streams after the role chunk."""

    chunks: list[ss.Chunk]
    """Reasoning, then answer text or tool calls."""
    finish: str
    """``stop`` or ``tool_calls``."""
    completion_tokens: int
    """Estimated tokens of what was generated."""


def _estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return max(1, len(text) // 4)


class DemoResponder:
    """Decides the demo model's streamed reply to one chat-completions request."""

    def __init__(
        self,
        *,
        outcomes: RecentOutcomes | None = None,
        hosts: HostDirectory | None = None,
        chunk_chars: int = CHARS_PER_CHUNK,
        delay_s: float = CHUNK_DELAY_S,
    ) -> None:
        self.outcomes = outcomes
        """The registry's recent outcomes: the data behind each tool message (without it, results are quoted)."""
        self.hosts = hosts
        """Known host names, so a bare name ("bastion") is looked up too."""
        self.chunk_chars = chunk_chars
        """Characters per answer chunk (reasoning chunks are twice as long)."""
        self.delay_s = delay_s
        """Pause before every chunk."""
        self._call_seq = 0

    def __call__(self, body: Mapping[str, Any]) -> ss.Script:
        """The script answering ``body`` (an OpenAI chat-completions request)."""
        messages = body.get("messages") or []
        if is_summary_request(messages):
            return ss.Script(chunks=[ss.role_chunk(), *ss.text_chunks(compose_summary(messages), size=64), ss.finish_chunk("stop")])
        reply = self._reply(messages, offered_tools(body))
        prompt_tokens = _estimate_tokens(messages) + _estimate_tokens(body.get("tools") or [])
        chunks = [ss.role_chunk(), *reply.chunks, ss.finish_chunk(reply.finish), ss.usage_chunk(prompt_tokens, reply.completion_tokens)]
        return ss.Script(chunks=chunks, delay_s=self.delay_s)

    def _reply(self, messages: Sequence[Mapping[str, Any]], tools: Mapping[str, Mapping[str, Any]]) -> _Round:
        question = last_user_text(messages)
        zh = is_chinese(question)
        known = self.hosts.host_names() if self.hosts is not None else ()
        lookup = analyze_question(question, known)
        ask = read_estate_question(question, known)
        metric = read_metric_question(question, known)
        since_question = since_last_question(messages)
        if not any(m.get("role") == "tool" for m in since_question):
            return self._first_round(lookup, ask, metric, tools, zh)
        numbers = read_metric_findings(messages, self.outcomes)
        if numbers.called:
            return self._answer(metric_results_thought(zh), compose_metric_answer(metric, numbers, zh))
        estate = read_estate_findings(messages, self.outcomes)
        if estate.called:
            return self._answer(estate_results_thought(zh), compose_estate_answer(ask, estate, zh))
        findings = read_findings(messages, self.outcomes)
        widen = None if findings.hosts else widen_search(lookup, tools, since_question)
        if widen is not None:
            return self._call(widen_thought(zh), [widen], widened=True)
        return self._answer(results_thought(zh), compose_answer(question, findings, zh))

    def _first_round(
        self, lookup: Lookup, ask: EstateAsk | None, metric: MetricAsk | None, tools: Mapping[str, Mapping[str, Any]],
        zh: bool,
    ) -> _Round:
        """Call the tools that answer the question: the metrics for how a resource is doing, the server tools for
        servers, the estate tools for the rest."""
        metric_calls = plan_metric_calls(metric, tools) if metric is not None and tools else []
        if metric_calls and metric is not None:
            return self._call(metric_thought(metric, zh), metric_calls)
        server_calls = plan_tool_calls(lookup, tools) if tools else []
        estate_calls = plan_estate_calls(ask, tools) if ask is not None and tools else []
        # a server question keeps today's server lookups; anything else prefers the estate tools when offered
        server_first = ask is None or ask.server_asked
        if server_calls and (server_first or not estate_calls):
            return self._call(compose_thought(lookup, server_calls, zh), server_calls)
        if estate_calls and ask is not None:
            return self._call(estate_thought(ask, estate_calls, zh), estate_calls)
        return self._answer(help_thought(zh), compose_help(tools, zh))

    def _call(self, thought: str, calls: Sequence[PlannedCall], *, widened: bool = False) -> _Round:
        """Reason, then call ``calls`` in one round."""
        planned = []
        for name, args in calls:
            self._call_seq += 1
            planned.append((f"call_demo_{self._call_seq}", name, args))
        chunks = ss.reasoning_chunks(thought, size=self.chunk_chars * 2) + ss.tool_call_chunks(planned)
        # A widened search is counted without its call id, as it always was: the usage a user sees stays the same.
        counted = calls[0] if widened else planned
        return _Round(chunks=chunks, finish="tool_calls", completion_tokens=_estimate_tokens(thought) + _estimate_tokens(counted))

    def _answer(self, thought: str, answer: str) -> _Round:
        """Reason, then stream ``answer``."""
        chunks = ss.reasoning_chunks(thought, size=self.chunk_chars * 2) + ss.text_chunks(answer, size=self.chunk_chars)
        return _Round(chunks=chunks, finish="stop", completion_tokens=_estimate_tokens(thought + answer))
