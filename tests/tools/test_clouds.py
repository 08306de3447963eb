"""Cloud lookups through the real SDKs: Alibaba Cloud and Tencent Cloud against local fake
APIs, AWS against moto's server, all on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import pytest
import structlog.testing

from botgateway.config import CloudAccount, CloudProviderConfig, ConfigError, InventoryConfig, ToolsConfig
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.clouds import FakeAliyun, FakeTencent, aliyun_instance, start_moto, tencent_instance
from tools.catalog import Toolset, build_providers, build_toolset
from tools.cloud_tools import build_cloud_tools
from tools.providers.aliyun import AliyunProvider
from tools.providers.aws import AwsProvider
from tools.providers.sdk import require_sdk

CTX = ToolContext(user_id="U1", platform="cli")
ALIYUN_KEY = "test-key-id"
ALIYUN_SECRET = "ALIYUN-SECRET-do-not-print"


def hangzhou() -> list[dict[str, Any]]:
    return [
        aliyun_instance("i-bp1aaaaaaaaaaaa01", "prod-api-01", "172.16.1.10", eip="47.96.1.10", tags={"env": "prod"}),
        aliyun_instance("i-bp1aaaaaaaaaaaa02", "prod-api-02", "172.16.1.11", public_ip="47.96.1.11", tags={"env": "prod"}),
        aliyun_instance("i-bp1aaaaaaaaaaaa03", "prod-worker-01", "172.16.1.12", status="Stopped"),
        aliyun_instance("i-bp1aaaaaaaaaaaa04", "stg-api-01", "172.16.2.10", tags={"env": "staging"}),
        aliyun_instance("i-bp1aaaaaaaaaaaa05", "stg-worker-01", "172.16.2.11", status="Stopped", tags={"env": "staging"}),
    ]


@pytest.fixture
def aliyun() -> Iterator[FakeAliyun]:
    with FakeAliyun(
        {"cn-hangzhou": hangzhou(), "cn-beijing": [aliyun_instance("i-2zeaaaaaaaaaaaa01", "bj-db-01", "172.17.0.5", region="cn-beijing", zone="cn-beijing-k")]},
        denied_regions={"cn-shanghai"},
    ) as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def tencent() -> Iterator[FakeTencent]:
    with FakeTencent(
        {
            "ap-guangzhou": [
                tencent_instance("ins-gz000001", "gz-web-01", "10.66.0.11", public_ip="119.29.1.11", tags={"env": "prod"}),
                tencent_instance("ins-gz000002", "gz-web-02", "10.66.0.12"),
                tencent_instance("ins-gz000003", "gz-batch-01", "10.66.0.13", state="STOPPED"),
                tencent_instance("ins-gz000004", "gz-batch-02", "10.66.0.14", state="STOPPED"),
                tencent_instance("ins-gz000005", "gz-batch-03", "10.66.0.15", state="STOPPED"),
            ],
        },
        access_key="tc-secret-id",
        denied_regions={"ap-shanghai"},
    ) as fake:
        yield fake  # type: ignore[misc]


def aliyun_section(fake: FakeAliyun, regions: list[str], **kw: Any) -> CloudProviderConfig:
    account = CloudAccount(
        name="prod", access_key_id=ALIYUN_KEY, access_key_secret=ALIYUN_SECRET, regions=regions, endpoint=fake.endpoint  # type: ignore[arg-type]
    )
    return CloudProviderConfig(enabled=True, accounts=[account], **kw)


def tencent_section(fake: FakeTencent, regions: list[str], **kw: Any) -> CloudProviderConfig:
    account = CloudAccount(access_key_id="tc-secret-id", access_key_secret="tc-secret-key", regions=regions, endpoint=fake.endpoint)  # type: ignore[arg-type]
    return CloudProviderConfig(enabled=True, accounts=[account], **kw)


@pytest.fixture
async def toolsets() -> AsyncIterator[list[Toolset]]:
    made: list[Toolset] = []
    yield made
    for toolset in made:
        await toolset.aclose()


async def make(toolsets: list[Toolset], **sections: Any) -> ToolRegistry:
    sections.setdefault("inventory", InventoryConfig(enabled=False))
    toolset = await build_toolset(ToolsConfig(**sections))
    toolsets.append(toolset)
    return ToolRegistry(toolset.tools)


# --- Alibaba Cloud -----------------------------------------------------------------------------------


async def test_ecs_lookup_by_private_ip_asks_every_address_filter_and_reports_a_denied_region(
    aliyun: FakeAliyun, toolsets: list[Toolset]
) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou", "cn-shanghai"]))
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)

    assert out.ok, out.content
    assert out.summary == "1 instance found: prod-api-01; Alibaba Cloud failed"
    assert "prod-api-01 [i-bp1aaaaaaaaaaaa01]" in out.content
    assert "running" in out.content and "4 vCPU/16 GiB" in out.content and "public 47.96.1.10" in out.content
    assert "Alibaba Cloud: permission denied in cn-shanghai (account prod)" in out.content
    assert ALIYUN_SECRET not in out.content

    calls = aliyun.calls("cn-hangzhou")
    assert {c["action"] for c in calls} == {"DescribeInstances"}
    filters = sorted(next(k for k in c["params"] if k.endswith("Addresses")) for c in calls)
    assert filters == ["EipAddresses", "PrivateIpAddresses", "PublicIpAddresses"]
    assert all(c["params"][f] == '["172.16.1.10"]' for c, f in ((c, next(k for k in c["params"] if k.endswith("Addresses"))) for c in calls))


async def test_ecs_lookup_finds_an_elastic_ip(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou", "cn-beijing"]))
    out = await registry.execute("search_ecs_by_ip", {"ip": "47.96.1.10"}, CTX)
    assert out.ok and out.summary.startswith("1 instance found: ")
    assert "i-bp1aaaaaaaaaaaa01" in out.content and "private 172.16.1.10" in out.content


async def test_ecs_list_walks_every_page(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"]))
    out = await registry.execute("list_servers", {"provider": "aliyun", "limit": 50}, CTX)
    assert out.ok and out.summary == "5 instances found"
    for n in range(1, 6):
        assert f"i-bp1aaaaaaaaaaaa0{n}" in out.content
    calls = aliyun.calls("cn-hangzhou")
    assert len(calls) == 3  # page cap 2: 2 + 2 + 1
    assert "NextToken" not in calls[0]["params"] and all(c["params"].get("NextToken") for c in calls[1:])

    stopped = await registry.execute("list_servers", {"status": "stopped"}, CTX)
    assert stopped.summary.startswith("2 instances found: ")
    assert aliyun.calls()[-1]["params"]["Status"] == "Stopped"


async def test_ecs_results_are_cached_per_query(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"]))
    first = await registry.execute("search_ecs_by_ip", {"ip": "172.16.2.10"}, CTX)
    asked = len(aliyun.calls())
    again = await registry.execute("search_ecs_by_ip", {"ip": " 172.16.2.10 "}, CTX)
    assert again.content == first.content and len(aliyun.calls()) == asked
    await registry.execute("search_ecs_by_ip", {"ip": "172.16.2.11"}, CTX)
    assert len(aliyun.calls()) > asked


async def test_ecs_cache_can_be_disabled(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"], cache_ttl_s=0))
    await registry.execute("search_ecs_by_ip", {"ip": "172.16.2.10"}, CTX)
    asked = len(aliyun.calls())
    await registry.execute("search_ecs_by_ip", {"ip": "172.16.2.10"}, CTX)
    assert len(aliyun.calls()) == 2 * asked


async def test_every_region_denied_is_a_tool_error(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-shanghai"]))
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    assert not out.ok
    assert out.summary == "Alibaba Cloud: permission denied in cn-shanghai (account prod)"


async def test_wrong_access_key_is_reported_without_the_secret(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    account = CloudAccount(access_key_id="wrong-id", access_key_secret=ALIYUN_SECRET, regions=["cn-hangzhou"], endpoint=aliyun.endpoint)  # type: ignore[arg-type]
    registry = await make(toolsets, aliyun=CloudProviderConfig(enabled=True, accounts=[account]))
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    assert not out.ok and "invalid credentials" in out.content and ALIYUN_SECRET not in out.content


async def test_malformed_ip_is_rejected_before_any_api_call(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"]))
    out = await registry.execute("search_ecs_by_ip", {"ip": "10.0.1.300"}, CTX)
    assert not out.ok
    assert "ip: '10.0.1.300' is not a valid IPv4 or IPv6 address" in out.content
    assert aliyun.calls() == []


async def test_clients_are_built_when_the_toolset_starts_not_by_the_first_question(
    aliyun: FakeAliyun, toolsets: list[Toolset], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no profile files
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_ECS_METADATA"):
        monkeypatch.delenv(name, raising=False)
    accounts = [
        CloudAccount(name="prod", access_key_id=ALIYUN_KEY, access_key_secret="s", regions=["cn-hangzhou", "cn-beijing"], endpoint=aliyun.endpoint),  # type: ignore[arg-type]
        CloudAccount(name="nokey", regions=["cn-hangzhou"], endpoint=aliyun.endpoint),
    ]
    with structlog.testing.capture_logs() as logs:
        registry = await make(toolsets, aliyun=CloudProviderConfig(enabled=True, accounts=accounts))
    started = [e for e in logs if e["event"] == "provider_started"]
    assert [(e["provider"], e["clients"], e["failed"]) for e in started] == [("aliyun", 2, 1)]
    failed = [e for e in logs if e["event"] == "provider_client_failed"]
    assert [(e["account"], e["region"]) for e in failed] == [("nokey", "cn-hangzhou")]
    assert failed[0]["reason"].startswith("no credentials")
    assert aliyun.calls() == []  # building a client asks the API nothing

    # A client that could not be built at start is tried again, and its reason reported, per question.
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    assert out.ok and "prod-api-01" in out.content
    assert "Alibaba Cloud: no credentials: set access_key_id/access_key_secret" in out.content and "account nokey" in out.content


async def test_slow_region_times_out_while_others_answer(toolsets: list[Toolset]) -> None:
    # The slow region never answers, so it times out however long the fast one takes; the
    # fast one has a whole second, which a busy machine does not eat (its client is built at start).
    with FakeAliyun({"cn-hangzhou": hangzhou()}, stall=True) as slow, FakeAliyun({"cn-beijing": hangzhou()}) as fast:
        accounts = [
            CloudAccount(name="slow", access_key_id=ALIYUN_KEY, access_key_secret="s", regions=["cn-hangzhou"], endpoint=slow.endpoint),  # type: ignore[arg-type]
            CloudAccount(name="fast", access_key_id=ALIYUN_KEY, access_key_secret="s", regions=["cn-beijing"], endpoint=fast.endpoint),  # type: ignore[arg-type]
        ]
        registry = await make(toolsets, aliyun=CloudProviderConfig(enabled=True, accounts=accounts, timeout_s=1))
        out = await asyncio.wait_for(registry.execute("search_ecs_by_ip", {"ip": "172.16.2.10"}, CTX), 10)
        assert out.ok and out.summary == "1 instance found: stg-api-01; Alibaba Cloud failed"
        assert "Alibaba Cloud: timed out after 1 s in cn-hangzhou (account slow)" in out.content
        assert "account=fast" in out.content


# --- Tencent Cloud ---------------------------------------------------------------------------------------


async def test_cvm_lookup_by_private_and_public_ip(tencent: FakeTencent, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, tencent=tencent_section(tencent, ["ap-guangzhou", "ap-shanghai"]))
    out = await registry.execute("search_cvm_by_ip", {"ip": "10.66.0.11"}, CTX)
    assert out.ok and out.summary == "1 instance found: gz-web-01; Tencent Cloud failed"
    assert "gz-web-01 [ins-gz000001]" in out.content and "ap-guangzhou/ap-guangzhou-3" in out.content
    assert "4 vCPU/8 GiB" in out.content and "public 119.29.1.11" in out.content
    assert "Tencent Cloud: permission denied in ap-shanghai" in out.content

    calls = [c for c in tencent.calls("ap-guangzhou") if c["action"] == "DescribeInstances"]
    names = sorted(f["Name"] for c in calls for f in c["params"]["Filters"])
    assert names == ["private-ip-address", "public-ip-address"]
    assert all(c["params"]["Filters"][0]["Values"] == ["10.66.0.11"] for c in calls)

    public = await registry.execute("search_cvm_by_ip", {"ip": "119.29.1.11"}, CTX)
    assert public.ok and "ins-gz000001" in public.content


async def test_cvm_list_pages_with_offset_and_filters_state(tencent: FakeTencent, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, tencent=tencent_section(tencent, ["ap-guangzhou"]))
    out = await registry.execute("list_servers", {"status": "stopped", "region": "ap-guangzhou"}, CTX)
    assert out.ok and out.summary.startswith("3 instances found: ")
    assert all(f"gz-batch-0{n}" in out.content for n in (1, 2, 3))
    calls = tencent.calls("ap-guangzhou")
    assert [c["params"]["Offset"] for c in calls] == [0, 2]
    assert calls[0]["params"]["Filters"] == [{"Name": "instance-state", "Values": ["STOPPED"]}]


async def test_cvm_lookup_by_instance_id_only_asks_tencent(
    tencent: FakeTencent, aliyun: FakeAliyun, toolsets: list[Toolset]
) -> None:
    registry = await make(
        toolsets,
        tencent=tencent_section(tencent, ["ap-guangzhou"]),
        aliyun=aliyun_section(aliyun, ["cn-hangzhou"]),
    )
    out = await registry.execute("find_server", {"query": "ins-gz000002"}, CTX)
    assert out.ok and "gz-web-02 [ins-gz000002]" in out.content
    assert any(c["params"].get("InstanceIds") == ["ins-gz000002"] for c in tencent.calls())
    assert not any("InstanceIds" in c["params"] for c in aliyun.calls())


# --- AWS (moto) -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = start_moto()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def run_instances(endpoint: str, region: str, specs: list[tuple[str, str, str]]) -> dict[str, dict[str, Any]]:
    """Start instances (name, private ip, type) in the default VPC; returns them by name."""
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing")
    subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    subnet = sorted(subnet, key=lambda s: s["CidrBlock"])[0]
    out = {}
    for name, ip, itype in specs:
        answer = ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=itype, SubnetId=subnet["SubnetId"],
            PrivateIpAddress=ip,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": name}, {"Key": "team", "Value": "sre"}]}],
        )
        out[name] = answer["Instances"][0]
    return out


def aws_section(endpoint: str, regions: list[str]) -> CloudProviderConfig:
    account = CloudAccount(access_key_id="testing", access_key_secret="testing", regions=regions, endpoint=endpoint)  # type: ignore[arg-type]
    return CloudProviderConfig(enabled=True, accounts=[account])


async def test_ec2_lookup_by_private_and_public_ip(moto_endpoint: str, toolsets: list[Toolset]) -> None:
    made = run_instances(moto_endpoint, "eu-west-1", [("billing-api", "172.31.0.40", "m5.large"), ("billing-db", "172.31.0.41", "r5.xlarge")])
    registry = await make(toolsets, aws=aws_section(moto_endpoint, ["eu-west-1", "eu-central-1"]))
    out = await registry.execute("search_ec2_by_ip", {"ip": "172.31.0.41"}, CTX)
    assert out.ok and out.summary.startswith("1 instance found: "), out.content
    db = made["billing-db"]
    assert f"billing-db [{db['InstanceId']}]" in out.content
    assert "r5.xlarge" in out.content and "32 GiB" in out.content  # memory from describe_instance_types
    assert "tags Name=billing-db,team=sre" in out.content

    public_ip = made["billing-api"]["PublicIpAddress"]
    by_public = await registry.execute("search_ec2_by_ip", {"ip": public_ip}, CTX)
    assert by_public.ok and made["billing-api"]["InstanceId"] in by_public.content


async def test_ec2_list_paginates_and_filters_by_tag(moto_endpoint: str, toolsets: list[Toolset]) -> None:
    run_instances(moto_endpoint, "ap-northeast-1", [(f"batch-{n}", f"172.31.0.{60 + n}", "t3.micro") for n in range(7)])
    provider = AwsProvider(aws_section(moto_endpoint, ["ap-northeast-1"]), page_size=5)
    try:
        tools, _ = build_cloud_tools([provider], timeout_s=None)
        registry = ToolRegistry(tools)
        out = await registry.execute("list_servers", {"name": "batch-", "limit": 100}, CTX)
        assert out.ok and out.summary == "7 instances found", out.content
        tagged = await registry.execute("list_servers", {"tag": "team=sre", "limit": 3}, CTX)
        # Paging stops once more than the limit matched: the count is a lower bound, and says so.
        assert tagged.summary == "4+ instances found" and tagged.content.count("\n- ") == 3
        assert tagged.content.startswith("at least 4 instances match") and "showing the first 3" in tagged.content
    finally:
        await provider.aclose()


# --- across providers, and configuration --------------------------------------------------------------


async def test_find_server_and_list_servers_span_every_provider(
    aliyun: FakeAliyun, tencent: FakeTencent, toolsets: list[Toolset]
) -> None:
    registry = await make(
        toolsets,
        inventory=InventoryConfig(),
        aliyun=aliyun_section(aliyun, ["cn-hangzhou"]),
        tencent=tencent_section(tencent, ["ap-guangzhou"]),
    )
    assert set(registry.names) >= {"search_inventory_by_ip", "search_ecs_by_ip", "search_cvm_by_ip", "find_server", "list_servers"}
    assert "search_ec2_by_ip" not in registry.names  # AWS is not configured
    assert registry.read_only_names() == set(registry.names)  # lookups only: all read-only

    by_name = await registry.execute("find_server", {"query": "web"}, CTX)
    assert by_name.ok
    assert "gz-web-01" in by_name.content and "prod-web-01" in by_name.content  # Tencent and the inventory

    stopped = await registry.execute("list_servers", {"status": "stopped", "limit": 100}, CTX)
    assert stopped.ok
    for name in ("prod-worker-01", "gz-batch-01", "prod-db-03"):
        assert name in stopped.content
    assert "searched: Static inventory, Alibaba Cloud, Tencent Cloud" in stopped.content

    unknown_region = await registry.execute("list_servers", {"region": "eu-west-9"}, CTX)
    assert unknown_region.ok and "region eu-west-9 is not configured for Alibaba Cloud" in unknown_region.content

    typo = await registry.execute("find_server", {"query": "10.0.1.300"}, CTX)
    assert not typo.ok and "not a valid IP address" in typo.content


def test_enabled_provider_without_accounts_or_regions_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        build_providers(
            ToolsConfig(
                inventory=InventoryConfig(enabled=False),
                aliyun=CloudProviderConfig(enabled=True),
                tencent=CloudProviderConfig(enabled=True, accounts=[CloudAccount(name="x")]),
            )
        )
    problems = "\n".join(caught.value.problems)
    assert "tools.aliyun.accounts: the provider is enabled but has no account" in problems
    assert "tools.tencent.accounts[0].regions: list the regions to search (for example 'ap-guangzhou')" in problems


def test_missing_sdk_names_the_extra_to_install() -> None:
    with pytest.raises(ConfigError) as caught:
        require_sdk(["botgateway_no_such_sdk.ecs"], AliyunProvider, "tools.aliyun")
    assert caught.value.problems == ["tools.aliyun: the SDK is not installed; run: pip install 'botgateway[aliyun]'"]


async def test_credentials_come_from_the_sdks_environment_variables(
    aliyun: FakeAliyun, tencent: FakeTencent, toolsets: list[Toolset], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no profile files
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", ALIYUN_KEY)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "env-secret")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", "tc-secret-id")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", "env-secret")
    registry = await make(
        toolsets,
        aliyun=CloudProviderConfig(enabled=True, accounts=[CloudAccount(regions=["cn-hangzhou"], endpoint=aliyun.endpoint)]),
        tencent=CloudProviderConfig(enabled=True, accounts=[CloudAccount(regions=["ap-guangzhou"], endpoint=tencent.endpoint)]),
    )
    ecs = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.11"}, CTX)
    cvm = await registry.execute("search_cvm_by_ip", {"ip": "10.66.0.12"}, CTX)
    assert ecs.ok and "prod-api-02" in ecs.content
    assert cvm.ok and "gz-web-02" in cvm.content


async def test_missing_credentials_are_reported_without_probing_anything(
    aliyun: FakeAliyun, tencent: FakeTencent, toolsets: list[Toolset], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_ECS_METADATA",
                 "TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY", "TENCENTCLOUD_ROLE_NAME"):
        monkeypatch.delenv(name, raising=False)
    registry = await make(
        toolsets,
        aliyun=CloudProviderConfig(enabled=True, accounts=[CloudAccount(regions=["cn-hangzhou"], endpoint=aliyun.endpoint)]),
        tencent=CloudProviderConfig(enabled=True, accounts=[CloudAccount(regions=["ap-guangzhou"], endpoint=tencent.endpoint)]),
    )
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.11"}, CTX)
    assert not out.ok
    assert "Alibaba Cloud: no credentials: set access_key_id/access_key_secret, ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET" in out.content
    assert aliyun.calls() == []
    out = await registry.execute("search_cvm_by_ip", {"ip": "10.66.0.12"}, CTX)
    assert not out.ok
    assert "Tencent Cloud: no credentials: set access_key_id/access_key_secret, TENCENTCLOUD_SECRET_ID/KEY" in out.content
    assert tencent.calls() == []
