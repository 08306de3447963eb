"""The charts scenario of ``make bench``: its flags, charts and goals, and a small run end to end.

The small run goes as ``make bench --platform charts`` does: the renders in a
process of their own, then two answers at once on the Slack and DingTalk sides
of the bench (worker processes running the real gateway and adapters, the
scripted model calling the real ``resource_metrics``), once with charts off and
once with them on. It asserts what was drawn, what the fakes received and the
report's shape, never a latency.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from bench.charts import CHART_CALLS, RENDER_P95_GOAL_MS, chart_cases, charts_goals, metric_responder
from bench.model import user_text
from bench.report import print_report
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, parse_settings
from bench.stats import summarize
from tools.demo.script import Script

ANSWERS = 2


def test_the_charts_flags_and_the_command_that_reproduces_them() -> None:
    settings = parse_settings(["--platform", "charts", "--charts-renders", "5", "--charts-answers", "3",
                               "--charts-platforms", "slack"])
    (scenario,) = settings.scenarios()
    assert (scenario.platform, scenario.n, scenario.name) == ("charts", 5, "charts N=5 renders+calls")
    assert settings.charts_platforms == ("slack",) and settings.charts_answers == 3
    assert parse_settings(settings.to_argv()) == settings
    only_renders = parse_settings(["--platform", "charts", "--charts-platforms", "none"])
    assert only_renders.charts_platforms == () and parse_settings(only_renders.to_argv()) == only_renders
    assert "charts" in BenchSettings().platforms  # make bench runs it with everything else
    with pytest.raises(SystemExit):
        parse_settings(["--charts-platforms", "web"])


def test_the_timed_charts_are_the_issues_case_a_cost_breakdown_the_dark_theme_and_a_small_baseline() -> None:
    judged, bars, dark, baseline = chart_cases()
    assert judged.judged and not judged.baseline and baseline.baseline
    assert (judged.spec.kind, len(judged.spec.series), {len(s.points) for s in judged.spec.series}) == ("line", 3, {500})
    assert judged.spec.threshold is not None and (judged.spec.width, judged.spec.height) == (800, 400)
    assert (bars.spec.kind, len(bars.spec.bars)) == ("bar", 15)
    assert dark.spec.theme == "dark" and dark.spec.series == judged.spec.series
    assert (len(baseline.spec.series), len(baseline.spec.series[0].points)) == (1, 60)


def _finish(script: Script) -> str:
    reasons = [c["choices"][0].get("finish_reason") for c in script.chunks if isinstance(c, dict) and c.get("choices")]
    return next(r for r in reasons if r)


def test_the_model_calls_the_metric_tool_once_per_turn_whatever_the_history_holds() -> None:
    seen: dict[int, str] = {}
    respond = metric_responder(["answer zero"], gen_s=0.1, chunk_chars=4, seen=seen)
    earlier = [{"role": "user", "content": user_text(0)}, {"role": "assistant", "tool_calls": [{"id": "call_a"}]},
               {"role": "tool", "content": "Chart art_1 is shown to the user with this answer"},
               {"role": "assistant", "content": "answer zero"}]
    asked = [*earlier, {"role": "user", "content": user_text(0)}]
    assert _finish(respond({"messages": asked})) == "tool_calls" and seen == {}
    figures = {"role": "tool", "content": "cpu{resource=\"prod-db-01\"}: last 58.8 %, min 47.1, max 88.2, p95 70.8"}
    answered = respond({"messages": [*asked, {"role": "assistant", "tool_calls": [{"id": "call_b"}]}, figures]})
    assert _finish(answered) == "stop" and seen == {0: "figures"}  # this turn's result, not the history's chart


def _case(key: str, ms: list[float], *, judged: bool = False, baseline: bool = False) -> dict[str, Any]:
    return {"key": key, "judged": judged, "baseline": baseline, "ms": summarize(ms), "cpu_ms": summarize(ms),
            "png": {"ok": True, "width": 800, "height": 400}}


def _row(platform: str, n: int, *, delivered: int, stray: int = 0, exact: int | None = None) -> dict[str, Any]:
    def run(charts: bool, count: int) -> dict[str, Any]:
        calls = {m: {"accepted": count, "throttled": 0, "failed": 0} for m in CHART_CALLS[platform]}
        return {"charts": charts, "calls": calls, "exact": n if exact is None else exact, "throttled": 0,
                "tool": {"chart": n if charts else 0}, "placed": {"one": count if charts else 0}}

    return {"platform": platform, "answers": n, "chart_calls": list(CHART_CALLS[platform]),
            "with_chart": run(True, delivered), "baseline": run(False, stray), "extra_total_per_answer": 2.0,
            "extra_delivery_per_answer": 2.0, "extra_other_per_answer": 0.0}


def test_goals_judge_the_render_p95_and_one_chart_delivery_per_answer() -> None:
    fast: dict[str, Any] = {"render": {"cases": [_case("line-3x500", [90.0, 100.0, 120.0], judged=True),
                                 _case("line-1x60", [60.0, 70.0], baseline=True)], "loadavg_before": [0.5]},
            "platform_calls": [_row("slack", 4, delivered=4), _row("dingtalk", 4, delivered=4)]}
    goals = charts_goals(fast)
    assert [g.passed for g in goals] == [True, True, True]
    assert goals[0].text.startswith(f"chart render p95 ≤ {RENDER_P95_GOAL_MS:.0f} ms")
    assert "the 1 × 60 baseline's" in goals[0].measured and "load 0.50" in goals[0].measured
    assert "files.getUploadURLExternal 4, upload POST 4, files.completeUploadExternal 4" in goals[1].measured
    slow = {**fast, "render": {**fast["render"], "cases": [_case("line-3x500", [100.0, 400.0], judged=True)]},
            "platform_calls": [_row("slack", 4, delivered=3), _row("dingtalk", 4, delivered=4, stray=1),
                               _row("slack", 4, delivered=4, exact=3)]}
    assert [g.passed for g in charts_goals(slow)] == [False, False, False, False]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = BenchSettings(platforms=("charts",), charts_renders=1, charts_answers=ANSWERS, gen_s=0.4,
                             answer_chars=(120, 200), live_check_s=0.2, settle_s=30, worker_timeout_s=90,
                             out=str(tmp_path_factory.mktemp("charts-bench")))
    return asyncio.run(run_benchmark(settings))


def test_every_chart_is_drawn_and_timed_in_a_process_of_its_own(report: dict[str, Any]) -> None:
    assert report["failures"] == {}
    (result,) = report["scenarios"]
    render = result["render"]
    assert render["cold_png"]["ok"] and render["cold_ms"] > 0 and render["import_s"] > 0
    assert not render["matplotlib_loaded_before"]  # the import timed is the process's first
    assert [c["key"] for c in render["cases"]] == [c.key for c in chart_cases()]
    for case in render["cases"]:
        assert case["png"]["ok"] and case["png"]["format"] == "PNG", case["key"]
        assert case["ms"]["n"] == case["cpu_ms"]["n"] == case["concurrent_ms"]["n"] == 1, case["key"]
        assert case["charts_per_s"] > 0 and case["cpu_ms"]["p50"] > 0, case["key"]


def test_a_chart_adds_exactly_its_delivery_calls_on_each_platform(report: dict[str, Any]) -> None:
    (result,) = report["scenarios"]
    rows = {row["platform"]: row for row in result["platform_calls"]}
    assert set(rows) == {"slack", "dingtalk"}
    for platform, row in rows.items():
        chart, base = row["with_chart"], row["baseline"]
        assert chart["tool"]["chart"] == ANSWERS and base["tool"]["figures"] == ANSWERS, platform  # the same tool
        assert chart["exact"] == base["exact"] == ANSWERS, (platform, chart["failures"], base["failures"])
        for method in CHART_CALLS[platform]:
            assert chart["calls"][method]["accepted"] == ANSWERS, (platform, method)
            assert method not in base["calls"] or base["calls"][method]["accepted"] == 0, (platform, method)
            assert row["extra_per_answer"][method] == 1.0, (platform, method)
        assert chart["placed"] == {"one": ANSWERS, "none": 0, "more": 0}, platform  # each in its own thread / group
        assert row["extra_delivery_per_answer"] == len(CHART_CALLS[platform]), platform
    goals = {g["goal"].split(":")[0]: g for g in result["goals"]}
    assert goals["slack"]["passed"] and goals["dingtalk"]["passed"]
    assert f"chart render p95 ≤ {RENDER_P95_GOAL_MS:.0f} ms (line 3 × 500 + threshold, 800×400, one at a time)" in goals


def test_the_report_prints_the_render_table_the_calls_tables_and_the_goals(report: dict[str, Any]) -> None:
    out = io.StringIO()
    print_report(report, Console(file=out, width=220, color_system=None))
    text = out.getvalue()
    assert "charts: render timings" in text and "baseline: line 1 × 60 points" in text
    assert "charts: slack/auto calls per answer" in text and "charts: dingtalk/card calls per answer" in text
    assert "the chart's delivery" in text and "first render (line-3x500)" in text
    assert "chart render p95 ≤ 150 ms" in text and "--charts-renders 1 --charts-answers 2" in text
