"""The floor: the earliest each answer of a scenario can be complete, counting only what is physical.

What is physical, and so in the floor (the rest is ours):

- **generation**: an answer's last character exists ``gen_s`` after its question (the bench's model keeps to that
  pace whoever asks), so a call that carries the whole answer waits for it;
- **the platform's limits**, exactly as the fakes enforce them: sliding windows of at most ``calls`` accepted calls
  in any ``seconds``, per workspace/app or per channel (:class:`Limit`). On Slack a channel takes about one new
  message a second with short bursts, whatever method makes it (``chat.postMessage``, and ``chat.startStream``
  when stream starts are counted), beside each method's workspace tier; DingTalk's card APIs share 20 calls a
  second for the whole app;
- **the round trip**: a call's effect is visible ``latency_s`` after it is made, and an answer's next call waits
  for the previous one's reply (it needs the message's ``ts`` or the card's id).

A :class:`Plan` is the calls one answer needs in some strategy (edit mode: a placeholder ``chat.postMessage`` at
the question and one final ``chat.update`` once generation ended). :func:`best_schedule` serves the answers in
arrival order, an earlier question never waiting for a later one's slot: each answer takes, of the plans given,
the one that completes it earliest with the slots the answers before it took, and each of its calls goes at the
earliest moment every window it draws from has room. So, for example:

- N answers at once in **one Slack channel** (3 messages per 3 s): the k-th answer's message slot is at
  ``3 * (k // 3)`` s, so it completes at ``max(gen, slot_k + rtt) + rtt`` (its placeholder in the slot, its final
  update when generation ends; or one finished message in the first slot after generation ended);
- **DingTalk N=100** at 20 calls a second: 100 card creations take the windows of 0–4 s, and the 100 finals can
  go only once generation ended, 20 a second from ``gen``: the last 20 at ``gen + 4 s`` (+ a round trip). Calls
  ÷ rate says the same from the other side: 200 calls at 20 QPS need 10 s of budget;
- **Slack N=100, one channel each**, auto mode: 20 native streams (Tier 2: 20 a minute), 50 edits (Tier 3), and
  the other answers one finished message each in their own channel: every answer at ``gen + rtt``.

A floor counts no live update: it is the floor of any strategy making those calls, and streaming text live costs
more calls. :func:`scenario_floor` gives each plan's floor alone and the scenario's floor, the lowest p95 of the
mixed schedule and the plans alone, with every answer's own floor (the incident scenario judges each answer
against its own). The report prints *calls ÷ rate* too: the seconds of budget a plan's calls need on its busiest
limit.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.stats import summarize

__all__ = [
    "CHANNEL", "DINGTALK_PLANS", "Limit", "Plan", "PlanCall", "best_schedule", "calls_over_rate", "dingtalk_limits",
    "floor", "ratio", "scenario_floor", "schedule", "slack_limits", "slack_plans",
]

CHANNEL = "channel messages"
"""The limit of a Slack channel's new messages, whatever method makes them."""
_EPS = 1e-9
"""Float slack when a call lands exactly one window after another (the fakes drop it from the window then)."""


@dataclass(frozen=True)
class Limit:
    """At most ``calls`` accepted calls in any ``seconds`` window (the fakes' sliding windows)."""

    calls: int
    """Calls allowed per window."""
    seconds: float
    """Window length."""
    per_channel: bool = False
    """Counted per channel (a Slack channel's new messages) instead of per workspace/app."""

    @property
    def rate_per_s(self) -> float:
        """Long-run calls per second."""
        return self.calls / self.seconds


@dataclass(frozen=True)
class PlanCall:
    """One call an answer needs."""

    limits: tuple[str, ...]
    """The limits it draws a slot from (names of the scenario's limits; an unknown name limits nothing)."""
    at_end: bool
    """Ready when generation ends (a final call), else when the question arrives."""
    label: str = ""
    """The method, as shown in the report (defaults to the first limit's name)."""


@dataclass(frozen=True)
class Plan:
    """The calls one answer needs in some strategy, in order."""

    name: str
    """Short name (``edit``)."""
    calls: tuple[PlanCall, ...]
    """The calls, in the order they must happen."""
    in_floor: bool = True
    """Part of the scenario's floor; False: shown beside it only (DingTalk's markdown reply is not a card)."""

    def describe(self) -> str:
        """``1 chat.postMessage + 1 chat.update per answer``."""
        counts: dict[str, int] = defaultdict(int)
        for call in self.calls:
            counts[call.label or call.limits[0]] += 1
        return " + ".join(f"{n} {label}" for label, n in counts.items()) + " per answer"


