"""The floor: how fast answers *could* be complete if every call were spent perfectly within the limits.

A :class:`Plan` is the minimum set of calls one answer needs in some strategy
(edit mode: a placeholder ``chat.postMessage`` when the mention arrives and one
final ``chat.update`` when generation ends). :func:`floor` schedules every
answer's calls of a scenario as early as the platform's windows allow (each
call at its ready time or as soon as its window has room, in order of
readiness) and returns each answer's completion time after its mention. No
live update is counted, so the floor is a lower bound for any strategy that
makes those calls; a strategy that streams live text needs more.

The report prints two numbers per plan: *calls ÷ rate* (seconds of budget
the calls need on the busiest limit) and the floor latencies (p50/p95/max),
to set beside the measured ones and the goals.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.stats import summarize


@dataclass(frozen=True)
class Limit:
    """At most ``calls`` accepted calls in any ``seconds`` window (the fakes' sliding windows)."""

    calls: int
    """Calls allowed per window."""
    seconds: float
    """Window length."""
    per_channel: bool = False
    """Counted per channel (Slack's ``chat.postMessage``) instead of per workspace/app."""

    @property
    def rate_per_s(self) -> float:
        """Long-run calls per second."""
        return self.calls / self.seconds


@dataclass(frozen=True)
class PlanCall:
    """One call an answer needs."""

    limit: str
    """The name of the limit it draws from (a key of the scenario's limits)."""
    at_end: bool
    """Ready when generation ends (a final call), else when the mention arrives."""
    label: str = ""
    """The method, as shown in the report (defaults to ``limit``)."""


@dataclass(frozen=True)
class Plan:
    """The calls one answer needs in some strategy, in order."""

    name: str
    """Short name (``edit``)."""
    calls: tuple[PlanCall, ...]
    """The calls, in the order they must happen."""

    def describe(self) -> str:
        """``1 chat.postMessage + 1 chat.update per answer``."""
        counts: dict[str, int] = defaultdict(int)
        for call in self.calls:
            counts[call.label or call.limit] += 1
        return " + ".join(f"{n} {label}" for label, n in counts.items()) + " per answer"


def schedule(plan: Plan, limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int], gen_s: float) -> list[float]:
    """Each answer's completion time minus its arrival, with every call as early as the limits allow."""
    accepted: dict[tuple[str, int], list[float]] = defaultdict(list)
    done = [0.0] * len(arrivals)
    heap: list[tuple[float, int, int, int]] = []  # (ready, sequence, answer, call index)
    sequence = 0
    for i, arrival in enumerate(arrivals):
        ready = arrival + (gen_s if plan.calls[0].at_end else 0.0)
        heap.append((ready, sequence, i, 0))
        sequence += 1
    heapq.heapify(heap)
    while heap:
        ready, _, i, k = heapq.heappop(heap)
        call = plan.calls[k]
        limit = limits.get(call.limit)
        at = ready
        if limit is not None:
            times = accepted[(call.limit, channels[i] if limit.per_channel else -1)]
            if times:
                at = max(at, times[-1])
            if len(times) >= limit.calls:
                at = max(at, times[-limit.calls] + limit.seconds)
            times.append(at)
        if k + 1 < len(plan.calls):
            nxt = plan.calls[k + 1]
            heapq.heappush(heap, (max(at, arrivals[i] + (gen_s if nxt.at_end else 0.0)), sequence, i, k + 1))
            sequence += 1
        else:
            done[i] = at - arrivals[i]
    return done


def calls_over_rate(plan: Plan, limits: dict[str, Limit], n: int, channels: Sequence[int]) -> tuple[float, str]:
    """Seconds of budget the plan's calls need on its busiest limit (calls ÷ rate), and that limit's name."""
    worst, name = 0.0, ""
    for limit_name in {c.limit for c in plan.calls}:
        limit = limits.get(limit_name)
        if limit is None:
            continue
        per_answer = sum(1 for c in plan.calls if c.limit == limit_name)
        calls = per_answer * (max(_per_channel_counts(channels).values()) if limit.per_channel else n)
        seconds = calls / limit.rate_per_s
        if seconds > worst:
            worst, name = seconds, limit_name
    return worst, name


def _per_channel_counts(channels: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for channel in channels:
        counts[channel] += 1
    return counts or {0: 0}


def floor(plan: Plan, limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int], gen_s: float) -> dict[str, Any]:
    """The plan's floor for a scenario: calls ÷ rate, and completion latency percentiles of the best schedule."""
    latencies = schedule(plan, limits, arrivals, channels, gen_s)
    budget_s, busiest = calls_over_rate(plan, limits, len(arrivals), channels)
    return {
        "plan": plan.name,
        "calls": plan.describe(),
        "calls_over_rate_s": budget_s,
        "busiest_limit": busiest,
        "complete_s": summarize(latencies),
    }


SLACK_PLANS: dict[str, tuple[Plan, ...]] = {
    "edit": (
        Plan("edit", (PlanCall("chat.postMessage", False), PlanCall("chat.update", True))),
        Plan("one message", (PlanCall("chat.postMessage", True),)),
    ),
    "auto": (
        Plan("native", (PlanCall("chat.startStream", False), PlanCall("chat.stopStream", True))),
        Plan("edit", (PlanCall("chat.postMessage", False), PlanCall("chat.update", True))),
        Plan("one message", (PlanCall("chat.postMessage", True),)),
    ),
}
"""Per Slack streaming mode, the plans whose floors the report shows (the mode's own first)."""

DINGTALK_PLANS: tuple[Plan, ...] = (
    Plan("card", (PlanCall("card", False, "card create"), PlanCall("card", True, "card stream (final)"))),
    Plan("markdown reply", (PlanCall("message", True, "session-webhook message"),)),
)
"""DingTalk: an AI card (create + final update, one app-wide QPS budget) or one markdown reply."""


def slack_limits(post_burst: int) -> dict[str, Limit]:
    """Slack's published limits, as the fake enforces them."""
    return {
        "chat.update": Limit(50, 60.0),
        "chat.delete": Limit(50, 60.0),
        "chat.startStream": Limit(20, 60.0),
        "chat.stopStream": Limit(20, 60.0),
        "chat.appendStream": Limit(100, 60.0),
        "chat.postMessage": Limit(post_burst, float(post_burst), per_channel=True),
    }


def dingtalk_limits(qps: int) -> dict[str, Limit]:
    """DingTalk's card APIs: ``qps`` calls per sliding second for the whole app (messages are not limited by the fake)."""
    return {"card": Limit(qps, 1.0)}
