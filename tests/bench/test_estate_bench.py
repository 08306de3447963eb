"""The estate fan-out scenario of ``make bench``: its QPS window and judging, and a small run end to end.

The small run goes as ``make bench --platform estate`` does, on one provider ×
one account × one region: the fakes in their own process, the toolset built as
the gateway builds it, ``find_resource`` through a registry. It asserts what
was found, what the fakes received and the report's shape, never a latency.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import asdict
from typing import Any

import pytest
from rich.console import Console

from bench.estate import ApiWindow, FakeCall, api_windows, estate_goals, max_in_window
from bench.report import print_report
from bench.scenario import run_benchmark
from bench.settings import BenchSettings, parse_settings
from bench.stats import summarize
from botgateway.budget import RateLimit


def test_max_in_window_counts_the_busiest_half_open_second() -> None:
    assert max_in_window([]) == 0
    assert max_in_window([5.0]) == 1
    assert max_in_window([0.0, 0.5, 0.99, 1.0, 1.2]) == 4  # 0.5, 0.99, 1.0, 1.2 fit in [0.5, 1.5)
    assert max_in_window([0.0, 1.0, 2.0, 3.0]) == 1  # a second apart: never two in one window
    assert max_in_window([3.0, 0.1, 0.2, 2.9]) == 2  # order does not matter
    assert max_in_window([0.0, 0.1, 0.2], window_s=0.15) == 2


def _calls(api: str, times: list[float], *, account: str = "acct0", region: str = "cn-hangzhou") -> list[FakeCall]:
    return [FakeCall("aliyun", account, region, "slb", api, t) for t in times]


def test_api_windows_judge_each_account_region_and_api_against_rate_plus_burst() -> None:
    limits = {("aliyun", "slb", "DescribeLoadBalancers"): RateLimit(rate_per_s=2, burst=2)}
    burst = [0.0, 0.1, 0.2, 0.3, 0.4]  # 5 in one second: one more than rate + burst
    calls = (_calls("DescribeLoadBalancers", burst) + _calls("DescribeLoadBalancers", burst[:4], account="acct1")
             + _calls("DescribeLoadBalancers", [0.0, 1.0, 2.0, 3.0, 4.0], region="cn-beijing")
             + _calls("DescribeHealthStatus", burst))
    windows = {(w.account, w.region, w.api): w for w in api_windows(calls, limits)}
    over = windows[("acct0", "cn-hangzhou", "DescribeLoadBalancers")]
    assert (over.max_1s, over.allowed, over.calls, over.ok) == (5, 4, 5, False)
    assert windows[("acct1", "cn-hangzhou", "DescribeLoadBalancers")].ok  # another account has its own quota
    assert windows[("acct0", "cn-beijing", "DescribeLoadBalancers")].max_1s == 1
    unbudgeted = windows[("acct0", "cn-hangzhou", "DescribeHealthStatus")]
    assert unbudgeted.allowed is None and unbudgeted.ok  # no limit known: shown, not judged
    assert api_windows(calls, limits)[0] == over  # the busiest share of its limit first


def _result(cold: list[float], warm_ms: float, apis: list[ApiWindow]) -> dict[str, Any]:
    rows = [{**asdict(w), "ok": w.ok} for w in apis]
    return {"cold_s": summarize(cold), "baseline_cold_s": summarize([0.5]), "warm_ms": summarize([warm_ms]),
            "baseline_warm_ms": summarize([warm_ms]), "delay_ms": 100.0, "apis": rows, "baseline_apis": []}


def test_goals_are_the_issues_three() -> None:
    fine = ApiWindow("aws", "acct0", "us-east-1", "route53", "route53", 30, 6, 10)
    passing = estate_goals(_result([0.6, 0.7, 0.8], 9.0, [fine]))
    assert [g.passed for g in passing] == [True, True, True]
    assert "×1.58" in passing[0].measured and "round trips of 100 ms" in passing[0].measured
    assert "route53: 6 in 1 s of 10 allowed" in passing[2].measured
    over = ApiWindow("aws", "acct0", "us-east-1", "route53", "route53", 30, 11, 10)
    failing = estate_goals(_result([0.6, 0.7, float("inf")], 60.0, [fine, over]))
    assert [g.passed for g in failing] == [False, False, False]
    assert failing[0].measured.startswith("∞") and "11 in 1 s, allowed 10" in failing[2].measured
    assert not estate_goals(_result([0.5], 1.0, []))[2].passed  # nothing judged is not a pass


def test_the_estate_flags_and_the_command_that_reproduces_them() -> None:
    settings = parse_settings(["--platform", "estate", "--estate-providers", "aws", "--estate-accounts", "1",
                               "--estate-regions", "2", "--estate-cold-runs", "4", "--estate-warm-calls", "9",
                               "--estate-delay-ms", "20"])
    (scenario,) = settings.scenarios()
    assert (scenario.platform, scenario.mode, scenario.n) == ("estate", "1x1x2", 4)
    assert scenario.name == "estate/1x1x2 N=4 cold+warm"
    assert parse_settings(settings.to_argv()) == settings
    assert "estate" in BenchSettings().platforms  # make bench runs it with everything else
    with pytest.raises(SystemExit):
        parse_settings(["--estate-regions", "4"])


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = BenchSettings(platforms=("estate",), estate_providers=("aliyun",), estate_accounts=1, estate_regions=1,
                             estate_cold_runs=2, estate_warm_calls=6, estate_delay_ms=20,
                             out=str(tmp_path_factory.mktemp("estate-bench")))
    return asyncio.run(run_benchmark(settings))


def test_a_small_fanout_finds_the_resource_through_the_real_toolset_and_fakes(report: dict[str, Any]) -> None:
    assert report["failures"] == {}
    (result,) = report["scenarios"]
    assert result["failures"] == []  # every lookup answered, by every listing
    assert result["found"] and min(result["found"]) >= 2  # 10.0.3.7: the RDS address and the DNS record to it
    assert result["shape"]["listings"] == result["shape"]["baseline_listings"] == 9  # 8 kinds + servers
    assert result["cold_s"]["n"] == 2 and result["warm_ms"]["n"] == 6 and result["cold_s"]["failed"] == 0
    assert result["warm_requests"] == 0  # warm lookups are answered from the caches
    apis = {w["api"] for w in result["apis"]}
    assert {"DescribeDBInstances", "DescribeLoadBalancerAttribute", "ListBuckets", "DescribeInstances"} <= apis
    net_info = next(w for w in result["apis"] if w["api"] == "DescribeDBInstanceNetInfo")
    assert net_info["allowed"] == 20 and net_info["calls"] == 3 * 3  # two cold lookups and the warm one's fill
    assert [g["goal"] for g in result["goals"]] == [
        "cold find_resource p95 ≤ 1.00 s", "warm find_resource p95 ≤ 50 ms",
        "no API past its documented QPS (+ burst) in any second",
    ]
    assert result["goals"][2]["passed"]


def test_the_report_prints_the_estate_table_and_goals(report: dict[str, Any]) -> None:
    out = io.StringIO()
    print_report(report, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "estate: find_resource over providers" in text and "estate/1x1x1 N=2 cold+warm" in text
    assert "busiest second" in text and "warm find_resource p95 ≤ 50 ms" in text
    assert "--estate-providers aliyun --estate-accounts 1" in text
