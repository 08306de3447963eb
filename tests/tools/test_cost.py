"""The ``cost`` tool on each cloud's billing API: moto's Cost Explorer, and loopback BSS and Tencent billing fakes.

Every cloud is called through its real SDK pointed at the fake; the fakes
check the request's signature key, so a wrong key is a real failure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig, ToolsConfig
from botgateway.grant import Grant, Scope
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.billing import (
    FakeAliyunBilling,
    FakeCostExplorer,
    FakeTencentBilling,
    aliyun_item,
    ce_answer,
    seed_moto_costs,
    tencent_row,
)
from tests.fakes.clouds import start_moto
from tools.charts import Bar, ChartSpec
from tools.cost import CostSource, build_cost_tools, cost_sources, parse_period

ALI_KEY, ALI_SECRET = "LTAI5tBillingKey", "ali-billing-secret-9f2c"
TC_ID, TC_KEY = "AKIDbillingsecretid", "tc-billing-secret-key-77"
AWS_SECRET = "aws-secret-do-not-leak"
Make = Callable[[ToolsConfig], ToolRegistry]
LAST = parse_period("last_month", datetime.now(UTC).date())
SERVICES = {"Amazon Elastic Compute Cloud - Compute": 812.4, "Amazon Relational Database Service": 301.25,
            "Amazon Simple Storage Service": 42.1}


@pytest.fixture(scope="module")
def moto_ce() -> Iterator[str]:
    """moto's server with one monthly by-service answer queued (every test asks the same request)."""
    server = start_moto()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    seed_moto_costs(endpoint, [ce_answer(SERVICES, LAST.start.isoformat(), LAST.end.isoformat())])
    yield endpoint
    server.stop()


@pytest.fixture
def aliyun() -> Iterator[FakeAliyunBilling]:
    bills = {LAST.month: [
        aliyun_item("ecs", "云服务器 ECS", 1200.5, subscription="Subscription"),
        aliyun_item("ecs", "云服务器 ECS", 300.0),
        aliyun_item("rds", "云数据库 RDS", 880.25),
        aliyun_item("oss", "对象存储 OSS", 19.75),
    ]}
    with FakeAliyunBilling(bills, access_key=ALI_KEY, access_secret=ALI_SECRET) as fake:
        yield fake


@pytest.fixture
def tencent() -> Iterator[FakeTencentBilling]:
    bills = {LAST.month: [tencent_row("p_cvm", "云服务器CVM", 2048.0, LAST.month),
                          tencent_row("p_cdb", "云数据库MySQL", 512.5, LAST.month)]}
    with FakeTencentBilling(bills, secret_id=TC_ID, secret_key=TC_KEY) as fake:
        yield fake


def account(name: str, key: str, secret: str, endpoint: str) -> CloudAccount:
    return CloudAccount(name=name, access_key_id=key, access_key_secret=secret,
                        regions=["cn-hangzhou"], endpoint=endpoint)


def section(*accounts: CloudAccount) -> CloudProviderConfig:
    return CloudProviderConfig(enabled=True, accounts=list(accounts), timeout_s=10)


@pytest.fixture
async def registry_of() -> AsyncIterator[Callable[[ToolsConfig], ToolRegistry]]:
    made: list[CostSource] = []

    def make(config: ToolsConfig) -> ToolRegistry:
        sources = cost_sources(config)
        made.extend(sources)
        return ToolRegistry(build_cost_tools(sources, timeout_s=30))

    yield make
    for source in made:
        await source.aclose()


def ctx(*scopes: Scope) -> ToolContext:
    grant = Grant(roles=("viewer",), tools=frozenset({"cost"}), scopes=scopes)
    return ToolContext(user_id="U1", platform="cli", grant=grant)


async def test_by_service_on_every_cloud(moto_ce: str, aliyun: FakeAliyunBilling, tencent: FakeTencentBilling,
                                         registry_of: Make) -> None:
    config = ToolsConfig(
        aws=section(account("prod", "testing", AWS_SECRET, moto_ce)),
        aliyun=section(account("cn-prod", ALI_KEY, ALI_SECRET, aliyun.endpoint)),
        tencent=section(account("gz-prod", TC_ID, TC_KEY, tencent.endpoint)),
    )
    out = await registry_of(config).execute("cost", {"by": "service", "period": "last_month"}, ctx())
    assert out.ok, out.content
    reports = {r["provider"]: r for r in out.data["reports"]}
    assert reports["aws"]["currency"] == "USD" and reports["aws"]["total"] == pytest.approx(1155.75)
    assert reports["aws"]["lines"][0] == {"key": "Amazon Elastic Compute Cloud - Compute", "amount": 812.4,
                                          "currency": "USD"}
    # The subscription and pay-as-you-go rows of ECS are one line.
    assert reports["aliyun"]["currency"] == "CNY" and reports["aliyun"]["total"] == pytest.approx(2400.5)
    assert reports["aliyun"]["lines"][0] == {"key": "云服务器 ECS", "amount": 1500.5, "currency": "CNY"}
    assert reports["tencent"]["currency"] == "CNY" and reports["tencent"]["total"] == pytest.approx(2560.5)
    assert reports["aws"]["period_start"] == LAST.start.isoformat()
    assert "total 1,155.75 USD" in out.content and "- 云服务器 ECS: 1,500.50 CNY (62.5%)" in out.content
    assert "not added together" in out.content  # USD and CNY side by side, never summed
    assert aliyun.actions() == ["QueryBillOverview"] and aliyun.calls()[0]["params"]["BillingCycle"] == LAST.month
    assert tencent.actions("DescribeBillSummaryByProduct")[0]["params"]["BeginTime"] == f"{LAST.month}-01 00:00:00"
    assert {s.account: s.api for s in out.sources} == {
        "prod": "ce:GetCostAndUsage", "cn-prod": "bss:QueryBillOverview",
        "gz-prod": "billing:DescribeBillSummaryByProduct",
    }
    assert "aws/prod 1,155.75 USD" in out.summary
    charts = {c["currency"]: c for c in out.data["charts"]}
    assert set(charts) == {"USD", "CNY"}
    spec = ChartSpec(kind="bar", title=charts["CNY"]["title"], unit=charts["CNY"]["unit"],
                     bars=tuple(Bar(b["label"], b["value"]) for b in charts["CNY"]["bars"]))
    assert spec.bars[0] == Bar("gz-prod: 云服务器CVM", 2048.0) and len(spec.bars) == 5


