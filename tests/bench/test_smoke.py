"""Smoke test of the benchmark harness (``make bench``) at a small N.

Runs the real harness end to end — worker subprocesses, the scripted model,
the rate-limited fake card API — and checks the report's structure and the
properties the benchmark exists to show: our policy is never throttled and
delivers every final answer exactly; updating on every chunk is throttled.
Not a timed test: no latency number is asserted.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from bench.analysis import analyze_strategy, percentile
from bench.model import make_answers
from bench.report import print_report, write_chart, write_json
from bench.scenario import run_benchmark
from bench.settings import STRATEGIES, BenchSettings, parse_settings
from tests.fakes.card_api import CallRecord, FakeCard, FakeCardAPI

SUMMARY_KEYS = {"p50", "p99", "max", "n"}


def _card(answer: str, finalized_at: float) -> FakeCard:
    snapshot = {"part": 1, "answer": answer, "status": "done"}
    return FakeCard("c1", {"turn_id": "ours-0"}, snapshot, answer, finalized_at=finalized_at)


def _call(op: str, arrived: float, status: int, answered: float, answer_len: int, has_output: bool) -> CallRecord:
    return CallRecord(op, "c1", arrived, turn_id="ours-0", answer_len=answer_len, has_output=has_output,
                      status=status, answered_at=answered)  # fmt: skip
STRATEGY_KEYS = {
    "turns", "wall_s", "first_visible_s", "staleness_s", "ask_to_card_s", "final_latency_s",
    "api_calls", "api_calls_accepted", "api_calls_per_turn", "throttled", "delivered", "delivery_rate",
    "delivered_on_card", "delivered_by_fallback", "cpu_s", "cpu_s_per_1k_chunks", "chunks",
    "peak_rss_mb", "fakes_cpu_s", "timeline",
}  # fmt: skip


@pytest.fixture(scope="module")
def small_settings(tmp_path_factory: pytest.TempPathFactory) -> BenchSettings:
    return BenchSettings(
        turns=8,
        qps=5,
        tokens_per_s=200,
        chunk_chars=4,
        tool_rounds=1,
        tool_ms=5,
        answer_chars=(80, 160),
        latency_ms=(5, 15),
        out=str(tmp_path_factory.mktemp("bench-out")),
        worker_timeout_s=90,
    )


async def test_small_run_reports_every_strategy_and_ours_delivers_exactly(small_settings: BenchSettings) -> None:
    report = await run_benchmark(small_settings)

    assert report["failures"] == {}
    assert list(report["strategies"]) == list(STRATEGIES)
    assert {"cpu_count", "loadavg", "loadavg_after"} <= set(report["machine"])
    assert report["reproduce"]["make"].startswith("make bench BENCH_ARGS='--turns 8 --qps 5 ")
    for name, s in report["strategies"].items():
        assert STRATEGY_KEYS <= set(s), name
        for key in ("first_visible_s", "staleness_s", "final_latency_s"):
            assert set(s[key]) == SUMMARY_KEYS
            assert s[key]["n"] > 0 and s[key]["p50"] is not None and s[key]["p99"] >= s[key]["p50"], (name, key)
        assert s["turns"] == 8
        assert s["chunks"] > 8 * 10  # every answer arrived in many chunks (80–160 chars, 4 per chunk)
        assert s["cpu_s_per_1k_chunks"] > 0 and s["peak_rss_mb"] > 0
        assert s["loop_answer_exact"] == 8, name  # the real loop returned each scripted answer

    ours = report["strategies"]["ours"]
    assert ours["throttled"] == 0
    assert ours["delivered"] == 8 and ours["delivery_rate"] == 1.0
    assert ours["delivered_on_card"] == 8 and ours["fallback_used"] == 0
    assert ours["lost_chars"] == 0
    assert ours["writes_after_final"] == 0 and ours["seq_regressions"] == 0
    assert ours["staleness_s"]["n"] == sum(len(a) for a in make_answers(small_settings))

    every = report["strategies"]["every-chunk"]
    assert every["throttled"] > 0
    assert every["api_calls_per_turn"] > ours["api_calls_per_turn"]
    assert report["acceptance"] == {
        "ours_zero_throttled": True,
        "ours_all_final_answers_exact": True,
        "every_chunk_throttled": True,
        "passed": True,
    }

    out = Path(small_settings.out)
    json_path = write_json(report, out / "report.json")
    png_path = write_chart(report, out / "report.png")
    assert json.loads(json_path.read_text())["strategies"]["ours"]["delivered"] == 8
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=200), paths=[json_path, png_path])
    text = buffer.getvalue()
    for needle in ("every-chunk", "no-streaming", "throttled calls (429)", "8/8 (100.0%)", "PASSED", "load average", "make bench"):
        assert needle in text


def test_staleness_is_per_character_delay_from_generation_to_visibility() -> None:
    """Two characters generated at t=1 and t=2, shown together at t=3: delays 2 s and 1 s."""
    api = FakeCardAPI()
    api.cards["c1"] = _card("ab", finalized_at=3.0)
    api.calls += [
        _call("create", 0.0, 200, 0.5, 0, False),
        _call("update", 2.5, 429, 2.6, 2, True),  # throttled: never visible
        _call("finalize", 2.9, 200, 3.0, 2, True),
    ]
    trace = {
        "turn": 0, "turn_id": "ours-0", "started_at": 0.0, "first_output_at": 1.0,
        "answer_deltas": [[1.0, 1], [2.0, 2]], "chunks": 2, "ended_at": 2.0, "outcome": "done",
        "answer": "ab", "finished_at": 3.1, "metrics": {"throttles": 1},
    }  # fmt: skip
    worker = {"turns": [trace], "process": {"cpu_s": 0.5, "wall_s": 3.0, "rss_before_bytes": 2**20, "peak_rss_bytes": 2**21}}
    s = analyze_strategy(strategy="ours", settings=None, answers=["ab"], worker=worker, api=api, fakes_cpu_s=0.1, started_at=0.0)
    assert s["staleness_s"] == {"p50": 1.5, "p99": pytest.approx(1.99), "max": 2.0, "n": 2}
    assert s["first_visible_s"]["p50"] == 2.0  # first output at 1.0, first content with output visible at 3.0
    assert s["ask_to_card_s"]["p50"] == 0.5
    assert s["final_latency_s"]["p50"] == 1.0
    assert (s["throttled"], s["api_calls"], s["api_calls_accepted"]) == (1, 3, 2)
    assert s["delivered"] == 1 and s["delivered_on_card"] == 1
    assert s["cpu_s_per_1k_chunks"] == 250.0


def test_a_card_showing_other_text_is_not_delivered() -> None:
    api = FakeCardAPI()
    api.cards["c1"] = _card("a", finalized_at=3.0)
    api.calls.append(_call("finalize", 2.9, 200, 3.0, 1, True))
    trace = {
        "turn": 0, "turn_id": "ours-0", "started_at": 0.0, "first_output_at": 1.0,
        "answer_deltas": [[1.0, 2]], "chunks": 1, "ended_at": 2.0, "outcome": "done",
        "answer": "ab", "finished_at": 3.1, "metrics": {},
    }  # fmt: skip
    worker = {"turns": [trace], "process": {"cpu_s": 0.5, "wall_s": 3.0, "rss_before_bytes": 1, "peak_rss_bytes": 1}}
    s = analyze_strategy(strategy="ours", settings=None, answers=["ab"], worker=worker, api=api, fakes_cpu_s=0.1, started_at=0.0)
    assert s["delivered"] == 0 and s["finalized_with_wrong_text"] == 1 and s["lost_chars"] == 1


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency-ms", "80-30"], "--latency-ms needs"),
        (["--strategies", "ours,fastest"], "unknown: fastest"),
        (["--turns", "0"], "--turns must be > 0"),
        (["--qps", "many"], "--qps takes a number"),
    ],
)
def test_bad_flags_are_explained(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_settings(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_flags_round_trip_into_the_reproduce_command() -> None:
    settings = parse_settings(["--turns", "50", "--latency-ms", "10-20", "--strategies", "ours,no-streaming", "--qps", "12.5"])
    assert settings.latency_ms == (10.0, 20.0) and settings.strategies == ("ours", "no-streaming")
    again = parse_settings(settings.to_argv())
    assert again.to_dict() == {**settings.to_dict(), "out": again.out}
