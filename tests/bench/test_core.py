"""The benchmark's ``core`` platform at a tiny N, and unit tests of its measuring parts.

The run goes end to end as ``make bench BENCH_ARGS='--platform core'`` does: a
worker process builds the runtime as ``botgateway run`` does, submits the
turns through the real Gateway into the bench sink, against the scripted
model. The same with ``--workers 2``: two workers built as ``botgateway run
--workers 2`` builds them, on the real Redis. The runs assert correctness and
the report's shape, never a latency.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from rich.console import Console

from bench.core_analysis import core_goals, core_numbers, cpu_cores_text, fleet_goal, throughput_goal
from bench.core_probe import LoopLag, TimedHistory
from bench.core_sink import UNLIMITED, BenchSink, TurnStamps
from bench.core_worker import inbound_message
from bench.core_workers import turns_of
from bench.model import BENCH_MODEL, Generation, carries_text, core_script, make_answers
from bench.report import print_report, write_chart, write_json
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, Scenario, parse_settings
from botgateway.sink import CardHandle
from botgateway.snapshot import CardSnapshot
from tests.fakes.stores import REDIS_URL

N = 3
FLEET_N = 4


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    # 300 chunks/s over 3 turns: one chunk every 10 ms, a 120–200 character answer in well under a second.
    return BenchSettings(platforms=("core",), core_turns=(N,), core_chunks_per_s=300, answer_chars=(120, 200),
                         settle_s=30, out=str(tmp_path_factory.mktemp("bench-core-out")), worker_timeout_s=90)


@pytest.fixture(scope="module")
def report(settings: BenchSettings) -> dict[str, Any]:
    return asyncio.run(run_benchmark(settings))


def test_every_turn_goes_through_the_gateway_to_an_exact_final_answer(report: dict[str, Any]) -> None:
    assert report["failures"] == {}
    [r] = report["scenarios"]
    assert r["scenario"]["name"] == f"core N={N} burst"
    assert r["answers"] == N and r["exact"] == N and r["failures"] == []
    for key in ("history_load_ms", "last_token_to_final_ms", "final_beyond_in_flight_ms", "first_text_overhead_ms",
                "first_chunk_to_first_text_ms", "mention_to_first_chunk_ms", "loop_lag_ms"):
        summary = r[key]
        assert summary["failed"] == 0 and summary["p50"] is not None and summary["p99"] is not None, key
    for turn in r["per_turn"]:
        assert turn["status"] == "done" and turn["final_status"] == "done" and turn["problem"] == ""
        assert turn["submitted_at"] <= turn["history_started_at"] <= turn["history_loaded_at"]
        assert turn["submitted_at"] <= turn["create_started_at"] < turn["created_at"] <= turn["final_started_at"]
        assert turn["first_text_at"] <= turn["final_at"]
    # The model streamed every turn's answer, all of it, and the numbers are computed from it.
    answers = make_answers(7, N, (120, 200))
    assert r["chunks"] >= sum(len(a) // 4 for a in answers) and r["chunks_per_s"] > 0
    assert r["model"]["streams"] == N and r["model"]["streams_cut_short"] == 0
    assert r["cpu_s"] > 0 and r["cpu_per_1k_chunks_s"] > 0 and r["process"]["peak_rss_bytes"] > 0
    # One worker with SQLite, as before --workers: no Redis and no fleet goal.
    [worker] = r["workers"]
    assert worker["store"] == "SqliteStore" and worker["turns"] == N and r["cores"] == 1
    assert r["redis_prefix"] == "" and r["redis_cpu_s"] is None


def test_the_core_goals_are_judged(report: dict[str, Any]) -> None:
    [r] = report["scenarios"]
    # N=3 is neither 200 nor 1,000: only the CPU goal applies to it; the throughput goal is the run's.
    assert [g["goal"] for g in r["goals"]] == ["CPU ≤ 0.1 s per 1,000 chunks"]
    [throughput] = report["goals"]
    assert throughput["goal"].startswith("one process sustains ≥ 10,000 chunks/s")
    assert throughput["passed"] is False and "no core scenario streamed" in throughput["measured"]
    assert report["passed"] is False


def test_the_core_report_prints_and_is_written(report: dict[str, Any], settings: BenchSettings) -> None:
    out = Path(settings.out)
    json_path = write_json(report, out / "report.json")
    png_path = write_chart(report, out / "report.png")
    assert json.loads(json_path.read_text())["scenarios"][0]["exact"] == N
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=250), paths=[json_path])
    text = buffer.getvalue()
    for needle in (f"core N={N} burst", "history load", "last token → final", "first text overhead", f"{N}/{N}",
                   "✗ core: one process sustains", "goals:", "load average", "make bench BENCH_ARGS='--platform core"):
        assert needle in text, needle


@pytest.fixture(scope="module")
def fleet_settings(tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    out = str(tmp_path_factory.mktemp("bench-fleet-out"))
    return BenchSettings(platforms=("core",), core_turns=(FLEET_N,), core_chunks_per_s=400, answer_chars=(120, 200),
                         workers=2, settle_s=30, out=out, worker_timeout_s=90)


@pytest.fixture(scope="module")
def fleet_report(fleet_settings: BenchSettings) -> dict[str, Any]:
    return asyncio.run(run_benchmark(fleet_settings))


def test_two_workers_share_redis_and_split_the_turns(fleet_report: dict[str, Any]) -> None:
    assert fleet_report["failures"] == {}
    [r] = fleet_report["scenarios"]
    assert r["scenario"]["name"] == f"core N={FLEET_N} burst, 2 workers" and r["scenario"]["workers"] == 2
    assert r["answers"] == FLEET_N and r["exact"] == FLEET_N and r["failures"] == []
    # Turn i went to worker i % 2, and every turn ended with its exact answer.
    assert [(t["turn"], t["worker"]) for t in r["per_turn"]] == [(i, i % 2) for i in range(FLEET_N)]
    assert all(t["status"] == "done" and t["final_status"] == "done" and t["problem"] == "" for t in r["per_turn"])
    # Two processes built as botgateway run --workers 2 builds them: the Redis store, each its own instance id.
    w0, w1 = r["workers"]
    assert (w0["index"], w1["index"]) == (0, 1) and w0["pid"] != w1["pid"]
    assert w0["store"] == w1["store"] == "RedisStore"
    assert w0["instance_id"].endswith("-w0") and w1["instance_id"].endswith("-w1")
    assert w0["turns"] == w1["turns"] == FLEET_N // 2
    for w in (w0, w1):
        assert w["cpu_s"] > 0 and w["loop_lag_ms"]["n"] > 0 and w["loop_lag_ms"]["p99"] is not None
    # The figures are the workers' together: CPU summed, lag over every sample, cores used over the cores usable.
    assert r["cpu_s"] == pytest.approx(w0["cpu_s"] + w1["cpu_s"])
    assert r["loop_lag_ms"]["n"] == w0["loop_lag_ms"]["n"] + w1["loop_lag_ms"]["n"]
    assert r["cpu_cores"] == pytest.approx(w0["cpu_cores"] + w1["cpu_cores"]) and r["cpu_cores"] > 0
    assert r["cores"] == min(2, fleet_report["machine"]["usable_cpus"])
    assert r["process"]["pids"] == [w0["pid"], w1["pid"]]
    assert r["model"]["streams"] == FLEET_N and r["model"]["streams_cut_short"] == 0
    assert r["redis_cpu_s"] is not None and r["redis_cpu_s"] >= 0


def test_the_scenario_leaves_nothing_in_redis(fleet_report: dict[str, Any]) -> None:
    prefix = fleet_report["scenarios"][0]["redis_prefix"]
    assert prefix.startswith("bgbench:")

    async def left() -> list[bytes]:
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            return [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        finally:
            await client.aclose()

    assert asyncio.run(left()) == []


def test_two_workers_are_judged_by_the_fleet_goal_and_reported(
    fleet_report: dict[str, Any], fleet_settings: BenchSettings
) -> None:
    [r] = fleet_report["scenarios"]
    assert [g["goal"] for g in r["goals"]] == ["CPU ≤ 0.1 s per 1,000 chunks"]
    # Not one process: the throughput goal is not judged; the fleet goal is, and no 1,000-turn scenario ran.
    [fleet] = fleet_report["goals"]
    assert fleet["goal"].startswith("1,000 concurrent streamed turns with --workers 2:")
    assert fleet["passed"] is False and f"ran N={FLEET_N}" in fleet["measured"]
    buffer = io.StringIO()
    print_report(fleet_report, Console(file=buffer, width=250))
    text = buffer.getvalue()
    for needle in (f"core N={FLEET_N} burst, 2 workers", "2 worker processes sharing Redis",
                   f"of {r['cores']} cores: the workers'", "worker 0 (", "worker 1 (", "the Redis server's CPU",
                   "✗ core: 1,000 concurrent streamed turns with --workers 2", "--workers 2"):
        assert needle in text, needle
    assert "one process sustains" not in text
    png = write_chart(fleet_report, Path(fleet_settings.out) / "fleet.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _fleet_result(n: int, *, cores_used: float, lags: list[float], exact: int | None = None) -> dict[str, Any]:
    return {"scenario": {"n": n, "workers": len(lags)}, "answers": n, "exact": n if exact is None else exact,
            "cpu_cores": cores_used, "cores": 2, "chunks_per_s": 9_000.0,
            "workers": [{"loop_lag_ms": {"p99": lag}} for lag in lags]}


def test_the_fleet_goal_wants_both_cores_busy_every_worker_calm_and_every_answer_exact() -> None:
    assert fleet_goal([{"scenario": {"n": 1000}, "chunks_per_s": 1.0}]) is None  # one worker: not judged
    good = fleet_goal([_fleet_result(200, cores_used=0.5, lags=[90.0, 90.0]),
                       _fleet_result(1000, cores_used=1.62, lags=[30.0, 45.0])])
    assert good is not None and good.passed and "CPU 1.62 of 2 cores (busy)" in good.measured
    assert "30.0 ms / 45.0 ms" in good.measured and good.text.startswith("1,000 concurrent streamed turns")
    idle = fleet_goal([_fleet_result(1000, cores_used=0.95, lags=[10.0, 10.0])])
    assert idle is not None and not idle.passed and "not above 1" in idle.measured
    laggy = fleet_goal([_fleet_result(1000, cores_used=1.8, lags=[10.0, 51.0])])
    assert laggy is not None and not laggy.passed
    lost = fleet_goal([_fleet_result(1000, cores_used=1.8, lags=[10.0, 10.0], exact=999)])
    assert lost is not None and not lost.passed and "999/1000 exact" in lost.measured
    assert cpu_cores_text({"cpu_cores": 0.84, "cores": 1}) == "CPU 0.84 of 1 core"
    # Several workers do not count as one process sustaining a rate.
    assert throughput_goal([{**_fleet_result(1000, cores_used=1.8, lags=[1.0, 1.0]), "chunks_per_s": 20_000.0}]) is None


def test_the_core_latency_goals_are_judged_on_one_process_only() -> None:
    def result(n: int, workers: int) -> dict[str, Any]:
        latencies = {"p99": 1.0}
        return {"scenario": {"n": n, "workers": workers}, "history_load_ms": latencies,
                "last_token_to_final_ms": latencies, "first_text_overhead_ms": latencies, "cpu_per_1k_chunks_s": 0.05}

    assert [g.text.split(" p99")[0] for g in core_goals(result(1000, 1))] == [
        "history load", "last token → final call", "CPU ≤ 0.1 s per 1,000 chunks"]
    assert [g.text.split(" p99")[0] for g in core_goals(result(200, 1))] == [
        "first text overhead beyond the round trip", "CPU ≤ 0.1 s per 1,000 chunks"]
    # Issue 12 set them for SQLite with the budget out of the way: a fleet on Redis has the fleet goal instead.
    assert [g.text for g in core_goals(result(1000, 2))] == ["CPU ≤ 0.1 s per 1,000 chunks"]


def test_turns_are_dealt_round_robin() -> None:
    assert [turns_of(i, 2, 5) for i in range(2)] == [[0, 2, 4], [1, 3]]
    assert sorted(t for i in range(3) for t in turns_of(i, 3, 1000)) == list(range(1000))


def _generation(turn: int, requested: float, first_text: float, last_text: float, chunks: int = 10) -> Generation:
    return Generation(turn, True, requested, ended_at=last_text, completed=True, first_chunk_at=requested,
                      first_text_at=first_text, last_text_at=last_text, chunks=chunks)


def _stamps(turn: int, **at: float | str) -> dict[str, Any]:
    return {**TurnStamps(turn).to_dict(), "status": "done", "final_status": "done", **at}


def test_latencies_subtract_the_round_trips_the_platform_forces() -> None:
    answers = ["the answer", "another answer"]
    worker = {
        "worker_index": 0, "instance_id": "bench", "store": "SqliteStore", "pid": 1, "rss_ready_bytes": 1,
        "peak_rss_bytes": 2, "started_at": 9.9, "ended_at": 11.1,
        "cpu_s": 0.5,
        "loop_lag_s": [0.001, 0.002],
        "turns": [
            # The first text came before a card could exist: the reference is one round trip after the mention.
            _stamps(0, submitted_at=10.0, history_started_at=10.010, history_loaded_at=10.012, created_at=10.06,
                    first_text_at=10.13, live_started_at=10.45, live_done_at=10.5, final_started_at=10.52,
                    final_text="the answer"),
            # The final text is not the answer: a failure, +inf everywhere.
            _stamps(1, submitted_at=10.0, history_started_at=10.01, history_loaded_at=10.02, first_text_at=10.2,
                    final_started_at=11.0, final_text="another"),
        ],
    }
    generations = [_generation(0, 10.02, 10.03, 10.49), _generation(1, 10.02, 10.03, 10.9)]
    numbers = core_numbers([worker], generations, answers, latency_s=0.05, interval_s=0.01, chunk_chars=4)
    assert numbers["exact"] == 1 and numbers["failures"][0]["turn"] == 1
    ok, failed = numbers["per_turn"]
    assert ok["history_load_s"] == pytest.approx(0.002)
    assert ok["first_text_overhead_s"] == pytest.approx(10.13 - 0.05 - 10.05)
    assert ok["last_token_to_final_s"] == pytest.approx(10.52 - 10.49)
    assert ok["final_beyond_in_flight_s"] == pytest.approx(10.52 - 10.5)  # the update in flight at the last token
    # An update started after the last token was written is the worker's lateness, not a call in flight.
    late = {**worker, "turns": [{**worker["turns"][0], "live_started_at": 10.495}]}
    [alone] = core_numbers([late], generations[:1], answers[:1], latency_s=0.05, interval_s=0.01,
                           chunk_chars=4)["per_turn"]
    assert alone["final_beyond_in_flight_s"] == pytest.approx(10.52 - 10.49)
    assert ok["mention_to_first_chunk_s"] == pytest.approx(0.02)
    assert all(math.isinf(failed[k]) for k in ("history_load_s", "last_token_to_final_s", "first_text_overhead_s"))
    assert numbers["history_load_ms"]["failed"] == 1 and math.isinf(numbers["history_load_ms"]["max"])
    assert numbers["chunks"] == 20 and numbers["cpu_per_1k_chunks_s"] == pytest.approx(25.0)
    # CPU cores: the CPU seconds over the wall time they were measured in.
    assert numbers["cpu_cores"] == pytest.approx(0.5 / 1.2) == numbers["workers"][0]["cpu_cores"]
    assert numbers["chunks_per_s"] == pytest.approx(20 / (11.0 - 10.02))


def test_the_throughput_goal_is_judged_on_the_scenarios_that_streamed_fast_enough() -> None:
    def result(n: int, rate: float, lag_p99: float) -> dict[str, Any]:
        return {"scenario": {"n": n}, "chunks_per_s": rate, "loop_lag_ms": {"p99": lag_p99}}

    assert throughput_goal([]) is None
    slow = throughput_goal([result(200, 9_000, 5.0)])
    assert slow is not None and not slow.passed and "no core scenario streamed" in slow.measured
    laggy = throughput_goal([result(200, 11_000, 80.0), result(1000, 4_000, 5.0)])
    assert laggy is not None and not laggy.passed and "N=200" in laggy.measured and "N=1000" not in laggy.measured
    good = throughput_goal([result(200, 11_000, 30.0), result(1000, 12_000, 80.0)])
    assert good is not None and good.passed


def test_core_streams_keep_one_interval_and_are_out_of_phase() -> None:
    answer = "x" * 40
    script = core_script(answer, 0, 0.01, 4)
    texts = [i for i, item in enumerate(script.chunks) if carries_text(item)]
    assert len(texts) == 10 and script.due_s[0] == 0.0
    text_due = [script.due_s[i] for i in texts]
    assert [b - a for a, b in itertools.pairwise(text_due)] == pytest.approx([0.01] * 9)
    # The finish and usage chunks go out with the last text, as providers send them.
    assert script.due_s[-2:] == (text_due[-1], text_due[-1])
    firsts = {core_script(answer, turn, 0.01, 4).due_s[1] for turn in range(20)}
    assert len(firsts) == 20 and all(0.01 <= f < 0.02 for f in firsts)
    # Encoded before the run, each chunk as the SSE event the server writes, in the turn's own envelope.
    assert script.texts == tuple(carries_text(item) for item in script.chunks)
    assert len(script.events) == len(script.chunks)
    for event, item in zip(script.events, script.chunks, strict=True):
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        sent = json.loads(event[len(b"data: "):])
        assert sent["choices"] == item["choices"] and sent["model"] == BENCH_MODEL
        assert sent["id"] == "chatcmpl-bench-0" and sent["object"] == "chat.completion.chunk"


def test_core_flags() -> None:
    settings = parse_settings(["--platform", "core", "--core-turns", "5,50", "--core-chunks-per-s", "5000", "--n", "7"])
    assert settings.scenarios() == [Scenario("core", "", 5, "burst"), Scenario("core", "", 50, "burst")]
    scenario = Scenario("core", "", 5, "burst")
    assert scenario.name == "core N=5 burst" and scenario.key == "core-5-burst"
    again = parse_settings(settings.to_argv())
    assert again.to_dict() == {**settings.to_dict(), "out": again.out}
    everything = parse_settings(["--platform", "all", "--n", "10", "--core-turns", "200", "--arrivals", "burst",
                                 "--slack-modes", "edit"])
    names = [s.name for s in everything.scenarios()]
    assert names == ["slack/edit N=10 burst", "dingtalk/card N=10 burst", "slack/edit N=30 burst, incident (one channel)",
                     "slack/edit N=20 burst, crash + restart", "core N=200 burst", "estate/3x2x3 N=15 cold+warm",
                     "charts N=40 renders+calls"]
    assert parse_settings([]).core_turns == (200, 1000)
    fleet = parse_settings(["--platform", "core", "--core-turns", "1000", "--workers", "2"])
    assert fleet.workers == 2 and fleet.scenarios() == [Scenario("core", "", 1000, "burst", 2)]
    assert fleet.scenarios()[0].key == "core-1000-burst-w2" and "--workers" in fleet.to_argv()
    assert parse_settings(fleet.to_argv()).workers == 2 and parse_settings([]).workers == 1


def test_workers_must_each_get_a_turn(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(["--platform", "core", "--core-turns", "1,200", "--workers", "2"])
    assert "--workers 2 is more than the 1 turns of a core scenario" in capsys.readouterr().err


def test_core_turns_must_be_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(["--core-turns", "many"])
    assert "--core-turns takes comma-separated numbers" in capsys.readouterr().err


def test_the_bench_sink_stamps_what_the_platform_would_show() -> None:
    async def scenario() -> TurnStamps:
        stamps = {0: TurnStamps(0)}
        sink = BenchSink(stamps, latency_s=0.0)
        assert sink.rate_key("update", inbound_message(0).target) == ("bench:update", UNLIMITED)
        target = inbound_message(0).target
        handle = await sink.create(target, CardSnapshot(status="thinking", answer=""))
        assert stamps[0].created_at and not stamps[0].first_text_at  # a placeholder is no text
        await sink.update(handle, CardSnapshot(status="streaming", answer="Hello"))
        seen = stamps[0].first_text_at
        assert seen
        await sink.finalize(handle, CardSnapshot(status="done", answer="Hello world"))
        assert stamps[0].first_text_at == seen and stamps[0].final_text == "Hello world"
        # The warm-up question's card is served but recorded nowhere.
        warm = await sink.create(inbound_message(None).target, CardSnapshot(status="done", answer="Ready."))
        assert isinstance(warm, CardHandle) and stamps[0].calls == 3
        return stamps[0]

    stamps = asyncio.run(scenario())
    assert stamps.final_started_at <= stamps.final_at and stamps.final_status == "done"


def test_the_probes_time_history_reads_and_loop_stalls() -> None:
    class Memory:
        async def history(self, conversation_id: str) -> list[dict[str, Any]]:
            return [{"role": "user", "content": conversation_id}]

        async def commit(self, conversation_id: str, turn_id: str, messages: list[dict[str, Any]]) -> None:
            self.committed = (conversation_id, turn_id, messages)

    async def scenario() -> tuple[list[tuple[str, float, float]], list[float]]:
        loaded: list[tuple[str, float, float]] = []
        memory = Memory()
        timed = TimedHistory(memory, lambda cid, a, b: loaded.append((cid, a, b)))
        assert await timed.history("c1") == [{"role": "user", "content": "c1"}]
        await timed.commit("c1", "t1", [])
        assert memory.committed == ("c1", "t1", [])
        lag = LoopLag(interval_s=0.001)
        lag.start()
        await lag.sampled.wait()  # a first sample taken: the sampler is asleep again
        lag.sampled.clear()
        time.sleep(0.05)  # holds the event loop: the sampler's next wake-up is at least this late
        await lag.sampled.wait()
        return loaded, await lag.stop()

    loaded, samples = asyncio.run(scenario())
    assert [cid for cid, _, _ in loaded] == ["c1"] and loaded[0][1] <= loaded[0][2]
    assert max(samples) >= 0.045
