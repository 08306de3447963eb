"""Smoke test of the benchmark (``make bench``) at a small N, and unit tests of its measuring parts.

The smoke run goes end to end as ``make bench`` does: worker processes running
the real Gateway and adapters, the fake Slack (Socket Mode, rate limits) and
DingTalk (Stream mode, QPS limit), the scripted model. It asserts correctness
and the report's shape, never a latency: it must pass on a busy 2-core machine.
The fleet run does the same with three Slack replicas on the real Redis, every
mention posted to each of them over HTTP.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from rich.console import Console

from bench.analysis import Goal, answered_twice, replica_goal, scenario_goals, turn_latencies
from bench.model import Generation, make_answer, make_answers
from bench.observe import TurnWatch, View, carriers, longest_piece
from bench.report import print_report, write_chart, write_json
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, Scenario, parse_settings
from bench.slack_side import looks_live
from bench.stats import INF, jsonable, percentile, summarize
from tests.fakes.slack import Message
from tests.fakes.stores import REDIS_URL

N = 3
REPLICAS = 3


@pytest.fixture(scope="module")
def small_settings(tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    return BenchSettings(
        platforms=("slack", "dingtalk"),  # the core platform has its own test (test_core.py)
        ns=(N,),
        arrivals=("burst",),
        gen_s=0.6,
        answer_chars=(120, 200),
        live_check_s=0.5,
        settle_s=30,
        out=str(tmp_path_factory.mktemp("bench-out")),
        worker_timeout_s=90,
    )


@pytest.fixture(scope="module")
def report(small_settings: BenchSettings) -> dict[str, Any]:
    return asyncio.run(run_benchmark(small_settings))


def test_every_answer_goes_through_the_gateway_to_the_fake_platform_exactly(report: dict[str, Any]) -> None:
    assert report["failures"] == {}
    names = [r["scenario"]["name"] for r in report["scenarios"]]
    assert names == [f"slack/auto N={N} burst", f"slack/edit N={N} burst", f"dingtalk/card N={N} burst"]
    for r in report["scenarios"]:
        name = r["scenario"]["name"]
        assert r["exact"] == N and r["failures"] == [], (name, r["failures"])
        for key in ("first_text_s", "complete_s", "text_complete_s"):
            assert r[key]["n"] == N and r[key]["failed"] == 0 and r[key]["p50"] is not None, (name, key)
        assert 0 <= r["first_text_s"]["p50"] <= r["text_complete_s"]["p50"] <= r["complete_s"]["p50"], name
        for answer in r["per_answer"]:
            assert answer["inbound_at"] <= answer["first_text_at"] <= answer["complete_at"], name
        assert r["model"]["inbound_to_model_request_s"]["failed"] == 0  # the gateway asked the model for every mention
        assert r["process"]["cpu_s"] > 0 and r["process"]["peak_rss_bytes"] > 0
        assert {"count", "examples"} <= set(r["live_left"])
        assert r["floors"] and all(f["complete_s"]["p95"] is not None for f in r["floors"])
        # The scenario's floor, with every answer's own, and the figures against it.
        assert len(r["floor"]["per_answer"]) == N and r["floor"]["complete_s"]["p95"] > 0
        assert r["ratio"]["p95"] is not None and r["over_floor_s"]["n"] == N
        assert r["goals"] and all({"goal", "passed", "measured"} <= set(g) for g in r["goals"])


def test_calls_are_counted_per_method_accepted_and_throttled_apart(report: dict[str, Any]) -> None:
    slack_auto, slack_edit, dingtalk = report["scenarios"]
    for r in report["scenarios"]:
        for method in r["methods"]:
            assert set(r["calls"].get(method, {"accepted": 0, "throttled": 0, "failed": 0})) == {"accepted", "throttled", "failed"}
    # Edit mode: every answer is a posted message (edited or not); the bot never streams natively.
    assert slack_edit["calls"]["chat.postMessage"]["accepted"] >= N
    assert "chat.startStream" not in slack_edit["calls"]
    # Auto mode streams natively where it can, and stops every stream it started.
    started = slack_auto["calls"]["chat.startStream"]["accepted"]
    assert started >= 1 and slack_auto["calls"]["chat.stopStream"]["accepted"] == started
    assert dingtalk["calls"]["card create"]["accepted"] == N
    assert dingtalk["calls"]["card stream"]["accepted"] >= N


def test_report_prints_and_is_written(report: dict[str, Any], small_settings: BenchSettings) -> None:
    out = Path(small_settings.out)
    json_path = write_json(report, out / "report.json")
    png_path = write_chart(report, out / "report.png")
    assert json.loads(json_path.read_text())["scenarios"][0]["exact"] == N
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=200), paths=[json_path, png_path])
    text = buffer.getvalue()
    for needle in ("slack/auto N=3 burst", "dingtalk/card N=3 burst", "chat.update", "card create", "floor edit", "FLOOR",
                   f"{N}/{N}", "goals:", "load average", "make bench BENCH_ARGS='--platform slack,dingtalk"):
        assert needle in text, needle


def test_percentiles_count_failures_as_infinite() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, INF], 50) == 2.0
    assert percentile([1.0, 2.0, INF], 95) == INF
    summary = summarize([1.0, INF])
    assert summary["failed"] == 1 and summary["max"] == INF
    assert jsonable(summary)["max"] is None and jsonable({"a": [INF, 1.0]}) == {"a": [None, 1.0]}


def test_answers_are_seeded_per_turn_whatever_n() -> None:
    assert make_answers(7, 5, (100, 120))[3] == make_answer(7, 3, (100, 120)) == make_answers(7, 50, (100, 120))[3]
    assert all(100 - 5 <= len(a) <= 120 for a in make_answers(7, 20, (100, 120)))
    assert make_answer(7, 3, (100, 120)) != make_answer(8, 3, (100, 120))


def test_the_answer_is_found_in_one_message_or_in_consecutive_parts() -> None:
    answer = "**web-1** is running and healthy."
    assert longest_piece("@bob\n\n**web-1** is run▌", answer, 0) == len("**web-1** is run")
    assert longest_piece("🤔 Thinking…", answer, 0) == 0  # a stray character is not the answer
    whole = View("1", 1.0, f"@bob\n\n{answer}", False)
    assert carriers([whole], answer)[0] == len(answer)
    first, second = View("1", 1.0, "**web-1** is run", False), View("2", 2.0, "(continued, part 2)\n\nning and healthy.", False)
    covered, pieces = carriers([second, first], answer)
    assert covered == len(answer) and [p[0].key for p in pieces] == ["1", "2"]


def test_turn_milestones_and_verdict() -> None:
    watch = TurnWatch(turn=0, answer="**web-0** is fine.", decorations=("@bob",))
    watch.inbound_at = 10.0
    watch.update(View("m", 1.0, "@bob\n\n🤔 Thinking…", True), "m", 10.2)
    assert watch.first_text_at is None
    watch.update(View("m", 1.0, "@bob\n\n**web-0** is▌", True), "m", 10.5)
    watch.update(View("m", 1.0, "@bob\n\n**web-0** is fine.▌", True), "m", 11.0)
    assert (watch.first_text_at, watch.text_complete_at, watch.complete_at) == (10.5, 11.0, None)
    watch.update(View("m", 1.0, "@bob\n\n**web-0** is fine.", False), "m", 11.4)
    assert watch.complete_at == 11.4 and watch.verdict() == (True, "")
    watch.update(View("m", 1.0, "@bob\n\n**web-0** is fine.\n\nunexpected", False), "m", 12.0)
    assert watch.verdict()[0] is False
    latencies = turn_latencies([watch])
    assert latencies["complete_s"]["failed"] == 1 and latencies["first_text_s"]["p50"] == pytest.approx(0.5)


def test_a_message_at_work_looks_live() -> None:
    done = Message("C1", "1.1", "1.0", blocks=[{"type": "markdown", "text": "@bob\n\nanswer"}])
    assert not looks_live(done)
    assert looks_live(Message("C1", "1.2", "1.0", blocks=[{"type": "markdown", "text": "@bob\n\n🤔 Thinking…"}]))
    assert looks_live(Message("C1", "1.3", "1.0", text="part", streaming=True))
    stop = {"type": "actions", "elements": [{"type": "button", "action_id": "botgateway_stop", "value": "t"}]}
    assert looks_live(Message("C1", "1.4", "1.0", blocks=[{"type": "markdown", "text": "answer"}, stop]))
    working = {"type": "context", "elements": [{"type": "mrkdwn", "text": "⏳ Working on it…"}]}
    assert looks_live(Message("C1", "1.5", "1.0", text="working", blocks=[working]))


def test_scenarios_and_arrivals() -> None:
    settings = parse_settings(["--platform", "dingtalk", "--n", "10,50", "--arrivals", "spread", "--spread-s", "30"])
    assert settings.scenarios() == [Scenario("dingtalk", "card", 10, "spread"), Scenario("dingtalk", "card", 50, "spread")]
    assert settings.arrival_offsets(Scenario("dingtalk", "card", 10, "spread"))[1] == pytest.approx(3.0)
    assert settings.arrival_offsets(Scenario("slack", "edit", 4, "burst")) == [0.0] * 4
    assert parse_settings(["--channels", "2"]).channel_of(5) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--platform", "teams"], "unknown: teams"),
        (["--n", "0"], "every N must be >= 1"),
        (["--gen-s", "fast"], "--gen-s takes a number"),
        (["--answer-chars", "300-100"], "--answer-chars needs"),
        (["--replicas", "0,2"], "every N must be >= 1"),
        (["--replicas", "two"], "--replicas takes comma-separated numbers"),
    ],
)
def test_bad_flags_are_explained(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_settings(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_flags_round_trip_into_the_reproduce_command() -> None:
    settings = parse_settings(["--platform", "slack", "--slack-modes", "edit", "--n", "10,50", "--gen-s", "3.2", "--channels", "5"])
    again = parse_settings(settings.to_argv())
    assert again.to_dict() == {**settings.to_dict(), "out": again.out}
    assert settings.platforms == ("slack",) and settings.ns == (10, 50)


def test_goals_judge_against_generation_time() -> None:
    summary = {"p50": 6.8, "p95": 7.2, "max": 7.3, "n": 10, "failed": 0}
    result = {"scenario": {"n": 10, "platform": "slack"}, "complete_s": summary, "first_text_s": {**summary, "p50": 0.4},
              "exact": 10, "calls": {"chat.update": {"accepted": 20, "throttled": 1, "failed": 0}}, "live_left": {"count": 0}}
    goals = {g.text: g.passed for g in scenario_goals(result, gen_s=6.4)}
    assert goals == {"complete p95 (gen + 1 s) ≤ 7.40 s": True, "first text p50 ≤ 1.00 s": True,
                     "zero 429s on every method": False, "nothing looks live 10 s after the last answer": True}
    failed = {**result, "complete_s": {**summary, "p95": None, "failed": 1}}
    assert not scenario_goals(failed, gen_s=6.4)[0].passed


@pytest.fixture(scope="module")
def fleet_settings(tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    # Three replicas without their one-replica twin: the run stays short; the comparison has its own test below.
    return BenchSettings(platforms=("slack",), slack_modes=("auto",), ns=(N,), arrivals=("burst",), replicas=(REPLICAS,),
                         gen_s=0.6, answer_chars=(120, 200), live_check_s=0.5, settle_s=30,
                         out=str(tmp_path_factory.mktemp("bench-fleet-out")), worker_timeout_s=90)


@pytest.fixture(scope="module")
def fleet_report(fleet_settings: BenchSettings) -> dict[str, Any]:
    return asyncio.run(run_benchmark(fleet_settings))


def test_a_fleet_answers_every_mention_once_though_every_replica_receives_it(fleet_report: dict[str, Any]) -> None:
    assert fleet_report["failures"] == {}
    [r] = fleet_report["scenarios"]
    assert r["scenario"]["name"] == f"slack/auto N={N} burst, {REPLICAS} replicas" and r["scenario"]["replicas"] == REPLICAS
    assert r["exact"] == N and r["failures"] == [], r["failures"]
    # Each mention was posted, signed, to every replica, and every replica took it.
    assert r["deliveries"] == {"replicas": REPLICAS, "posted": N * REPLICAS, "failed_count": 0, "failed": []}
    # Yet the model was asked once per turn and each thread shows one answer.
    assert r["answered_twice"] == {"count": 0, "turns": [], "model_requests_max": 1, "answer_messages_max": 1}
    assert r["calls"]["chat.startStream"]["accepted"] + r["calls"]["chat.postMessage"]["accepted"] >= N
    # Three processes, each its own replica; the table's CPU and RSS are theirs together.
    replicas = r["process"]["replicas"]
    assert [p["index"] for p in replicas] == list(range(REPLICAS)) and len({p["pid"] for p in replicas}) == REPLICAS
    assert r["process"]["cpu_s"] == pytest.approx(sum(p["cpu_s"] for p in replicas))
    assert r["process"]["peak_rss_bytes"] == sum(p["peak_rss_bytes"] for p in replicas)
    goals = {g["goal"]: g for g in r["goals"]}
    assert goals["every answer exact"]["passed"] and goals["none answered twice"]["passed"]
    # No one-replica twin ran: the comparison is not measured, and says how to measure it.
    beside = goals["complete p95 within 0.5 s of one replica's"]
    assert beside["passed"] is False and "--replicas 1," in beside["measured"]


def test_the_fleet_scenario_leaves_nothing_in_redis(fleet_report: dict[str, Any]) -> None:
    prefix = fleet_report["scenarios"][0]["redis_prefix"]
    assert prefix.startswith("bgbench:")

    async def left() -> list[bytes]:
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            return [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        finally:
            await client.aclose()

    assert asyncio.run(left()) == []


def test_the_fleet_report_names_the_replicas_and_the_reproducing_flag(fleet_report: dict[str, Any]) -> None:
    buffer = io.StringIO()
    print_report(fleet_report, Console(file=buffer, width=250))
    text = buffer.getvalue()
    for needle in (f"slack/auto N={N} burst, {REPLICAS} replicas", "answered twice", f"{REPLICAS} replicas sharing Redis",
                   "replica 2 CPU", "none answered twice", f"--replicas {REPLICAS}"):
        assert needle in text, needle


def _generation(turn: int, *, answer: bool = True) -> Generation:
    return Generation(turn, answer, 0.0, completed=True)


def test_a_turn_asked_twice_or_shown_twice_counts_as_answered_twice() -> None:
    # Turn 0: a tool round and its answer (one answer); turn 1: two answer streams; turn 2: two answer messages.
    generations = [_generation(0, answer=False), _generation(0), _generation(1), _generation(1), _generation(2)]
    twice = answered_twice(generations, [1, 1, 2])
    assert twice == {"count": 2, "turns": [1, 2], "model_requests_max": 2, "answer_messages_max": 2}
    assert answered_twice([_generation(0), _generation(1)], [1, 1])["count"] == 0


def _slack_result(replicas: int, p95: float, *, mode: str = "auto", n: int = 50, variant: str = "",
                  platform: str = "slack") -> dict[str, Any]:
    return {"scenario": {"platform": platform, "mode": mode, "n": n, "arrival": "burst", "replicas": replicas,
                         "variant": variant}, "complete_s": {"p95": p95}}


def test_a_fleet_is_judged_against_the_same_scenario_on_one_replica() -> None:
    one = _slack_result(1, 8.1)
    assert replica_goal(one, []) is None  # one replica: nothing to compare
    near = replica_goal(_slack_result(2, 8.55), [one])
    assert near == Goal("complete p95 within 0.5 s of one replica's", True, "8.55 s with 2 replicas, 8.10 s on one (+0.45 s)")
    far = replica_goal(_slack_result(3, 8.7), [one])
    assert far is not None and not far.passed and "(+0.60 s)" in far.measured
    # Only the same mode, N and arrival is the twin; a failed answer (∞) fails the comparison.
    other = replica_goal(_slack_result(2, 8.2), [_slack_result(1, 8.1, mode="edit"), _slack_result(1, 8.1, n=10)])
    assert other is not None and not other.passed and other.measured.startswith("not measured")
    lost = replica_goal(_slack_result(2, INF), [one])
    assert lost is not None and not lost.passed and "∞ with 2 replicas" in lost.measured
    # An incident or a crash is its own twin; so is DingTalk.
    crash = replica_goal(_slack_result(2, 8.2, variant="crash"), [one])
    assert crash is not None and crash.measured.startswith("not measured")
    card = _slack_result(1, 10.9, mode="card", platform="dingtalk")
    fleet = replica_goal(_slack_result(2, 11.2, mode="card", platform="dingtalk"), [one, card])
    assert fleet is not None and fleet.passed and "(+0.30 s)" in fleet.measured


def test_dingtalk_n100_is_judged_against_its_floor() -> None:
    summary = {"p50": 9.0, "p95": 11.0, "max": 11.2, "n": 100, "failed": 0}
    result = {"scenario": {"n": 100, "platform": "dingtalk"}, "complete_s": summary, "first_text_s": summary,
              "exact": 100, "calls": {"card create": {"accepted": 100, "throttled": 0, "failed": 0}},
              "live_left": {"count": 0}, "floor": {"complete_s": {**summary, "p95": 10.45}}}
    goals = {g.text: (g.passed, g.measured) for g in scenario_goals(result, gen_s=6.4)}
    assert goals["complete p95 (floor 10.45 s + 0.7 s) ≤ 11.15 s"] == (True, "11.00 s")
    late = {**result, "complete_s": {**summary, "p95": 11.3}}
    assert not scenario_goals(late, gen_s=6.4)[0].passed


def test_replicas_run_each_chat_scenario_one_replica_first() -> None:
    settings = parse_settings(["--platform", "slack,dingtalk", "--slack-modes", "edit", "--n", "10", "--arrivals", "burst",
                               "--replicas", "3,1,2"])
    assert [s.name for s in settings.scenarios()] == [
        "slack/edit N=10 burst", "slack/edit N=10 burst, 2 replicas", "slack/edit N=10 burst, 3 replicas",
        "dingtalk/card N=10 burst", "dingtalk/card N=10 burst, 2 replicas", "dingtalk/card N=10 burst, 3 replicas"]
    assert [s.key for s in settings.scenarios()][:2] == ["slack-edit-10-burst", "slack-edit-10-burst-r2"]
    again = parse_settings(settings.to_argv())
    assert again.replicas == (3, 1, 2) and again.to_dict() == {**settings.to_dict(), "out": again.out}
    assert parse_settings([]).replicas == (1,) and "--replicas" in parse_settings([]).to_argv()
