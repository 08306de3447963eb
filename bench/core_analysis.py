"""From one ``core`` scenario's stamps to its numbers, and from all of them to the issue's core goals.

The worker's stamps (:class:`~bench.core_sink.TurnStamps`) and the model's
(:class:`~bench.model.Generation`) are ``time.monotonic()`` seconds of two
processes on one machine; CLOCK_MONOTONIC is system-wide on Linux, so they
compare. Per turn:

- **history load**: the tool loop asked the memory for the history → it had it;
- **last token → final call**: the model wrote the answer's last text chunk →
  the final call on the card started;
- **final beyond a call in flight**: the same, from the last text chunk or
  from the end of the card's creation or live update that was in flight when
  the last text chunk was written, whichever is later (the final waits for it:
  one call per card at a time), so the core's own part of the wait;
- **first text overhead**: the first call carrying answer text completed →
  minus the platform's round trip, minus the moment the text could have gone
  out at the earliest: when the model wrote the first text chunk, or when a
  card created at once at the mention could exist (one round trip after the
  mention), whichever is later;
- **first chunk → first text**: the same without subtracting anything;
- **mention → first chunk**: the worker handed the message to the Gateway →
  the model wrote the stream's first chunk (history, request, model's answer).

A turn whose final answer is not exactly the model's answer, or that never
got a final call, is a failure: +inf in every percentile, listed with why.

Over the scenario: **chunks** the model wrote to the answer streams;
**chunks/s** sustained, chunks ÷ (last final call start − first chunk written):
the period ends when the worker had consumed the last stream; **CPU per 1,000
chunks**, the worker's CPU seconds from ``go`` until the last card was final
(everything the core did for those turns, not only the parsing) per 1,000
chunks; **loop lag**, how late a 10 ms sleeper woke in the worker.

With several workers (``--workers K``) the turns, chunks and CPU seconds are
the workers' together, the loop lag is given per worker and over all their
samples, and **CPU cores** is the workers' CPU seconds over the wall time they
were measured (the earliest ``go`` to the last card final of any worker: the
streaming period with the submissions before it), against the cores they
could use (K, at most the machine's). The issue-13 goal (:func:`fleet_goal`)
reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.analysis import Goal
from bench.model import Generation, core_script
from bench.stats import INF, summarize

__all__ = [
    "CHUNK_RATE_GOAL",
    "CPU_PER_1K_S",
    "FINAL_P99_MS",
    "FIRST_TEXT_P99_MS",
    "FLEET_TURNS",
    "HISTORY_P99_MS",
    "LAG_P99_MS",
    "core_goals",
    "core_numbers",
    "cpu_cores_text",
    "fleet_goal",
    "summary_ms",
    "throughput_goal",
]

HISTORY_P99_MS = 10.0
"""Goal: history load p99 at 1,000 concurrent turns."""
FINAL_P99_MS = 20.0
"""Goal: last token → final call p99 (judged at 1,000 concurrent turns)."""
FIRST_TEXT_P99_MS = 20.0
"""Goal: first text overhead beyond the platform round trip, p99 at 200 turns."""
CPU_PER_1K_S = 0.1
"""Goal: worker CPU seconds per 1,000 chunks."""
CHUNK_RATE_GOAL = 10_000.0
"""Goal: chunks per second one process sustains…"""
LAG_P99_MS = 50.0
"""…with event-loop lag p99 at most this (per worker, with several)."""
FLEET_TURNS = 1000
"""Issue 13's goal: this many concurrent streamed turns with ``--workers 2``, both cores busy."""