class _Windows:
    """The slots taken so far, per limit and scope, sorted by time."""

    def __init__(self, limits: dict[str, Limit]) -> None:
        self._limits = limits
        self._taken: dict[tuple[str, int], list[float]] = defaultdict(list)

    def copy(self) -> _Windows:
        twin = _Windows(self._limits)
        twin._taken = defaultdict(list, {key: list(times) for key, times in self._taken.items()})
        return twin

    def earliest(self, names: Sequence[str], channel: int, ready: float) -> float:
        """The earliest moment from ``ready`` at which every limit of ``names`` takes one more call."""
        at = ready
        while True:
            later = max([at, *(self._earliest_one(name, channel, at) for name in names)])
            if later <= at:
                return at
            at = later

    def take(self, names: Sequence[str], channel: int, at: float) -> None:
        for name in names:
            if name in self._limits:
                bisect.insort(self._taken[self._key(name, channel)], at)

    def _key(self, name: str, channel: int) -> tuple[str, int]:
        return name, channel if self._limits[name].per_channel else -1

    def _earliest_one(self, name: str, channel: int, ready: float) -> float:
        limit = self._limits.get(name)
        if limit is None:
            return ready
        taken = self._taken[self._key(name, channel)]
        # A call fits at ``ready`` or just as an earlier one leaves its window.
        for at in [ready, *sorted(t + limit.seconds for t in taken if t + limit.seconds > ready)]:
            if _fits(taken, limit, at):
                return at
        return math.inf  # unreachable: past every window there is room


def _fits(taken: list[float], limit: Limit, at: float) -> bool:
    """Whether one more call at ``at`` keeps every window ending at a call within ``limit``."""
    def count(end: float) -> int:  # calls in (end - seconds, end], the new one included
        inside = bisect.bisect_right(taken, end) - bisect.bisect_right(taken, end - limit.seconds + _EPS)
        return inside + 1

    if count(at) > limit.calls:
        return False
    later = taken[bisect.bisect_right(taken, at): bisect.bisect_left(taken, at + limit.seconds - _EPS)]
    return all(count(end) <= limit.calls for end in later)


def _place(plan: Plan, windows: _Windows, arrival: float, channel: int, gen_s: float, latency_s: float) -> float:
    """Put one answer's calls in ``windows``; when its last call is visible."""
    visible = arrival
    for call in plan.calls:
        at = windows.earliest(call.limits, channel, max(visible, arrival + (gen_s if call.at_end else 0.0)))
        windows.take(call.limits, channel, at)
        visible = at + latency_s
    return visible


def best_schedule(plans: Sequence[Plan], limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int],
                  gen_s: float, latency_s: float = 0.0) -> tuple[list[float], list[str]]:
    """Per answer, its completion minus its arrival and the plan it took: answers in arrival order, each with the
    plan (of ``plans``, the first on ties) that completes it earliest after the answers before it."""
    windows = _Windows(limits)
    done = [0.0] * len(arrivals)
    taken = [""] * len(arrivals)
    for i in sorted(range(len(arrivals)), key=lambda j: (arrivals[j], j)):
        best: tuple[float, int, _Windows] | None = None
        for index, plan in enumerate(plans):
            trial = windows.copy()
            end = _place(plan, trial, arrivals[i], channels[i], gen_s, latency_s)
            if best is None or end < best[0] - _EPS:
                best = (end, index, trial)
        assert best is not None, "no plan"
        done[i], taken[i], windows = best[0] - arrivals[i], plans[best[1]].name, best[2]
    return done, taken


def schedule(plan: Plan, limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int], gen_s: float,
             latency_s: float = 0.0) -> list[float]:
    """Each answer's completion minus its arrival when every answer follows ``plan``."""
    return best_schedule((plan,), limits, arrivals, channels, gen_s, latency_s)[0]


def calls_over_rate(plan: Plan, limits: dict[str, Limit], n: int, channels: Sequence[int]) -> tuple[float, str]:
    """Seconds of budget the plan's calls need on its busiest limit (calls ÷ rate), and that limit's name."""
    worst, busiest = 0.0, ""
    per_channel = max(_per_channel_counts(channels).values())
    for name in dict.fromkeys(name for call in plan.calls for name in call.limits):
        limit = limits.get(name)
        if limit is None:
            continue
        per_answer = sum(1 for call in plan.calls if name in call.limits)
        seconds = per_answer * (per_channel if limit.per_channel else n) / limit.rate_per_s
        if seconds > worst:
            worst, busiest = seconds, name
    return worst, busiest


