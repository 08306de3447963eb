"""Provenance of lookups: each result names the provider, account, region and API that answered, and when; a
cached answer says so and keeps its time; a Refresh (``ToolContext.fresh``) asks the cloud again."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, McpServerConfig, ToolsConfig
from botgateway.grant import Grant, Scope
from botgateway.tooling import Source, ToolContext, ToolRegistry, tool_result_body
from tests.fakes.clouds import FakeAliyun, FakeTencent, aliyun_instance, start_moto, tencent_instance
from tests.paths import FAKES, SAMPLE_INVENTORY
from tools.catalog import Toolset, build_toolset

CTX = ToolContext(user_id="U1", platform="cli")
FRESH = replace(CTX, fresh=True)


@pytest.fixture
def aliyun() -> Iterator[FakeAliyun]:
    with FakeAliyun(
        {
            "cn-hangzhou": [aliyun_instance("i-bp1aaaaaaaaaaaa01", "prod-api-01", "172.16.1.10")],
            "cn-beijing": [aliyun_instance("i-2zeaaaaaaaaaaaa01", "bj-db-01", "172.17.0.5", region="cn-beijing")],
        },
        denied_regions={"cn-shanghai"},
    ) as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def tencent() -> Iterator[FakeTencent]:
    with FakeTencent(
        {"ap-guangzhou": [tencent_instance("ins-gz000001", "gz-web-01", "10.66.0.11")]}, access_key="tc-secret-id"
    ) as fake:
        yield fake  # type: ignore[misc]


def aliyun_section(fake: FakeAliyun, regions: list[str], **kw: Any) -> CloudProviderConfig:
    account = CloudAccount(
        name="prod", access_key_id="test-key-id", access_key_secret="secret",  # type: ignore[arg-type]
        regions=regions, endpoint=fake.endpoint,
    )
    return CloudProviderConfig(enabled=True, accounts=[account], **kw)


def tencent_section(fake: FakeTencent, regions: list[str]) -> CloudProviderConfig:
    account = CloudAccount(
        access_key_id="tc-secret-id", access_key_secret="tc-key",  # type: ignore[arg-type]
        regions=regions, endpoint=fake.endpoint,
    )
    return CloudProviderConfig(enabled=True, accounts=[account])


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


def where(sources: tuple[Source, ...]) -> list[tuple[str, str, str, str, str]]:
    return [(s.provider, s.label, s.account, s.region, s.api) for s in sources]


async def test_a_lookup_names_each_account_and_region_that_answered_and_when(
    aliyun: FakeAliyun, toolsets: list[Toolset]
) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou", "cn-beijing", "cn-shanghai"]))
    before = time.time()
    out = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    after = time.time()

    assert out.ok, out.content
    # cn-shanghai was asked but refused: it is a failure, not a source
    assert {r["region"] for r in aliyun.calls()} == {"cn-hangzhou", "cn-beijing", "cn-shanghai"}
    assert sorted(where(out.sources)) == [
        ("aliyun", "Alibaba Cloud", "prod", "cn-beijing", "DescribeInstances"),
        ("aliyun", "Alibaba Cloud", "prod", "cn-hangzhou", "DescribeInstances"),
    ]
    assert all(before <= s.fetched_at <= after and not s.cached for s in out.sources)


async def test_a_cached_answer_says_so_keeps_its_time_and_a_fresh_call_asks_the_cloud_again(
    aliyun: FakeAliyun, toolsets: list[Toolset]
) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"], cache_ttl_s=600))
    first = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    asked = len(aliyun.calls())
    [fetched] = first.sources
    assert not fetched.cached

    cached = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    assert len(aliyun.calls()) == asked, "served from the cache"
    assert cached.sources == (replace(fetched, cached=True),)  # the original fetch time, marked cached

    refreshed = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, FRESH)
    assert len(aliyun.calls()) == 2 * asked, "a Refresh asks the cloud again"
    [new] = refreshed.sources
    assert not new.cached and new.fetched_at >= fetched.fetched_at

    # The fresh answer replaced the cached one.
    after = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    assert len(aliyun.calls()) == 2 * asked and after.sources == (replace(new, cached=True),)


async def test_find_server_names_every_provider_asked_once(
    aliyun: FakeAliyun, tencent: FakeTencent, toolsets: list[Toolset]
) -> None:
    registry = await make(
        toolsets,
        inventory=InventoryConfig(enabled=True, path=str(SAMPLE_INVENTORY)),
        aliyun=aliyun_section(aliyun, ["cn-hangzhou"]),
        tencent=tencent_section(tencent, ["ap-guangzhou"]),
    )
    # Tencent's id: looked up by id there and by name everywhere; each region is one source
    out = await registry.execute("find_server", {"query": "ins-gz000001"}, CTX)
    assert out.ok and "gz-web-01" in out.content, out.content
    assert any("InstanceIds" in c["params"] for c in tencent.calls())
    assert sorted(where(out.sources)) == [
        ("aliyun", "Alibaba Cloud", "prod", "cn-hangzhou", "DescribeInstances"),
        ("inventory", "static inventory", "", "", "inventory file"),
        ("tencent", "Tencent Cloud", "default", "ap-guangzhou", "DescribeInstances (CVM)"),
    ]


async def test_only_the_regions_the_asker_may_search_are_sources(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou", "cn-beijing"]))
    beijing = Scope(provider="aliyun", region="cn-beijing")
    grant = Grant(roles=("viewer",), tools=frozenset({"list_servers"}), scopes=(beijing,))
    ctx = replace(CTX, roles=frozenset({"viewer"}), grant=grant)
    out = await registry.execute("list_servers", {}, ctx)
    assert out.ok, out.content
    assert {r["region"] for r in aliyun.calls()} == {"cn-beijing"}
    assert where(out.sources) == [("aliyun", "Alibaba Cloud", "prod", "cn-beijing", "DescribeInstances")]


async def test_the_model_reads_the_sources_with_the_result(aliyun: FakeAliyun, toolsets: list[Toolset]) -> None:
    registry = await make(toolsets, aliyun=aliyun_section(aliyun, ["cn-hangzhou"], cache_ttl_s=600))
    await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    cached = await registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, CTX)
    [source] = cached.sources
    later = ToolRegistry(wall_clock=lambda: source.fetched_at + 40)  # the same outcome, read 40 s after the fetch
    text = later.model_text(cached, tool="search_ecs_by_ip", call_id="c1")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(source.fetched_at))
    assert text.startswith(
        '<tool_result tool="search_ecs_by_ip" call="c1" source="tool" '
        f'sources="Alibaba Cloud prod/cn-hangzhou (DescribeInstances) fetched {stamp}, cached, 40 s old">\n'
    ), text
    assert tool_result_body(text) == cached.content


async def test_an_mcp_tool_names_its_server_and_tool() -> None:
    config = McpServerConfig(name="fake", command=sys.executable, args=[str(FAKES / "mcp_server.py"), "stdio"])
    toolset = await build_toolset(ToolsConfig(inventory=InventoryConfig(enabled=False), mcp=[config]))
    try:
        registry = ToolRegistry(toolset.tools)
        before = time.time()
        echo = await registry.execute("fake__echo", {"text": "hi"}, CTX)
        assert echo.ok
        [source] = echo.sources
        assert (source.provider, source.label, source.api, source.cached) == ("mcp:fake", "MCP fake", "echo", False)
        assert source.fetched_at >= before
        failed = await registry.execute("fake__fail", {"message": "no"}, CTX)
        assert not failed.ok and failed.sources == ()
    finally:
        await toolset.aclose()


async def test_an_ec2_lookup_names_each_region_asked(toolsets: list[Toolset]) -> None:
    server = start_moto()
    try:
        host, port = server.get_host_and_port()
        account = CloudAccount(
            name="billing", access_key_id="testing", access_key_secret="testing",  # type: ignore[arg-type]
            regions=["eu-west-1", "eu-central-1"], endpoint=f"http://{host}:{port}",
        )
        registry = await make(toolsets, aws=CloudProviderConfig(enabled=True, accounts=[account]))
        out = await registry.execute("search_ec2_by_ip", {"ip": "172.31.9.9"}, CTX)
        assert out.ok and out.summary == "no instance found", out.content
        assert sorted(where(out.sources)) == [
            ("aws", "AWS", "billing", "eu-central-1", "ec2:DescribeInstances"),
            ("aws", "AWS", "billing", "eu-west-1", "ec2:DescribeInstances"),
        ]
    finally:
        server.stop()
