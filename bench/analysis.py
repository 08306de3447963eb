"""From raw observations to the numbers in the report.

Inputs per strategy: the worker's traces (when each piece of answer text was
generated, in the pipeline's process) and the fake card API's log (when each
call arrived, whether it was throttled, when its content became visible).
Both sides use ``time.monotonic()``, which on Linux and macOS is one
system-wide clock, so times from the two processes compare directly.

Definitions (also in ``bench/README.md``):

- **first visible** — seconds from the turn's first model output (thought,
  answer text or a tool call) to the first accepted card call whose content
  shows something the model produced.
- **staleness** — for every answer character, seconds from the moment the
  pipeline received it from the model to the moment the card API first
  showed it; percentiles are over all characters of all turns. It is how far
  the visible text trails the generated text, weighted by text.
- **delivered** — the turn's cards, finalized, show exactly the model's
  answer (continuation parts joined in order), or the fallback message(s)
  do. Compared character for character with the scripted answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from tests.fakes.card_api import FakeCardAPI


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) with linear interpolation; ``None`` for no values."""
    if not values:
        return None
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return float(data[low] + (data[high] - data[low]) * (pos - low))


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p99, max and count of ``values``."""
    return {
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
        "n": len(values),
    }


def _char_times(steps: Iterable[tuple[float, int]], length: int) -> list[float | None]:
    """For each of ``length`` characters, the first time a step's running total covered it."""
    out: list[float | None] = [None] * length
    covered = 0
    for at, total in steps:
        total = min(total, length)
        if total > covered:
            for k in range(covered, total):
                out[k] = at
            covered = total
    return out


def _visible_steps(calls: list[Any]) -> list[tuple[float, int]]:
    """(time, answer characters visible) for the turn, from its accepted calls, in time order."""
    per_card: dict[str, int] = {}
    steps = []
    for call in sorted(calls, key=lambda c: c.visible_at):
        if call.op == "fallback":
            steps.append((call.visible_at, call.answer_len))
            continue
        per_card[call.card_id] = call.answer_len
        steps.append((call.visible_at, sum(per_card.values())))
    return steps


