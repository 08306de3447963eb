"""The crash scenario: every gateway process killed (``kill -9``) mid-burst, started again, and the questions counted.

N questions arrive at once on Slack, one channel each, as in the usual burst. ``crash_at_s`` seconds later, while
the answers are being written, every worker of the scenario (one process, or each replica of a fleet) is killed
with ``SIGKILL``: no shutdown, no card closed, the model's streams cut. At once the same workers are started
again, built as they were (:func:`bench.replicas.replica_workers` with the same job: the same SQLite file and so
the same instance id, or the same configured ids on Redis), as a supervisor restarts a crashed service. Nothing is
delivered again: Slack had its acks.

Then the bench follows the answers as in any scenario, and counts:

- **answered**: questions whose thread shows the exact answer, settled (resumed, or finished before the kill);
- **asked again**: questions the model was asked for after the kill (the resumes);
- **duplicated**: questions whose answer the model streamed to the end more than once, or whose thread shows the
  whole answer in more than one message;
- **left open**: messages still looking live ``live_check_s`` after the last answer (a stream never stopped, a
  placeholder never replaced).

The goals (issue 30): N/N answered, none duplicated, none left open. The floor of a crash scenario is the usual
one with generation starting again at the kill (a resumed question is generated again from the start): what is
physical; how long the restart and the resume take is ours.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.analysis import Goal
from bench.fleet import every
from bench.model import Generation
from bench.worker_process import WorkerProcess

__all__ = ["crash_and_restart", "crash_goals", "crash_lines", "crash_numbers"]


async def crash_and_restart(alive: list[WorkerProcess], at: float, rebuild: Callable[[], list[WorkerProcess]]) -> dict[str, Any]:
    """At ``at`` (``time.monotonic()``), kill every process of ``alive`` with ``SIGKILL`` and start ``rebuild()``'s
    in their place (``alive`` then holds them, so whoever stops the scenario stops those); when it happened."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))  # the crash's moment in the scenario, not synchronization
    killed = [worker.pid for worker in alive]
    killed_at = time.monotonic()
    await asyncio.gather(*(worker.kill() for worker in alive))
    fresh = rebuild()
    alive[:] = fresh
    await every(worker.start() for worker in fresh)
    return {"killed_at": killed_at, "restarted_at": time.monotonic(), "killed_pids": killed,
            "restarted_pids": [worker.pid for worker in fresh]}


def crash_numbers(timing: dict[str, Any], start: float, generations: Sequence[Generation], exact: Sequence[bool],
                  whole_messages: Sequence[int], live_left: int) -> dict[str, Any]:
    """The crash's counts: ``exact`` and ``whole_messages`` per turn, ``live_left`` messages still live."""
    killed_at = timing["killed_at"]
    n = len(exact)
    completed = [0] * n
    asked_again: set[int] = set()
    cut: set[int] = set()
    for g in generations:
        if not g.answer or g.turn is None or g.turn >= n:
            continue
        completed[g.turn] += g.completed
        if g.requested_at >= killed_at:
            asked_again.add(g.turn)
        elif not g.completed or g.ended_at > killed_at:
            cut.add(g.turn)
    duplicated = [turn for turn in range(n) if completed[turn] > 1 or whole_messages[turn] > 1]
    return {
        "kill_at_s": killed_at - start,
        "restart_ready_s": timing["restarted_at"] - start,
        "restart_took_s": timing["restarted_at"] - killed_at,
        "killed_pids": timing["killed_pids"],
        "restarted_pids": timing["restarted_pids"],
        "questions": n,
        "answered": sum(bool(x) for x in exact),
        "cut_at_kill": len(cut),
        "asked_again": len(asked_again),
        "duplicated": len(duplicated),
        "duplicated_turns": duplicated[:20],
        "left_open": live_left,
    }


def crash_goals(result: dict[str, Any]) -> list[Goal]:
    """N/N questions answered (resumed), none duplicated, no card left open."""
    crash = result["crash"]
    n = crash["questions"]
    return [
        Goal(f"{n}/{n} questions answered (resumed)", crash["answered"] == n,
             f"{crash['answered']}/{n} answered, {crash['asked_again']} asked again after the kill"),
        Goal("0 duplicated answers", crash["duplicated"] == 0, f"{crash['duplicated']} duplicated"),
        Goal("0 cards left open", crash["left_open"] == 0, f"{crash['left_open']} left open"),
    ]


def crash_lines(result: dict[str, Any]) -> list[str]:
    """The report's lines on the crash: when, what the kill cut, what came back."""
    crash = result["crash"]
    lines = [
        f"  kill -9 of {len(crash['killed_pids'])} process(es) at +{crash['kill_at_s']:.2f} s "
        f"(cut {crash['cut_at_kill']} answer streams); started again and ready at +{crash['restart_ready_s']:.2f} s "
        f"({crash['restart_took_s']:.2f} s later)",
        f"  {crash['answered']}/{crash['questions']} questions answered, {crash['asked_again']} asked of the model "
        f"again after the kill, {crash['duplicated']} duplicated, {crash['left_open']} cards left open",
    ]
    if crash["duplicated_turns"]:
        lines.append(f"  [yellow]duplicated:[/] turns {crash['duplicated_turns'][:10]}")
    return lines
