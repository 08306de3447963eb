"""The eval suite's report: the numbers over every case run, printed as tables or written as JSON.

Pass rate overall and per tag, tool calls per case, tokens (total and mean)
and latency (p50/p95, nearest rank), then each failed case with what its
answer missed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from botgateway.cli import tables
from botgateway.cli.eval_cases import Case, Verdict

__all__ = ["CaseRun", "Summary", "percentile", "print_report", "report_json", "summarize"]


@dataclass(frozen=True)
class CaseRun:
    """What one case's turn did, and how it scored."""

    case: Case
    """The case."""
    answer: str
    """The answer (the partial answer when the turn failed)."""
    tool_calls: tuple[str, ...]
    """Names of the tools called, in order."""
    prompt_tokens: int
    """Prompt tokens of every round (UsageReported events)."""
    completion_tokens: int
    """Completion tokens of every round."""
    latency_s: float
    """From the question to the turn's end."""
    verdict: Verdict
    """The score."""

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Summary:
    """The numbers over a run."""

    cases: int
    """Cases run."""
    passed: int
    """Cases passed."""
    by_tag: tuple[tuple[str, int, int], ...]
    """``(tag, passed, cases)`` per tag, by tag name."""
    tool_calls_mean: float
    """Tool calls per case."""
    tokens_total: int
    """Tokens of every case."""
    tokens_mean: float
    """Tokens per case."""
    latency_p50_s: float
    """Median latency."""
    latency_p95_s: float
    """95th percentile latency."""

    @property
    def pass_rate(self) -> float:
        """Passed over run (0 with no case)."""
        return self.passed / self.cases if self.cases else 0.0


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank ``pct`` percentile of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def summarize(runs: Sequence[CaseRun]) -> Summary:
    """The numbers over ``runs``."""
    count = len(runs)
    tags: dict[str, list[int]] = {}
    for run in runs:
        for tag in run.case.tags:
            counts = tags.setdefault(tag, [0, 0])
            counts[0] += run.verdict.passed
            counts[1] += 1
    tokens = sum(run.tokens for run in runs)
    latencies = [run.latency_s for run in runs]
    return Summary(
        cases=count, passed=sum(run.verdict.passed for run in runs),
        by_tag=tuple((tag, counts[0], counts[1]) for tag, counts in sorted(tags.items())),
        tool_calls_mean=sum(len(run.tool_calls) for run in runs) / count if count else 0.0,
        tokens_total=tokens, tokens_mean=tokens / count if count else 0.0,
        latency_p50_s=percentile(latencies, 50), latency_p95_s=percentile(latencies, 95),
    )


def _pct(passed: int, total: int) -> str:
    return f"{100 * passed / total:.0f}%" if total else "-"


def print_report(summary: Summary, runs: Sequence[CaseRun], model: str, out: TextIO) -> None:
    """The pass rate per tag, the overall numbers, then the failed cases with what they missed."""
    tables.print_table(
        out, f"Eval of {model}: pass rate per tag", ("tag", "passed", "cases", "rate"),
        ([tag, str(passed), str(total), _pct(passed, total)] for tag, passed, total in summary.by_tag),
        footer=["all", str(summary.passed), str(summary.cases), _pct(summary.passed, summary.cases)],
        right=("passed", "cases", "rate"),
    )
    tables.print_table(
        out, "Totals", ("pass rate", "tool calls/case", "tokens", "tokens/case", "p50 latency", "p95 latency"),
        [[_pct(summary.passed, summary.cases), f"{summary.tool_calls_mean:.2f}", str(summary.tokens_total),
          f"{summary.tokens_mean:.0f}", f"{summary.latency_p50_s:.2f} s", f"{summary.latency_p95_s:.2f} s"]],
    )
    failed = [run for run in runs if not run.verdict.passed]
    if failed:
        tables.print_table(
            out, f"Failed cases: {len(failed)}", ("case", "tags", "why", "tools called"),
            ([run.case.id, ", ".join(run.case.tags), "; ".join(run.verdict.reasons()), ", ".join(run.tool_calls) or "-"]
             for run in failed),
        )


def report_json(summary: Summary, runs: Sequence[CaseRun], model: str) -> dict[str, Any]:
    """The whole report as one JSON-ready object: the numbers, then every case with its answer."""
    return {
        "model": model,
        "cases": summary.cases,
        "passed": summary.passed,
        "pass_rate": round(summary.pass_rate, 4),
        "by_tag": {tag: {"passed": passed, "cases": total} for tag, passed, total in summary.by_tag},
        "tool_calls_mean": round(summary.tool_calls_mean, 3),
        "tokens_total": summary.tokens_total,
        "tokens_mean": round(summary.tokens_mean, 1),
        "latency_p50_s": round(summary.latency_p50_s, 3),
        "latency_p95_s": round(summary.latency_p95_s, 3),
        "results": [
            {
                "id": run.case.id, "tags": list(run.case.tags), "file": run.case.source, "passed": run.verdict.passed,
                "question": run.case.question, "answer": run.answer, "tool_calls": list(run.tool_calls),
                "prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
                "latency_s": round(run.latency_s, 3), "missing_facts": list(run.verdict.missing_facts),
                "unwanted_facts": list(run.verdict.unwanted_facts), "missing_tools": list(run.verdict.missing_tools),
                "error": run.verdict.error,
            }
            for run in runs
        ],
    }