def analyze_strategy(
    *,
    strategy: str,
    settings: Any,
    answers: list[str],
    worker: dict[str, Any],
    api: FakeCardAPI,
    fakes_cpu_s: float,
    started_at: float,
) -> dict[str, Any]:
    """The report section of one strategy."""
    traces = worker["turns"]
    accepted_by_turn: dict[str, list[Any]] = defaultdict(list)
    for call in api.calls:
        if call.visible_at is not None:
            accepted_by_turn[call.turn_id].append(call)
    messages_by_turn: dict[str, list[Any]] = defaultdict(list)
    for message in api.messages:
        messages_by_turn[message.turn_id].append(message)

    first_visible: list[float] = []
    ask_to_card: list[float] = []
    staleness: list[float] = []
    final_latency: list[float] = []
    gen_rates: list[float] = []
    lost_chars = 0
    delivered = via_card = via_fallback = 0
    wrong_final = 0
    loop_exact = 0
    outcomes: dict[str, int] = defaultdict(int)
    undelivered: list[str] = []

    for trace in traces:
        turn_id = trace["turn_id"]
        expected = answers[trace["turn"]]
        outcomes[trace["outcome"].split(":")[0] or "unknown"] += 1
        if trace["outcome"] == "done" and trace["answer"] == expected:
            loop_exact += 1
        calls = accepted_by_turn.get(turn_id, [])

        if calls:
            ask_to_card.append(min(c.visible_at for c in calls) - trace["started_at"])
        shown = [c.visible_at for c in calls if c.has_output]
        if trace["first_output_at"] is not None and shown:
            first_visible.append(max(0.0, min(shown) - trace["first_output_at"]))

        deltas = [tuple(d) for d in trace["answer_deltas"]]
        if len(deltas) >= 2 and deltas[-1][0] > deltas[0][0]:
            gen_rates.append(deltas[-1][1] / (deltas[-1][0] - deltas[0][0]))
        generated = _char_times(deltas, len(expected))
        visible = _char_times(_visible_steps(calls), len(expected))
        for gen_at, seen_at in zip(generated, visible):
            if gen_at is None:
                continue
            if seen_at is None:
                lost_chars += 1
            else:
                staleness.append(max(0.0, seen_at - gen_at))

        cards = api.cards_for(turn_id)
        card_ok = bool(cards) and all(c.finalized_at is not None for c in cards) and cards[-1].status == "done" and "".join(c.answer for c in cards) == expected
        messages = messages_by_turn.get(turn_id, [])
        message_ok = bool(messages) and "".join(m.answer for m in messages) == expected
        # A card closed with a note after its answer went out as a message is not wrong.
        if cards and all(c.finalized_at is not None for c in cards) and not card_ok and not message_ok:
            wrong_final += 1
        if card_ok or message_ok:
            delivered += 1
            if card_ok:
                via_card += 1
                done_at = max(c.finalized_at for c in cards)
            else:
                via_fallback += 1
                done_at = max(m.visible_at for m in messages)
            if trace["ended_at"] is not None:
                final_latency.append(max(0.0, done_at - trace["ended_at"]))
        elif len(undelivered) < 10:
            undelivered.append(turn_id)

    n = len(traces)
    total_calls = len(api.calls)
    accepted = sum(1 for c in api.calls if c.visible_at is not None)
    by_op: dict[str, int] = defaultdict(int)
    for call in api.calls:
        by_op[call.op] += 1
    chunks = sum(t["chunks"] for t in traces)
    process = worker["process"]
    streamer_throttles = sum(int(t["metrics"].get("throttles", 0)) for t in traces if t["metrics"])
    fallbacks = sum(1 for t in traces if t["metrics"] and t["metrics"].get("fallback_used"))

    return {
        "strategy": strategy,
        "turns": n,
        "wall_s": process["wall_s"],
        "first_visible_s": summarize(first_visible),
        "ask_to_card_s": summarize(ask_to_card),
        "staleness_s": summarize(staleness),
        "lost_chars": lost_chars,
        "final_latency_s": summarize(final_latency),
        "api_calls": total_calls,
        "api_calls_accepted": accepted,
        "api_calls_by_op": dict(by_op),
        "api_calls_per_turn": total_calls / n if n else 0.0,
        "throttled": api.throttled,
        "streamer_saw_throttles": streamer_throttles,
        "delivered": delivered,
        "delivery_rate": delivered / n if n else 0.0,
        "delivered_on_card": via_card,
        "delivered_by_fallback": via_fallback,
        "fallback_used": fallbacks,
        "finalized_with_wrong_text": wrong_final,
        "undelivered_examples": undelivered,
        "writes_after_final": sum(c.writes_after_final for c in api.cards.values()),
        "seq_regressions": sum(c.seq_regressions for c in api.cards.values()),
        "loop_answer_exact": loop_exact,
        "outcomes": dict(outcomes),
        "crashes": [t["outcome"] for t in traces if t["outcome"].startswith("crashed")][:5],
        "chunks": chunks,
        "cpu_s": process["cpu_s"],
        "cpu_s_per_1k_chunks": process["cpu_s"] / (chunks / 1000.0) if chunks else None,
        "fakes_cpu_s": fakes_cpu_s,
        "peak_rss_mb": process["peak_rss_bytes"] / 2**20,
        "rss_before_run_mb": process["rss_before_bytes"] / 2**20,
        "model_chars_per_s": summarize(gen_rates),
        "timeline": _timeline(api, started_at),
    }


def _timeline(api: FakeCardAPI, started_at: float) -> dict[str, list[int]]:
    """Calls per second since the worker started its turns: accepted and throttled."""
    accepted: dict[int, int] = defaultdict(int)
    throttled: dict[int, int] = defaultdict(int)
    for call in api.calls:
        second = max(0, int(call.arrived_at - started_at))
        (throttled if call.status == 429 else accepted)[second] += 1
    last = max([*accepted, *throttled], default=-1)
    return {
        "accepted": [accepted.get(s, 0) for s in range(last + 1)],
        "throttled": [throttled.get(s, 0) for s in range(last + 1)],
    }


def acceptance(strategies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's acceptance checks on what ran; ``passed`` covers our policy (the others are contrasts)."""
    checks: dict[str, Any] = {}
    ours = strategies.get("ours")
    if ours is not None:
        checks["ours_zero_throttled"] = ours["throttled"] == 0
        checks["ours_all_final_answers_exact"] = ours["delivered"] == ours["turns"]
    every = strategies.get("every-chunk")
    if every is not None:
        checks["every_chunk_throttled"] = every["throttled"] > 0
    checks["passed"] = all(v for k, v in checks.items() if k.startswith("ours_"))
    return checks
