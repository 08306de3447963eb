"""The benchmark's incident and crash scenarios at a tiny N: the harness, never a latency.

The runs go end to end as ``make bench BENCH_ARGS='--platform incident,crash'`` does: worker processes running
the real Gateway and Slack adapter, the bench's fake Slack (a channel's new messages limited, stream starts counted
or not), the scripted model. The incident puts every asker in one channel; the crash kills the worker with
``SIGKILL`` mid-burst and starts it again on the same SQLite file. The tests check what the harness measures and
reports (who was in which channel, the kill and the restart, the counts, the floors beside the figures, the
goals), not how fast or whether the product met them.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import aiohttp
import pytest
from rich.console import Console

from bench.report import print_report
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, Scenario, parse_settings
from bench.slack_side import SlackSide
from tests.fakes.slack import BOT_TOKEN

INCIDENT_N = 5
CRASH_N = 2


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = BenchSettings(platforms=("incident", "crash"), slack_modes=("auto",), incident_n=(INCIDENT_N,),
                             crash_n=CRASH_N, gen_s=2.5, crash_at_s=1.0, answer_chars=(120, 200), live_check_s=0.5,
                             settle_s=40, out=str(tmp_path_factory.mktemp("bench-shapes-out")), worker_timeout_s=150)
    return asyncio.run(run_benchmark(settings))


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["scenario"]["name"]: r for r in report["scenarios"]}


def test_the_incident_runs_with_and_without_stream_starts_in_the_channel_bucket(report: dict[str, Any]) -> None:
    assert report["failures"] == {}
    runs = _by_name(report)
    counted = runs[f"slack/auto N={INCIDENT_N} burst, incident (one channel, stream starts counted)"]
    uncounted = runs[f"slack/auto N={INCIDENT_N} burst, incident (one channel, stream starts not counted)"]
    assert counted["stream_starts_counted"] is True and uncounted["stream_starts_counted"] is False
    for r in (counted, uncounted):
        assert r["answers"] == INCIDENT_N and r["scenario"]["variant"].startswith("incident")
        # Every answer has its own floor, and its distance to it (a failure is +inf, never left out).
        assert len(r["floor"]["per_answer"]) == INCIDENT_N and r["over_floor_s"]["n"] == INCIDENT_N
        assert 0 <= r["over_floor_s"]["within"] <= INCIDENT_N and set(r["ratio"]) == {"p50", "p95"}
        assert set(r["throttles_per_channel"]) <= {"C0000"}  # every call of the incident is in its one channel
    # In one channel of 3 messages per 3 s, the 4th and 5th answers wait for the slot at 3 s unless their streams
    # start off the channel's bucket.
    assert counted["floor"]["per_answer"][3] > uncounted["floor"]["per_answer"][3]
    assert counted["floor"]["complete_s"]["max"] > counted["floor"]["complete_s"]["p50"]
    goals = {g["goal"] for g in counted["goals"]}
    assert {"every answer exact", "each answer within 2 s of its floor", "at most 1 throttle per channel"} <= goals
    assert any(g["goal"].startswith("complete p95 within 2 s of the floor's") for g in uncounted["goals"])


def test_the_crash_kills_the_worker_and_counts_what_the_restarted_one_answered(report: dict[str, Any]) -> None:
    [crash] = [r for r in report["scenarios"] if r["scenario"]["variant"] == "crash"]
    assert crash["scenario"]["name"] == f"slack/auto N={CRASH_N} burst, crash + restart"
    numbers = crash["crash"]
    assert len(numbers["killed_pids"]) == 1 and len(numbers["restarted_pids"]) == 1
    assert set(numbers["killed_pids"]).isdisjoint(numbers["restarted_pids"])
    assert crash["process"]["pid"] == numbers["restarted_pids"][0]  # the restarted worker served to the end
    assert numbers["kill_at_s"] <= numbers["restart_ready_s"]
    assert numbers["questions"] == CRASH_N and numbers["answered"] == crash["exact"]
    assert numbers["left_open"] == crash["live_left"]["count"] and 0 <= numbers["asked_again"] <= CRASH_N
    # The floor of a crash regenerates from the kill on.
    assert crash["floor"]["gen_s"] == pytest.approx(2.5 + 1.0)
    goals = [g["goal"] for g in crash["goals"]]
    assert goals == [f"{CRASH_N}/{CRASH_N} questions answered (resumed)", "0 duplicated answers", "0 cards left open"]


def test_the_report_prints_each_floor_beside_the_figures(report: dict[str, Any]) -> None:
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=250))
    text = buffer.getvalue()
    for needle in ("floor p50 / p95", "÷ floor", "FLOOR", "the floor · each answer past its own floor",
                   "one channel: each answer past its own floor", "kill -9 of 1 process(es)", "questions answered",
                   "--platform incident,crash", "--incident-n 5", "--crash-at-s 1"):
        assert needle in text, needle


@pytest.mark.parametrize("counted", [True, False])
def test_the_bench_fake_takes_a_channels_messages_about_one_a_second(counted: bool) -> None:
    async def run() -> list[int]:
        side = SlackSide(BenchSettings(), ["answer"], one_channel=True, stream_starts_counted=counted)
        base = (await side.start())["platform_url"]
        statuses = []
        try:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as http:
                for method, body in [*[("chat.startStream", {"thread_ts": "1.0", "recipient_user_id": "U1",
                                                              "recipient_team_id": "T1", "markdown_text": "a"})] * 3,
                                     *[("chat.postMessage", {"text": "hello"})] * 4]:
                    async with http.post(f"{base}{method}", json={"channel": side.channel(0), **body}) as response:
                        statuses.append(response.status)
                        if response.status == 429:
                            assert int(response.headers["Retry-After"]) >= 1
        finally:
            await side.stop()
        return statuses

    statuses = asyncio.run(run())
    # Counted, the three stream starts fill the channel's burst; not counted, the 4th message is the one refused.
    assert statuses == ([200] * 3 + [429] * 4 if counted else [200] * 6 + [429])


def test_incident_and_crash_scenarios_follow_the_flags() -> None:
    settings = parse_settings(["--platform", "incident,crash", "--slack-modes", "auto,edit", "--incident-n", "30",
                               "--replicas", "1,2", "--crash-n", "20"])
    names = [s.name for s in settings.scenarios()]
    assert names == [
        "slack/auto N=30 burst, incident (one channel, stream starts counted)",
        "slack/auto N=30 burst, incident (one channel, stream starts counted), 2 replicas",
        "slack/auto N=30 burst, incident (one channel, stream starts not counted)",
        "slack/auto N=30 burst, incident (one channel, stream starts not counted), 2 replicas",
        "slack/edit N=30 burst, incident (one channel)",  # edit mode makes no stream: once
        "slack/edit N=30 burst, incident (one channel), 2 replicas",
        "slack/auto N=20 burst, crash + restart", "slack/auto N=20 burst, crash + restart, 2 replicas",
        "slack/edit N=20 burst, crash + restart", "slack/edit N=20 burst, crash + restart, 2 replicas",
    ]
    incident = Scenario("slack", "auto", 4, "burst", variant="incident-uncounted")
    assert settings.channels_of(incident) == [0, 0, 0, 0] and not incident.stream_starts_counted
    assert incident.key == "slack-auto-4-burst-incident-uncounted"
    again = parse_settings(settings.to_argv())
    assert again.to_dict() == {**settings.to_dict(), "out": again.out}
