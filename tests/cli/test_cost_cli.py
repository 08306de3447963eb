"""``botgateway tools call cost`` as an operator runs it, against the billing fakes of all three clouds."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.fakes.billing import (
    FakeAliyunBilling,
    FakeCostExplorer,
    FakeTencentBilling,
    aliyun_item,
    ce_answer,
    tencent_row,
)
from tests.paths import REPO, SAMPLE_INVENTORY
from tools.cost import parse_period

LAST = parse_period("last_month", datetime.now(UTC).date())
ALI_KEY, ALI_SECRET = "LTAI5tCliBilling", "ali-cli-secret-3e1"
TC_ID, TC_KEY = "AKIDclibilling", "tc-cli-secret-8d2"
AWS_KEY, AWS_SECRET = "AKIACLIBILLING", "aws-cli-secret-71f"


@pytest.fixture
def clouds() -> Iterator[tuple[FakeCostExplorer, FakeAliyunBilling, FakeTencentBilling]]:
    answer = ce_answer({"Amazon Elastic Compute Cloud - Compute": 812.4, "Amazon Simple Storage Service": 42.1},
                       LAST.start.isoformat(), LAST.end.isoformat())
    bills = {LAST.month: [aliyun_item("ecs", "云服务器 ECS", 1200.5, subscription="Subscription"),
                          aliyun_item("ecs", "云服务器 ECS", 300.0), aliyun_item("rds", "云数据库 RDS", 880.25)]}
    rows = {LAST.month: [tencent_row("p_cvm", "云服务器CVM", 2048.0, LAST.month)]}
    with (FakeCostExplorer(answer, access_key=AWS_KEY) as aws,
          FakeAliyunBilling(bills, access_key=ALI_KEY, access_secret=ALI_SECRET) as aliyun,
          FakeTencentBilling(rows, secret_id=TC_ID, secret_key=TC_KEY) as tencent):
        yield aws, aliyun, tencent


def _account(name: str, key: str, secret: str, endpoint: str, region: str) -> dict[str, object]:
    return {"name": name, "access_key_id": key, "access_key_secret": secret, "regions": [region], "endpoint": endpoint}


def _config(path: Path, aws: str, aliyun: str, tencent: str) -> Path:
    """An operator's config: the sample inventory and one account per cloud, each pointed at its fake."""
    tools = {
        "inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)},
        "aws": {"enabled": True, "accounts": [_account("prod", AWS_KEY, AWS_SECRET, aws, "us-east-1")]},
        "aliyun": {"enabled": True, "accounts": [_account("cn-prod", ALI_KEY, ALI_SECRET, aliyun, "cn-hangzhou")]},
        "tencent": {"enabled": True, "accounts": [_account("gz-prod", TC_ID, TC_KEY, tencent, "ap-guangzhou")]},
    }
    config = path / "config.yaml"
    config.write_text(yaml.safe_dump({"llm": {"provider": "demo"}, "tools": tools}, allow_unicode=True))
    return config


def _botgateway(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a narrow terminal (72 columns), with none of the machine's cloud or model settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "ALIBABA_CLOUD_", "AWS_", "TENCENT"))}
    env |= {"PYTHONPATH": str(REPO), "COLUMNS": "72"}
    return subprocess.run([sys.executable, "-m", "botgateway.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=90, check=False)


def test_cost_by_service_last_month_prints_each_accounts_breakdown(
    tmp_path: Path, clouds: tuple[FakeCostExplorer, FakeAliyunBilling, FakeTencentBilling]
) -> None:
    aws, aliyun, tencent = clouds
    config = _config(tmp_path, aws.endpoint, aliyun.endpoint, tencent.endpoint)
    run = _botgateway("tools", "call", "cost", "--arg", "by=service", "--arg", "period=last_month", "-c", str(config),
                      cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    # Every line whole, however narrow the terminal: the summary first, then each account's total and its lines.
    assert lines[0].startswith("✓ cost: cost last_month by service: aws/prod 854.50 USD, aliyun/cn-prod 2,380.75 CNY, "
                               "tencent/gz-prod 2,048.00 CNY (")
    start, end = LAST.start.isoformat(), LAST.last_day.isoformat()
    breakdown = [
        f"AWS account prod, {start} to {end}, by service: total 854.50 USD",
        "- Amazon Elastic Compute Cloud - Compute: 812.40 USD (95.1%)",
        "- Amazon Simple Storage Service: 42.10 USD (4.9%)",
        f"Alibaba Cloud account cn-prod, {start} to {end}, by service: total 2,380.75 CNY",
        "- 云服务器 ECS: 1,500.50 CNY (63.0%)",
        "- 云数据库 RDS: 880.25 CNY (37.0%)",
        f"Tencent Cloud account gz-prod, {start} to {end}, by service: total 2,048.00 CNY",
        "- 云服务器CVM: 2,048.00 CNY (100.0%)",
        "Note: totals are in each account's own currency (CNY, USD); they are not added together.",
    ]
    assert lines[1:10] == breakdown, run.stdout
    # The model's notes about the card's charts are not the operator's: a chart line stands in for each.
    assert "refer to it as the chart" not in run.stdout
    assert all(line.startswith("chart: Cost by service, last_month (") for line in lines[10:]), lines[10:]
    # Each cloud's billing API was asked for last month, once.
    assert [c["action"] for c in aws.calls()] == ["GetCostAndUsage"]
    assert aliyun.actions() == ["QueryBillOverview"] and aliyun.calls()[0]["params"]["BillingCycle"] == LAST.month
    assert [c["action"] for c in tencent.calls()] == ["DescribeBillSummaryByProduct"]
    for secret in (ALI_SECRET, TC_KEY, AWS_SECRET):
        assert secret not in run.stdout + run.stderr
