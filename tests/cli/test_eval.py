"""``botgateway eval``: case files and their errors, scoring, and whole runs through the real loop.

The runs are real ``botgateway eval`` subprocesses: against the scripted model
server (exact tool calls and tokens, so the report's numbers are known), and
against the offline demo model (a handful of cases, then the whole suite with
the pass rate CI holds it to).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.cli.eval_cases import Case, CaseFileError, EstateRef, Verdict, load_cases, score
from botgateway.cli.eval_report import CaseRun, percentile, summarize
from tests.paths import REPO, SAMPLE_INVENTORY
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

CASES = REPO / "evals" / "cases"

DEMO_MIN_PASS = 0.9
"""The pass rate the demo model must keep on the whole suite (CI's gate; raise it as the demo learns)."""

KINDS = {"server", "database", "cache", "load_balancer", "security_group", "ip", "nat_gateway", "dns_record", "bucket",
         "pod", "workload", "k8s_service", "ingress", "changes"}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(CaseFileError) as caught:
        load_cases(path, SAMPLE_INVENTORY)
    return caught.value.problems


# --- case files ------------------------------------------------------------------------------------------------


def test_the_suite_loads_with_every_kind_providers_and_chinese() -> None:
    cases = load_cases(CASES, SAMPLE_INVENTORY)
    assert len(cases) >= 40
    tags = {tag for case in cases for tag in case.tags}
    assert KINDS <= tags
    assert {"inventory", "aliyun", "tencent", "aws", "zh"} <= tags
    assert len({case.id for case in cases}) == len(cases)
    estates = {case.estate.key for case in cases}
    assert str(SAMPLE_INVENTORY.resolve()) in estates
    assert str((REPO / "evals" / "estates" / "multi_account.yaml").resolve()) in estates
    assert any(case.estate.path is None for case in cases)  # an inline estate
    zh = next(case for case in cases if case.id == "changes-zh-who-stopped-db03")
    assert zh.question == "谁停了 prod-db-03？" and zh.tools == (("resource_changes",),)


def test_a_case_file_reads_facts_alternatives_numbers_dates_and_estates(tmp_path: Path) -> None:
    write(tmp_path / "estates" / "other.yaml", "name: other\nhosts: []\n")
    path = write(tmp_path / "cases" / "a.yaml", """
estate: ../estates/other.yaml
cases:
  - id: one
    question: "  who stopped prod-db-03?  "
    tags: [changes, inventory]
    facts: [alice, [stopped, 已停止], 3306, 2026-11-30]
    not_facts: [bob]
    tools: [resource_changes, [find_resource, trace]]
  - id: two
    question: what is 10.9.0.5?
    tags: [cache]
    facts: [lab-redis]
    estate:
      caches: [{name: lab-redis, ip: 10.9.0.5}]
""")
    one, two = load_cases(path, SAMPLE_INVENTORY)
    assert one.question == "who stopped prod-db-03?"
    assert one.facts == (("alice",), ("stopped", "已停止"), ("3306",), ("2026-11-30",))
    assert one.not_facts == ("bob",) and one.tools == (("resource_changes",), ("find_resource", "trace"))
    assert one.estate.path == (tmp_path / "estates" / "other.yaml").resolve()
    assert two.estate.path is None and "lab-redis" in two.estate.inline and "hosts: []" in two.estate.inline
    assert one.source == str(path)


def test_bad_case_files_name_the_file_the_case_and_the_field(tmp_path: Path) -> None:
    bad = write(tmp_path / "cases" / "bad.yaml", """
cases:
  - id: no-question
    tags: [server]
    facts: [x]
  - id: bad-facts
    question: q
    tags: [server]
    facts: [ok, {not: a fact}, []]
  - id: no-tags
    question: q
    tags: []
    facts: [x]
  - id: typo
    question: q
    tags: [server]
    fact: [x]
  - id: missing-estate
    question: q
    tags: [server]
    facts: [x]
    estate: ../nowhere.yaml
  - just a string
  - id: dup
    question: q
    tags: [server]
    facts: [x]
""")
    write(tmp_path / "cases" / "other.yml", "cases:\n  - {id: dup, question: q, tags: [s], facts: [x]}\n")
    write(tmp_path / "cases" / "broken.yaml", "cases: [\n")
    write(tmp_path / "cases" / "empty.yaml", "cases: []\n")
    problems = problems_of(tmp_path / "cases")
    assert f"{bad}: cases[0] (id no-question): question: required: the question's text" in problems
    assert f"{bad}: cases[1] (id bad-facts): facts[1]: expected a non-empty string or a non-empty list of alternatives" in problems
    assert f"{bad}: cases[1] (id bad-facts): facts[2]: expected a non-empty string or a non-empty list of alternatives" in problems
    assert f"{bad}: cases[2] (id no-tags): tags: expected a non-empty list of strings" in problems
    assert any(p.startswith(f"{bad}: cases[3] (id typo): fact: unknown field") for p in problems)
    assert f"{bad}: cases[3] (id typo): facts: required: a non-empty list of strings (a nested list: alternatives)" in problems
    assert f"{bad}: cases[4] (id missing-estate): estate: '../nowhere.yaml' is not a file (paths are relative to bad.yaml)" in problems
    assert f"{bad}: cases[5]: expected a mapping with id, question, tags and facts" in problems
    assert f"{tmp_path / 'cases' / 'other.yml'}: case 'dup': id already used in {bad}" in problems
    assert f"{tmp_path / 'cases' / 'broken.yaml'}: not valid YAML (line 2)" in problems
    assert any(p.startswith(f"{tmp_path / 'cases' / 'empty.yaml'}: cases: expected a non-empty list") for p in problems)
    assert len(problems) == 11


def test_a_missing_or_empty_case_folder_says_so(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "nowhere") == [f"{tmp_path / 'nowhere'}: no such file or folder of cases"]
    (tmp_path / "empty").mkdir()
    assert problems_of(tmp_path / "empty") == [f"{tmp_path / 'empty'}: holds no *.yaml case file"]


# --- scoring and the numbers -----------------------------------------------------------------------------------


def case(**fields: Any) -> Case:
    base: dict[str, Any] = {"id": "c", "question": "q", "tags": ("t",), "facts": (), "estate": EstateRef(SAMPLE_INVENTORY)}
    return Case(**(base | fields))


def test_scoring_ignores_case_markdown_and_spacing_and_takes_any_alternative() -> None:
    c = case(facts=(("prod-db-03",), ("stopped", "已停止"), ("StopInstance by alice",)), not_facts=("bob",),
             tools=(("resource_changes",), ("find_resource", "trace")))
    answer = "**PROD-DB-03** 已停止:\n`StopInstance`   by\n alice"
    assert score(c, answer, ["trace", "resource_changes"]).passed
    verdict = score(c, "prod-db-03 is running; bob did it", ["find_server"])
    assert verdict.missing_facts == ("stopped | 已停止", "StopInstance by alice")
    assert verdict.unwanted_facts == ("bob",)
    assert verdict.missing_tools == ("resource_changes", "find_resource | trace")
    assert not verdict.passed
    failed = score(c, answer, ["trace", "resource_changes"], error="llm_unavailable: down")
    assert not failed.passed and failed.reasons() == ["turn failed: llm_unavailable: down"]


def run(case_id: str, tags: tuple[str, ...], passed: bool, calls: int, tokens: tuple[int, int], latency: float) -> CaseRun:
    verdict = Verdict() if passed else Verdict(missing_facts=("x",))
    return CaseRun(case(id=case_id, tags=tags), "a", ("find_resource",) * calls, tokens[0], tokens[1], latency, verdict)


def test_summary_counts_tags_tokens_tool_calls_and_latency_percentiles() -> None:
    runs = [run(f"c{i}", ("database", "aws") if i % 2 else ("cache",), i % 3 != 0, i % 3, (100 * i, 10), float(i))
            for i in range(1, 21)]
    summary = summarize(runs)
    assert (summary.cases, summary.passed) == (20, 14)
    assert dict((tag, (p, n)) for tag, p, n in summary.by_tag) == {"aws": (7, 10), "cache": (7, 10), "database": (7, 10)}
    assert summary.tool_calls_mean == sum(i % 3 for i in range(1, 21)) / 20
    assert summary.tokens_total == sum(100 * i + 10 for i in range(1, 21)) and summary.tokens_mean == summary.tokens_total / 20
    assert (summary.latency_p50_s, summary.latency_p95_s) == (10.0, 19.0)
    assert percentile([], 95) == 0.0 and percentile([3.0], 50) == 3.0


# --- whole runs ------------------------------------------------------------------------------------------------


def write_config(tmp_path: Path, llm: str) -> Path:
    return write(tmp_path / "config.yaml", f"{llm}\nmemory:\n  sqlite_path: {tmp_path / 'data' / 'never-used.db'}\n")


async def botgateway_eval(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
    env["COLUMNS"] = "200"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botgateway.cli", "eval", *args, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as srv:
        yield srv


SCRIPTED_CASES = """
cases:
  - id: db-by-ip
    question: what is 10.0.3.7?
    tags: [database, inventory]
    facts: [orders-db, [mysql, MySQL]]
    tools: [find_resource]
  - id: who-stopped
    question: who stopped prod-db-03?
    tags: [changes, inventory]
    facts: [alice@example.com, StopInstance]
    tools: [resource_changes]
  - id: lab-redis
    question: what is 10.9.0.5?
    tags: [cache, lab]
    facts: [lab-redis]
    not_facts: [orders-redis]
    estate:
      name: lab
      caches: [{name: lab-redis, id: redis-lab-01, engine: redis 6.2, ip: 10.9.0.5, port: 6379}]
"""


async def test_a_run_against_a_model_url_reports_exact_tool_calls_tokens_and_failures(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    # Cases run one at a time in file order, estates in turn: the scripts answer them in that order.
    server.enqueue(
        Script.tool_calls([("c1", "find_resource", {"query": "10.0.3.7"})], usage=(100, 10)),
        Script.text("10.0.3.7 is **orders-db**, MySQL 8.0.", usage=(200, 20)),
        Script.tool_calls([("c2", "resource_changes", {"resource": "prod-db-03"}),
                           ("c3", "find_resource", {"query": "prod-db-03"})], usage=(300, 30)),
        Script.text("Someone stopped it.", usage=(400, 40)),
        Script.tool_calls([("c4", "find_resource", {"query": "10.9.0.5"})], usage=(500, 50)),
        Script.text("10.9.0.5 is lab-redis (not orders-redis).", usage=(600, 60)),
    )
    cases = write(tmp_path / "cases.yaml", SCRIPTED_CASES)
    config = write_config(tmp_path, "llm:\n  provider: custom\n  base_url: http://127.0.0.1:9/v1\n  model: scripted-model\n"
                                    "  max_retries: 0")
    report = tmp_path / "report.json"
    code, stdout, stderr = await botgateway_eval(
        tmp_path, "--model", server.base_url, "--cases", str(cases), "--json", str(report), "--concurrency", "1",
        "--min-pass", "0.5", "-c", str(config))
    assert code == 1, stderr  # 1 of 3 passed: below 0.5
    data = json.loads(report.read_text(encoding="utf-8"))
    assert (data["model"], data["cases"], data["passed"]) == ("scripted-model", 3, 1)
    assert data["by_tag"] == {"cache": {"passed": 0, "cases": 1}, "changes": {"passed": 0, "cases": 1},
                              "database": {"passed": 1, "cases": 1}, "inventory": {"passed": 1, "cases": 2},
                              "lab": {"passed": 0, "cases": 1}}
    assert data["tool_calls_mean"] == round(4 / 3, 3)
    assert data["tokens_total"] == 2310 and data["tokens_mean"] == 770.0
    results = {r["id"]: r for r in data["results"]}
    assert results["db-by-ip"]["passed"] and results["db-by-ip"]["tool_calls"] == ["find_resource"]
    assert (results["db-by-ip"]["prompt_tokens"], results["db-by-ip"]["completion_tokens"]) == (300, 30)
    assert results["who-stopped"]["missing_facts"] == ["alice@example.com", "StopInstance"]
    assert results["who-stopped"]["tool_calls"] == ["resource_changes", "find_resource"]
    assert results["lab-redis"]["unwanted_facts"] == ["orders-redis"]
    assert all(r["latency_s"] > 0 for r in data["results"])
    assert data["latency_p50_s"] <= data["latency_p95_s"] == max(r["latency_s"] for r in data["results"])
    # The real tools ran on each case's estate: the inline one answered the third case, the sample the first.
    tool_messages = [m["content"] for body in server.requests for m in body["messages"] if m["role"] == "tool"]
    assert "orders-db" in tool_messages[0] and "alice@example.com" in tool_messages[1]
    assert "lab-redis" in tool_messages[3] and "orders-redis" not in tool_messages[3]
    assert all(body["model"] == "scripted-model" for body in server.requests)
    # The table names every failed case with what it missed.
    assert "Failed cases: 2" in stdout
    assert "missing 'alice@example.com'; missing 'StopInstance'" in stdout
    assert "should not say 'orders-redis'" in stdout
    assert "33%" in stdout


async def test_a_handful_of_cases_with_the_demo_model(tmp_path: Path) -> None:
    cases = write(tmp_path / "cases.yaml", """
cases:
  - {id: server-ip, question: "which server is 10.0.1.100?", tags: [server, inventory], facts: [prod-db-01]}
  - {id: server-zh, question: "10.0.3.21 是哪台服务器？", tags: [server, inventory, zh], facts: [prod-app-01]}
  - {id: impossible, question: "which server is 10.0.1.101?", tags: [server], facts: [no-such-host-xyz]}
  - {id: other-tag, question: "which server is 10.0.1.102?", tags: [database], facts: [prod-db-03]}
""")
    report = tmp_path / "report.json"
    code, stdout, stderr = await botgateway_eval(
        tmp_path, "--model", "demo", "--cases", str(cases), "--tag", "server", "--json", str(report),
        "-c", str(write_config(tmp_path, "llm: {provider: auto}")))
    assert code == 0, stderr  # the default --min-pass is 0
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["model"] == "demo model"
    assert [r["id"] for r in data["results"]] == ["server-ip", "server-zh", "impossible"]  # --tag server only
    assert (data["cases"], data["passed"], data["pass_rate"]) == (3, 2, round(2 / 3, 4))
    assert data["by_tag"]["zh"] == {"passed": 1, "cases": 1}
    assert data["by_tag"]["server"] == {"passed": 2, "cases": 3}
    assert data["results"][2]["missing_facts"] == ["no-such-host-xyz"]
    assert all(r["tool_calls"] for r in data["results"])  # the demo looked every address up
    assert data["tool_calls_mean"] == round(sum(len(r["tool_calls"]) for r in data["results"]) / 3, 3)
    assert data["tokens_total"] == sum(r["prompt_tokens"] + r["completion_tokens"] for r in data["results"]) > 0
    assert "prod-db-01" in data["results"][0]["answer"]
    assert "Eval of demo model" in stdout and "Failed cases: 1" in stdout
    assert "✓ server-ip" in stderr and "✗ impossible" in stderr
    assert not (tmp_path / "data" / "never-used.db").exists()  # history went to a scratch store


async def test_bad_input_exits_2_naming_the_file_and_field(tmp_path: Path) -> None:
    config = str(write_config(tmp_path, "llm: {provider: demo}"))
    bad = write(tmp_path / "bad.yaml", "cases:\n  - {id: a, question: q, tags: [x], facts: [1, {}]}\n")
    code, stdout, stderr = await botgateway_eval(tmp_path, "--cases", str(bad), "-c", config)
    assert code == 2 and stdout == ""
    assert f"botgateway eval: {bad}: cases[0] (id a): facts[1]: expected a non-empty string" in stderr
    broken = write(tmp_path / "broken-estate.yaml", "cases:\n  - id: a\n    question: q\n    tags: [x]\n    facts: [y]\n"
                                                    "    estate: {caches: [{ip: 10.0.0.1}]}\n")
    code, stdout, stderr = await botgateway_eval(tmp_path, "--cases", str(broken), "-c", config)
    assert code == 2 and stdout == ""
    assert f"botgateway eval: {broken}: cases[0] (id a): estate: the estate written inline cannot be used (cases a):" in stderr
    assert "caches.0.name: Field required" in stderr
    code, _, stderr = await botgateway_eval(tmp_path, "--cases", str(CASES), "--tag", "nope", "-c", config)
    assert code == 2 and "no case in" in stderr and "has the tag nope" in stderr
    code, _, stderr = await botgateway_eval(tmp_path, "--cases", str(CASES), "--model", "deepseek", "-c", config)
    assert code == 2 and "--model deepseek: provider 'deepseek' needs api_key" in stderr
    assert "Traceback" not in stderr


async def test_the_whole_suite_with_the_demo_model(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code, _, stderr = await botgateway_eval(
        tmp_path, "--model", "demo", "--cases", str(CASES), "--json", str(report), "--concurrency", "32",
        "--min-pass", str(DEMO_MIN_PASS), "-c", str(write_config(tmp_path, "llm: {provider: demo}")), timeout=110)
    data = json.loads(report.read_text(encoding="utf-8"))
    failed = {r["id"]: r["missing_facts"] + r["missing_tools"] for r in data["results"] if not r["passed"]}
    assert code == 0, f"pass rate {data['pass_rate']}; failed: {failed}\n{stderr[-2000:]}"
    assert data["cases"] == len(load_cases(CASES, SAMPLE_INVENTORY))
    assert data["pass_rate"] >= DEMO_MIN_PASS
    assert data["tool_calls_mean"] >= 1 and data["tokens_total"] > 0
