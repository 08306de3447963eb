"""Which goals judge a chat scenario: by its shape (usual, incident, crash), and beside its one-replica twin.

The usual shape's goals are :func:`bench.analysis.scenario_goals` (by platform and N); an incident's are
:func:`bench.incident.incident_goals`, a crash's :func:`bench.crash.crash_goals`. Every scenario asks that nothing
looks live ``live_check_s`` after the last answer (a crash says it as "0 cards left open"), and a fleet's
(``--replicas`` above 1) that its complete p95 is within 0.5 s of the same scenario's on one replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.analysis import Goal, replica_goal, scenario_goals
from bench.crash import crash_goals
from bench.incident import incident_goals

__all__ = ["chat_goals"]


def chat_goals(result: dict[str, Any], earlier: Sequence[dict[str, Any]], gen_s: float, live_check_s: float) -> list[Goal]:
    """The goals of one Slack or DingTalk scenario; ``earlier``: the results run before it (its one-replica twin)."""
    variant = result["scenario"].get("variant", "")
    if variant == "crash":
        goals = crash_goals(result)
    elif variant.startswith("incident"):
        goals = incident_goals(result)
        if result["scenario"].get("replicas", 1) > 1:
            twice = result["answered_twice"]["count"]
            goals.append(Goal("none answered twice", twice == 0, f"{twice} answered twice"))
        live = result["live_left"]["count"]
        goals.append(Goal(f"nothing looks live {live_check_s:g} s after the last answer", live == 0, f"{live} live-looking"))
    else:
        goals = scenario_goals(result, gen_s, live_check_s)
    beside = replica_goal(result, earlier)
    if beside is not None:
        goals.append(beside)
    return goals
