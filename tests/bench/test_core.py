"""The benchmark's ``core`` platform at a tiny N, and unit tests of its measuring parts.

The run goes end to end as ``make bench BENCH_ARGS='--platform core'`` does: a
worker process builds the runtime as ``botgateway run`` does, submits the
turns through the real Gateway into the bench sink, against the scripted
model. It asserts correctness and the report's shape, never a latency.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bench.core_analysis import core_numbers, throughput_goal
from bench.core_probe import LoopLag, TimedHistory
from bench.core_sink import UNLIMITED, BenchSink, TurnStamps
from bench.core_worker import inbound_message
from bench.model import Generation, carries_text, core_script, make_answers
from bench.report import print_report, write_chart, write_json
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, Scenario, parse_settings
from botgateway.sink import CardHandle
from botgateway.snapshot import CardSnapshot

N = 3


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


def _generation(turn: int, requested: float, first_text: float, last_text: float, chunks: int = 10) -> Generation:
    return Generation(turn, True, requested, ended_at=last_text, completed=True, first_chunk_at=requested,
                      first_text_at=first_text, last_text_at=last_text, chunks=chunks)


def _stamps(turn: int, **at: float | str) -> dict[str, Any]:
    return {**TurnStamps(turn).to_dict(), "status": "done", "final_status": "done", **at}


def test_latencies_subtract_the_round_trips_the_platform_forces() -> None:
    answers = ["the answer", "another answer"]
    worker = {
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
    numbers = core_numbers(worker, generations, answers, latency_s=0.05, interval_s=0.01, chunk_chars=4)
    assert numbers["exact"] == 1 and numbers["failures"][0]["turn"] == 1
    ok, failed = numbers["per_turn"]
    assert ok["history_load_s"] == pytest.approx(0.002)
    assert ok["first_text_overhead_s"] == pytest.approx(10.13 - 0.05 - 10.05)
    assert ok["last_token_to_final_s"] == pytest.approx(10.52 - 10.49)
    assert ok["final_beyond_in_flight_s"] == pytest.approx(10.52 - 10.5)  # the update in flight at the last token
    # An update started after the last token was written is the worker's lateness, not a call in flight.
    late = {**worker, "turns": [{**worker["turns"][0], "live_started_at": 10.495}]}
    [alone] = core_numbers(late, generations[:1], answers[:1], latency_s=0.05, interval_s=0.01, chunk_chars=4)["per_turn"]
    assert alone["final_beyond_in_flight_s"] == pytest.approx(10.52 - 10.49)
    assert ok["mention_to_first_chunk_s"] == pytest.approx(0.02)
    assert all(math.isinf(failed[k]) for k in ("history_load_s", "last_token_to_final_s", "first_text_overhead_s"))
    assert numbers["history_load_ms"]["failed"] == 1 and math.isinf(numbers["history_load_ms"]["max"])
    assert numbers["chunks"] == 20 and numbers["cpu_per_1k_chunks_s"] == pytest.approx(25.0)
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
    assert [b - a for a, b in zip(text_due, text_due[1:], strict=False)] == pytest.approx([0.01] * 9)
    # The finish and usage chunks go out with the last text, as providers send them.
    assert script.due_s[-2:] == (text_due[-1], text_due[-1])
    firsts = {core_script(answer, turn, 0.01, 4).due_s[1] for turn in range(20)}
    assert len(firsts) == 20 and all(0.01 <= f < 0.02 for f in firsts)


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
    assert names == ["slack/edit N=10 burst", "dingtalk/card N=10 burst", "core N=200 burst"]
    assert parse_settings([]).core_turns == (200, 1000)


def test_core_turns_must_be_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(["--core-turns", "many"])
    assert "--core-turns takes comma-separated numbers" in capsys.readouterr().err


def test_the_bench_sink_stamps_what_the_platform_would_show() -> None:
    async def scenario() -> TurnStamps:
        stamps = [TurnStamps(0)]
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
        await asyncio.sleep(0)  # the sampler is asleep now
        time.sleep(0.05)  # holds the event loop: the sampler's next wake-up is at least this late
        await lag.sampled.wait()
        return loaded, await lag.stop()

    loaded, samples = asyncio.run(scenario())
    assert [cid for cid, _, _ in loaded] == ["c1"] and loaded[0][1] <= loaded[0][2]
    assert max(samples) >= 0.045