def summary_ms(values_s: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and max in milliseconds (+inf for failures), how many values and failures."""
    return summarize([v * 1000.0 for v in values_s], tail=99)


_LATENCIES = ("history_load_s", "last_token_to_final_s", "final_beyond_in_flight_s", "first_text_overhead_s",
              "first_chunk_to_first_text_s", "mention_to_first_chunk_s")
"""Per-turn latencies, in seconds."""


def _per_turn(stamps: dict[str, Any], streams: list[Generation], answer: str, rtt: float) -> dict[str, Any]:
    """One turn's latencies in seconds (+inf where the turn failed) and why it failed, if it did."""
    first_chunk = min((g.first_chunk_at for g in streams if g.first_chunk_at), default=0.0)
    first_text = min((g.first_text_at for g in streams if g.first_text_at), default=0.0)
    last_text = max((g.last_text_at for g in streams), default=0.0)
    problem = ""
    if not stamps["final_started_at"]:
        problem = f"no final call (turn ended {stamps['status'] or 'unknown'})"
    elif stamps["final_text"] != answer:
        shown = len(stamps["final_text"])
        problem = f"final text is not the answer ({shown} of {len(answer)} chars, {stamps['final_status']})"
    elif not (first_text and last_text and stamps["first_text_at"] and stamps["history_loaded_at"]):
        problem = "a stamp is missing"
    if problem:
        return {"turn": stamps["turn"], "problem": problem, **dict.fromkeys(_LATENCIES, INF)}
    earliest = max(first_text, stamps["submitted_at"] + rtt)
    return {
        "turn": stamps["turn"],
        "problem": "",
        "history_load_s": stamps["history_loaded_at"] - stamps["history_started_at"],
        "last_token_to_final_s": stamps["final_started_at"] - last_text,
        "final_beyond_in_flight_s": stamps["final_started_at"] - max(last_text, _in_flight_until(stamps, last_text)),
        "first_text_overhead_s": stamps["first_text_at"] - rtt - earliest,
        "first_chunk_to_first_text_s": stamps["first_text_at"] - first_text,
        "mention_to_first_chunk_s": first_chunk - stamps["submitted_at"],
    }


def _in_flight_until(stamps: dict[str, Any], last_text: float) -> float:
    """When the card call in flight at the last token ended (0: none was in flight then).

    A call started after the last token was written does not count: the worker had not read the end of
    the stream yet, so that wait is the worker's lateness, not the platform's round trip.
    """
    started, done = stamps["live_started_at"], stamps["live_done_at"]
    return done if started and started <= last_text < done else 0.0


def _model_lateness(
    streams: dict[int, list[Generation]], answers: list[str], interval_s: float, chunk_chars: int
) -> list[float]:
    """Per completed stream, how much later than planned its last text went out (the orchestrator was too busy)."""
    late = []
    for turn, generations in streams.items():
        for g in generations:
            if g.completed and g.last_text_at and turn < len(answers):
                planned = core_script(answers[turn], turn, interval_s, chunk_chars).due_s[-1]
                late.append(g.last_text_at - g.requested_at - planned)
    return late


def _workers(workers: Sequence[dict[str, Any]], cores: int) -> dict[str, Any]:
    """The workers' CPU, lag and memory, each and together; CPU cores over the wall time they were measured."""
    wall = max(w["ended_at"] for w in workers) - min(w["started_at"] for w in workers)
    cpu = sum(w["cpu_s"] for w in workers)
    return {
        "cpu_s": cpu,
        "cpu_cores": cpu / wall if wall > 0 else 0.0,
        "cores": cores,
        "loop_lag_ms": summary_ms([lag for w in workers for lag in w["loop_lag_s"]]),
        "process": {"pids": [w["pid"] for w in workers], "cpu_s": cpu, "wall_s": wall,
                    "rss_ready_bytes": sum(w["rss_ready_bytes"] for w in workers),
                    "peak_rss_bytes": sum(w["peak_rss_bytes"] for w in workers)},
        "workers": [
            {"index": w["worker_index"], "instance_id": w["instance_id"], "store": w["store"], "pid": w["pid"],
             "turns": len(w["turns"]), "cpu_s": w["cpu_s"], "cpu_cores": w["cpu_s"] / wall if wall > 0 else 0.0,
             "loop_lag_ms": summary_ms(w["loop_lag_s"]), "peak_rss_bytes": w["peak_rss_bytes"]}
            for w in workers
        ],
    }


def core_numbers(
    workers: Sequence[dict[str, Any]],
    generations: Sequence[Generation],
    answers: list[str],
    *,
    latency_s: float,
    interval_s: float,
    chunk_chars: int,
    cores: int = 1,
) -> dict[str, Any]:
    """The scenario's numbers from its workers' results (see the module docstring); latencies in milliseconds.

    ``cores``: the cores the workers could use (their number, at most the machine's).
    """
    generations = [g for g in generations if g.turn is not None]  # not the workers' warm-up questions
    streams: dict[int, list[Generation]] = {}
    for g in generations:
        if g.turn is not None:
            streams.setdefault(g.turn, []).append(g)
    stamps = sorted(({**s, "worker": w["worker_index"]} for w in workers for s in w["turns"]), key=lambda s: s["turn"])
    turns = [_per_turn(s, streams.get(s["turn"], []), answers[s["turn"]], latency_s) for s in stamps]
    chunks = sum(g.chunks for g in generations)
    fleet = _workers(workers, cores)
    first_chunk = min((g.first_chunk_at for g in generations if g.first_chunk_at), default=0.0)
    last_final = max((s["final_started_at"] for s in stamps), default=0.0)
    period = last_final - first_chunk if first_chunk and last_final > first_chunk else 0.0
    late = _model_lateness(streams, answers, interval_s, chunk_chars)

    def column(key: str) -> dict[str, Any]:
        return summary_ms([t[key] for t in turns])

    return {
        "answers": len(turns),
        "exact": sum(1 for t in turns if not t["problem"]),
        "failures": [{"turn": t["turn"], "problem": t["problem"]} for t in turns if t["problem"]],
        "chunks": chunks,
        "streaming_s": period,
        "chunks_per_s": chunks / period if period else 0.0,
        "cpu_per_1k_chunks_s": fleet["cpu_s"] / chunks * 1000.0 if chunks else INF,
        **fleet,
        "history_load_ms": column("history_load_s"),
        "last_token_to_final_ms": column("last_token_to_final_s"),
        "final_beyond_in_flight_ms": column("final_beyond_in_flight_s"),
        "first_text_overhead_ms": column("first_text_overhead_s"),
        "first_chunk_to_first_text_ms": column("first_chunk_to_first_text_s"),
        "mention_to_first_chunk_ms": column("mention_to_first_chunk_s"),
        "model": {
            "streams": len(generations),
            "chunk_interval_s": interval_s,
            "streams_cut_short": sum(1 for g in generations if not g.completed),
            "late_ms": summary_ms(late) if late else None,
        },
        "per_turn": [{**s, "final_text": None, **t} for s, t in zip(stamps, turns, strict=True)],
    }


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return "∞" if math.isinf(value) else f"{value:.1f} ms"


def core_goals(result: dict[str, Any]) -> list[Goal]:
    """The core goals that apply to one scenario: by its N, and CPU everywhere.

    The latency goals are issue 12's, set for one process on SQLite with the budget out of the way, so they are
    judged on the scenarios of one worker; with several (Redis, the fleet's shared budget and leases) the report
    shows the same latencies, and :func:`fleet_goal` judges the fleet.
    """
    n = result["scenario"]["n"] if result["scenario"].get("workers", 1) == 1 else 0
    goals: list[Goal] = []
    if n == 1000:
        history, final = result["history_load_ms"]["p99"], result["last_token_to_final_ms"]["p99"]
        goals += [
            Goal(f"history load p99 ≤ {HISTORY_P99_MS:g} ms", history is not None and history <= HISTORY_P99_MS,
                 _ms(history)),
            Goal(f"last token → final call p99 ≤ {FINAL_P99_MS:g} ms", final is not None and final <= FINAL_P99_MS,
                 _ms(final)),
        ]
    if n == 200:
        first = result["first_text_overhead_ms"]["p99"]
        goals.append(Goal(f"first text overhead beyond the round trip p99 ≤ {FIRST_TEXT_P99_MS:g} ms",
                          first is not None and first <= FIRST_TEXT_P99_MS, _ms(first)))
    cpu = result["cpu_per_1k_chunks_s"]
    goals.append(Goal(f"CPU ≤ {CPU_PER_1K_S:g} s per 1,000 chunks", not math.isinf(cpu) and cpu <= CPU_PER_1K_S,
                      "∞ (no chunks)" if math.isinf(cpu) else f"{cpu:.3f} s"))
    return goals


def throughput_goal(results: Sequence[dict[str, Any]]) -> Goal | None:
    """≥ 10,000 chunks/s with loop lag p99 ≤ 50 ms, judged on the core scenarios that streamed that fast.

    Judged on the scenarios of one worker process only; ``None`` when none ran (``--workers`` above 1 has
    :func:`fleet_goal` instead).
    """
    results = [r for r in results if r["scenario"].get("workers", 1) == 1]
    if not results:
        return None
    text = f"one process sustains ≥ {CHUNK_RATE_GOAL:,.0f} chunks/s with event-loop lag p99 ≤ {LAG_P99_MS:g} ms"

    def line(r: dict[str, Any]) -> str:
        return f"N={r['scenario']['n']}: {r['chunks_per_s']:,.0f} chunks/s, lag p99 {_ms(r['loop_lag_ms']['p99'])}"

    fast = [r for r in results if r["chunks_per_s"] >= CHUNK_RATE_GOAL]
    if not fast:
        best = max(results, key=lambda r: r["chunks_per_s"])
        return Goal(text, False, f"no core scenario streamed {CHUNK_RATE_GOAL:,.0f} chunks/s (best {line(best)})")
    passed = any(r["loop_lag_ms"]["p99"] is not None and r["loop_lag_ms"]["p99"] <= LAG_P99_MS for r in fast)
    return Goal(text, passed, "; ".join(line(r) for r in fast))


def cpu_cores_text(result: dict[str, Any]) -> str:
    """``CPU 1.86 of 2 cores``: the CPU cores a core scenario's workers used, of those they could use."""
    cores = result["cores"]
    return f"CPU {result['cpu_cores']:.2f} of {cores} core{'' if cores == 1 else 's'}"


def fleet_goal(results: Sequence[dict[str, Any]]) -> Goal | None:
    """Issue 13: 1,000 concurrent streamed turns with ``--workers K``, both cores busy, loop lag p99 ≤ 50 ms per worker.

    Judged on the core scenario of :data:`FLEET_TURNS` turns run by several workers (✗ when none ran). The cores
    count as busy when the workers together used more than ``cores − 1`` cores' worth of CPU over the time they were
    measured: more than ``cores − 1`` processes ever can, so every core worked for the gateway (not that the workers
    filled every core: the model and the fakes share the machine). Every worker's loop lag p99 must be within
    :data:`LAG_P99_MS`, and every turn must end with its exact answer. ``None`` when no core scenario ran several
    workers.
    """
    fleet = [r for r in results if r["scenario"].get("workers", 1) > 1]
    if not fleet:
        return None
    workers, cores = fleet[0]["scenario"]["workers"], fleet[0]["cores"]
    which = "both cores" if cores == 2 else f"all {cores} cores"
    text = (f"{FLEET_TURNS:,} concurrent streamed turns with --workers {workers}: {which} busy, "
            f"event-loop lag p99 ≤ {LAG_P99_MS:g} ms per worker")
    ran = [r for r in fleet if r["scenario"]["n"] == FLEET_TURNS]
    if not ran:
        shown = ", ".join(f"N={r['scenario']['n']}" for r in fleet)
        return Goal(text, False, f"no core scenario ran {FLEET_TURNS:,} turns with several workers (ran {shown})")
    r = ran[0]
    busy = r["cpu_cores"] > r["cores"] - 1
    lags = [w["loop_lag_ms"]["p99"] for w in r["workers"]]
    calm = all(lag is not None and lag <= LAG_P99_MS for lag in lags)
    exact = r["exact"] == r["answers"]
    verdict = "busy" if busy else f"not above {r['cores'] - 1}"
    measured = (f"{cpu_cores_text(r)} ({verdict}); loop lag p99 per worker "
                f"{' / '.join(_ms(lag) for lag in lags)}; {r['exact']}/{r['answers']} exact; "
                f"{r['chunks_per_s']:,.0f} chunks/s")
    return Goal(text, busy and calm and exact, measured)