async def test_scoped_asker_never_calls_an_account_outside_the_scope(moto_ce: str, aliyun: FakeAliyunBilling,
                                                                     registry_of: Make) -> None:
    with FakeCostExplorer(ce_answer({"Amazon EC2": 9.0}, "2000-01-01", "2000-02-01")) as prod:
        config = ToolsConfig(
            aws=section(account("prod", "testing", AWS_SECRET, prod.endpoint),
                        account("staging", "testing", AWS_SECRET, moto_ce)),
            aliyun=section(account("cn-prod", ALI_KEY, ALI_SECRET, aliyun.endpoint)),
        )
        out = await registry_of(config).execute("cost", {}, ctx(Scope(provider="aws", account="staging")))
        assert out.ok, out.content
        assert [(r["provider"], r["account"]) for r in out.data["reports"]] == [("aws", "staging")]
        assert prod.calls() == [] and aliyun.calls() == []
        assert "prod" not in out.content.replace("staging", "")

        # The same registry, unscoped, does reach the prod fake: the check above is not vacuous.
        everything = await registry_of(config).execute("cost", {}, ctx())
        assert everything.ok and [c["action"] for c in prod.calls()] == ["GetCostAndUsage"]


async def test_a_failing_account_is_named_while_the_others_answer(aliyun: FakeAliyunBilling,
                                                                  tencent: FakeTencentBilling,
                                                                  registry_of: Make) -> None:
    config = ToolsConfig(
        aliyun=section(account("cn-prod", ALI_KEY, ALI_SECRET, aliyun.endpoint),
                       account("cn-old", "LTAI5tRetiredKey", "retired-secret-41", aliyun.endpoint)),
        tencent=section(account("gz-prod", TC_ID, "wrong-tencent-secret-5", tencent.endpoint)),
    )
    out = await registry_of(config).execute("cost", {"period": LAST.month}, ctx())
    assert out.ok, out.content
    assert [r["account"] for r in out.data["reports"]] == ["cn-prod"]
    failed = {f["account"]: f["reason"] for f in out.data["failures"]}
    assert set(failed) == {"cn-old", "gz-prod"}
    assert "invalid credentials" in failed["cn-old"] and "invalid credentials" in failed["gz-prod"]
    assert "Alibaba Cloud account cn-old: not read: invalid credentials" in out.content
    assert "2 account(s) not read" in out.summary
    text = out.content + out.summary + json.dumps(out.data, ensure_ascii=False)
    for secret in (ALI_SECRET, "retired-secret-41", "wrong-tencent-secret-5", TC_KEY, AWS_SECRET):
        assert secret not in text


async def test_bad_input_is_a_clear_error(aliyun: FakeAliyunBilling, registry_of: Make) -> None:
    registry = registry_of(ToolsConfig(aliyun=section(account("cn-prod", ALI_KEY, ALI_SECRET, aliyun.endpoint))))
    bad = await registry.execute("cost", {"period": "last quarter"}, ctx())
    assert not bad.ok and "period 'last quarter' is not understood" in bad.error and "YYYY-MM" in bad.error
    future = await registry.execute("cost", {"period": "2999-01"}, ctx())
    assert not future.ok and "in the future" in future.error
    untagged = await registry.execute("cost", {"by": "tag"}, ctx())
    assert not untagged.ok and "tag_key" in untagged.error
    nothing = await registry.execute("cost", {}, ctx(Scope(provider="aws")))
    assert not nothing.ok and "no cloud account" in nothing.error
    # A monthly-only bill cannot answer a rolling window: named, not a crash.
    rolling = await registry.execute("cost", {"period": "last_30d"}, ctx())
    assert rolling.ok and "bills by calendar month" in rolling.content
    assert aliyun.calls() == []


async def test_permission_denial_names_the_billing_action(tencent: FakeTencentBilling,
                                                          registry_of: Make) -> None:
    tencent.denied_actions.add("DescribeBillSummaryByProduct")
    registry = registry_of(ToolsConfig(tencent=section(account("gz-prod", TC_ID, TC_KEY, tencent.endpoint))))
    out = await registry.execute("cost", {}, ctx())
    assert out.ok and "needs billing:DescribeBillSummaryByProduct (CAM)" in out.content