def _per_channel_counts(channels: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for channel in channels:
        counts[channel] += 1
    return counts or {0: 0}


def floor(plan: Plan, limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int], gen_s: float,
          latency_s: float = 0.0) -> dict[str, Any]:
    """One plan's floor for a scenario: calls ÷ rate, and the completion percentiles of its best schedule."""
    latencies = schedule(plan, limits, arrivals, channels, gen_s, latency_s)
    budget_s, busiest = calls_over_rate(plan, limits, len(arrivals), channels)
    return {"plan": plan.name, "calls": plan.describe(), "in_floor": plan.in_floor, "calls_over_rate_s": budget_s,
            "busiest_limit": busiest, "complete_s": summarize(latencies), "per_answer": latencies}


def scenario_floor(plans: Sequence[Plan], limits: dict[str, Limit], arrivals: Sequence[float], channels: Sequence[int],
                   gen_s: float, latency_s: float = 0.0) -> dict[str, Any]:
    """Each plan's floor (``plans``) and the scenario's (``best``): the lowest p95 of the plans of the floor mixed
    (each answer its earliest, :func:`best_schedule`) and each alone, with every answer's own floor."""
    each = [floor(plan, limits, arrivals, channels, gen_s, latency_s) for plan in plans]
    ours = [plan for plan in plans if plan.in_floor]
    mixed, taken = best_schedule(ours, limits, arrivals, channels, gen_s, latency_s)
    used = {name: taken.count(name) for name in dict.fromkeys(taken)}
    name = " + ".join(f"{plan} ×{k}" for plan, k in used.items()) if len(used) > 1 else ours[0].name
    candidates: list[tuple[str, list[float]]] = [(name, mixed)]
    candidates += [(f["plan"], f["per_answer"]) for f in each if f["in_floor"]]
    summaries = [summarize(latencies) for _, latencies in candidates]
    pick = min(range(len(candidates)), key=lambda k: (summaries[k]["p95"], summaries[k]["p50"]))
    best = {"plan": candidates[pick][0], "complete_s": summaries[pick], "per_answer": candidates[pick][1]}
    return {"plans": each, "best": {**best, "gen_s": gen_s, "latency_s": latency_s}}


def ratio(figure: float | None, floor_s: float | None) -> float | None:
    """``figure ÷ floor`` (how many times the floor it took); None when either is missing, +inf for a failure."""
    if figure is None or floor_s is None or floor_s <= 0:
        return None
    return figure / floor_s


def slack_plans(mode: str, *, stream_starts_counted: bool = True) -> tuple[Plan, ...]:
    """The plans of a Slack ``streaming`` mode, its own first: ``edit`` (placeholder + final update) and ``one
    message`` (the finished answer, nothing live); ``auto`` also ``native`` (start + stop a stream; the start is one
    of its channel's new messages when ``stream_starts_counted``)."""
    edit = Plan("edit", (PlanCall((CHANNEL,), False, "chat.postMessage"), PlanCall(("chat.update",), True, "chat.update")))
    one = Plan("one message", (PlanCall((CHANNEL,), True, "chat.postMessage"),))
    if mode == "edit":
        return edit, one
    start = ("chat.startStream", CHANNEL) if stream_starts_counted else ("chat.startStream",)
    native = Plan("native", (PlanCall(start, False, "chat.startStream"), PlanCall(("chat.stopStream",), True, "chat.stopStream")))
    return native, edit, one


DINGTALK_PLANS: tuple[Plan, ...] = (
    Plan("card", (PlanCall(("card",), False, "card create"), PlanCall(("card",), True, "card stream (final)"))),
    Plan("markdown reply", (PlanCall(("message",), True, "session-webhook message"),), in_floor=False),
)
"""DingTalk: an AI card (create + final update, one app-wide QPS budget), the floor; one markdown reply (no card,
nothing live, no limit) shown beside it."""


def slack_limits(post_burst: int) -> dict[str, Limit]:
    """Slack's published limits, as the fake enforces them (a channel: ``post_burst`` new messages per
    ``post_burst`` seconds)."""
    return {
        "chat.update": Limit(50, 60.0),
        "chat.delete": Limit(50, 60.0),
        "chat.startStream": Limit(20, 60.0),
        "chat.stopStream": Limit(20, 60.0),
        "chat.appendStream": Limit(100, 60.0),
        CHANNEL: Limit(post_burst, float(post_burst), per_channel=True),
    }


def dingtalk_limits(qps: int) -> dict[str, Limit]:
    """DingTalk's card APIs: ``qps`` calls per sliding second for the whole app (messages are not limited by the fake)."""
    return {"card": Limit(qps, 1.0)}
