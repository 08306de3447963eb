"""The incident scenario: N askers in one Slack channel at once, each answer judged against its own floor.

Everyone mentions the bot in ``#incident`` (``C0000``) within the same moment, each answer in the asker's thread.
The fake Slack takes a channel's new messages about one a second with short bursts (``--post-burst`` per as many
seconds), whatever method makes them, threads included, and answers 429 with ``Retry-After`` past it. It runs
twice in auto mode: with stream starts counted as the channel's messages (the fake and the adapter's
``stream_starts_per_channel`` both on), and with them drawing from the workspace's Tier 2 alone (both off); edit
mode makes no stream and runs once.

The floor of answer *k* (in arrival order) is what the channel allows: ``max(gen, k-th message slot)`` plus the
round trips (:mod:`bench.floor`). With stream starts not counted, 20 answers can stream natively without a channel
slot, so the floor is much lower. The report gives, per answer, its completion minus its own floor (p50/p95/max,
and how many within 2 s), and the throttled calls per channel.

The goals (issue 30), at any N (the issue sets them for N=30):

- stream starts counted (and edit mode): every answer exact, each within 2 s of its floor, at most one throttle
  per channel;
- stream starts not counted: complete p95 within 2 s of the floor's p95.
"""

from __future__ import annotations

from typing import Any

from bench.analysis import Goal, fmt_s

__all__ = ["OVER_FLOOR_S", "THROTTLES_PER_CHANNEL", "incident_goals", "incident_lines"]

OVER_FLOOR_S = 2.0
"""How far past its floor an incident's answer may complete."""
THROTTLES_PER_CHANNEL = 1
"""Throttled calls one channel may see in an incident with stream starts counted."""


def incident_goals(result: dict[str, Any]) -> list[Goal]:
    """The incident's goals: by answer against its floor with stream starts counted, by p95 without."""
    n = result["scenario"]["n"]
    counted = result["scenario"]["variant"] != "incident-uncounted"
    if not counted:
        measured, floor_p95 = result["complete_s"]["p95"], result["floor"]["complete_s"]["p95"]
        ok = measured is not None and floor_p95 is not None and measured <= floor_p95 + OVER_FLOOR_S
        return [Goal(f"complete p95 within {OVER_FLOOR_S:g} s of the floor's ({fmt_s(floor_p95)})", ok,
                     f"{fmt_s(measured)} ({_plus(measured, floor_p95)})")]
    over = result["over_floor_s"]
    worst = over["max"]
    throttles = result["throttles_per_channel"]
    most = max(throttles.values(), default=0)
    return [
        Goal("every answer exact", result["exact"] == n, f"{result['exact']}/{n}"),
        Goal(f"each answer within {OVER_FLOOR_S:g} s of its floor", worst is not None and worst <= OVER_FLOOR_S,
             f"{over['within']}/{n} within, the worst {fmt_s(worst)} past its floor"),
        Goal(f"at most {THROTTLES_PER_CHANNEL} throttle per channel", most <= THROTTLES_PER_CHANNEL,
             f"{most} in the busiest channel" + (f" ({', '.join(f'{c}: {k}' for c, k in sorted(throttles.items()))})"
                                                 if throttles else "")),
    ]


def _plus(measured: float | None, floor_s: float | None) -> str:
    if measured is None or floor_s is None:
        return "—"
    return f"{measured - floor_s:+.2f} s"


def incident_lines(result: dict[str, Any]) -> list[str]:
    """The report's lines on the channel: each answer against its floor, and the throttles per channel."""
    over = result["over_floor_s"]
    throttles = result["throttles_per_channel"]
    shown = ", ".join(f"{c}: {k}" for c, k in sorted(throttles.items())[:5]) or "none"
    return [f"  one channel: each answer past its own floor p50/p95/max {fmt_s(over['p50'])} / {fmt_s(over['p95'])} / "
            f"{fmt_s(over['max'])}, {over['within']}/{result['answers']} within {OVER_FLOOR_S:g} s; "
            f"throttled calls per channel: {shown}"]
