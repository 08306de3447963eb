"""Resource scopes enforced inside the lookup tools: the pure filter, the inventory and the cloud fan-out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, ToolsConfig
from botgateway.grant import Grant, Scope
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.clouds import FakeAliyun, aliyun_instance
from tests.paths import SAMPLE_INVENTORY
from tools.catalog import build_toolset
from tools.providers.scope import UNRESTRICTED, allowed_targets, shows, tags_match, view_of

LOOKUPS = frozenset({"find_server", "list_servers", "search_inventory_by_ip", "search_ecs_by_ip"})


def ctx_with(*scopes: Scope) -> ToolContext:
    grant = Grant(roles=("viewer",), tools=LOOKUPS, scopes=scopes)
    return ToolContext(user_id="U2", platform="slack", roles=frozenset({"viewer"}), grant=grant)


# --- the pure filter -----------------------------------------------------------------------------

ALIYUN_PROD = Scope(provider="aliyun", account="prod")
HANGZHOU_ONLY = Scope(provider="aliyun", region="cn-hangzhou")
NOT_PROD = Scope(tags={"env": "!prod"})
INVENTORY = Scope(provider="inventory")


@pytest.mark.parametrize(
    ("scopes", "target", "allowed"),
    [
        ((), ("aliyun", "prod", "cn-hangzhou"), True),  # no scopes: unrestricted
        ((ALIYUN_PROD,), ("aliyun", "prod", "cn-beijing"), True),
        ((ALIYUN_PROD,), ("aliyun", "staging", "cn-hangzhou"), False),
        ((ALIYUN_PROD,), ("tencent", "prod", "ap-guangzhou"), False),
        ((HANGZHOU_ONLY,), ("aliyun", "staging", "cn-hangzhou"), True),
        ((HANGZHOU_ONLY,), ("aliyun", "staging", "cn-beijing"), False),
        ((NOT_PROD,), ("aws", "prod", "us-east-1"), True),  # a tag-only scope covers every target; tags decide later
        ((ALIYUN_PROD, INVENTORY), ("inventory", "on-prem", "idc-shanghai"), True),  # a union
        ((ALIYUN_PROD, INVENTORY), ("aws", "default", "us-east-1"), False),
    ],
)
def test_a_target_is_allowed_when_any_scope_covers_it(
    scopes: tuple[Scope, ...], target: tuple[str, str, str], allowed: bool
) -> None:
    assert bool(view_of(scopes, *target)) is allowed


@pytest.mark.parametrize(
    ("rule", "tags", "match"),
    [
        ((), {}, True),
        ((("env", "!prod"),), {"env": "staging"}, True),
        ((("env", "!prod"),), {"env": "prod"}, False),
        ((("env", "!prod"),), {"env": "PROD"}, False),  # case-insensitive, like the tag filter
        ((("env", "!prod"),), {}, True),  # an untagged server is not prod
        ((("env", "prod"),), {"env": "prod", "role": "db"}, True),
        ((("env", "prod"),), {"Env": "Prod"}, True),
        ((("env", "prod"),), {"env": "staging"}, False),
        ((("env", "prod"),), {}, False),
        ((("team", ""),), {"team": "dba"}, True),  # an empty value: the tag with any value
        ((("team", ""),), {}, False),
        ((("env", "staging"), ("team", "!dba")), {"env": "staging", "team": "web"}, True),
        ((("env", "staging"), ("team", "!dba")), {"env": "staging", "team": "dba"}, False),
    ],
)
def test_tag_rules(rule: tuple[tuple[str, str], ...], tags: dict[str, str], match: bool) -> None:
    assert tags_match(rule, tags) is match


@pytest.mark.parametrize(
    ("scopes", "tags", "shown"),
    [
        ((), {"env": "prod"}, True),
        ((NOT_PROD,), {"env": "prod"}, False),
        ((NOT_PROD,), {"env": "dev"}, True),
        # The union: a prod server is shown through the scope that allows its account without tags.
        ((NOT_PROD, Scope(provider="aliyun", account="prod")), {"env": "prod"}, True),
        ((NOT_PROD, Scope(provider="aliyun", account="staging", tags={"env": "prod"})), {"env": "prod"}, False),
    ],
)
def test_a_server_shows_when_any_scope_allows_its_place_and_tags(
    scopes: tuple[Scope, ...], tags: dict[str, str], shown: bool
) -> None:
    assert shows(view_of(scopes, "aliyun", "prod", "cn-hangzhou"), tags) is shown


def test_allowed_targets_keep_order_and_views() -> None:
    targets = [("prod", "cn-hangzhou"), ("prod", "cn-beijing"), ("staging", "cn-hangzhou")]
    assert allowed_targets((), "aliyun", targets) == [(a, r, UNRESTRICTED) for a, r in targets]
    assert allowed_targets((HANGZHOU_ONLY,), "aliyun", targets) == [
        ("prod", "cn-hangzhou", UNRESTRICTED),
        ("staging", "cn-hangzhou", UNRESTRICTED),
    ]
    assert allowed_targets((ALIYUN_PROD,), "tencent", targets) == []


# --- the inventory ---------------------------------------------------------------------------------


@pytest.fixture
async def inventory_registry() -> AsyncIterator[ToolRegistry]:
    toolset = await build_toolset(ToolsConfig(inventory=InventoryConfig(path=str(SAMPLE_INVENTORY))))
    try:
        yield ToolRegistry(toolset.tools)
    finally:
        await toolset.aclose()


async def test_a_viewer_asking_about_a_prod_host_gets_no_instance_they_may_see(
    inventory_registry: ToolRegistry,
) -> None:
    viewer = ctx_with(NOT_PROD)
    for tool, args in (
        ("search_inventory_by_ip", {"ip": "10.0.1.100"}),
        ("find_server", {"query": "10.0.1.100"}),
        ("find_server", {"query": "prod-db-01"}),
    ):
        out = await inventory_registry.execute(tool, args, viewer)
        assert out.ok, out.content
        assert out.summary == "no instance matches that you may see"
        assert "No instance matches that you may see" in out.content
        assert "prod-db" not in out.content.replace("'prod-db-01'", "")  # only the question itself is echoed

    listed = await inventory_registry.execute("list_servers", {"limit": 200}, viewer)
    assert listed.ok and "stg-db-01" in listed.content
    assert "env=prod" not in listed.content and "- prod-" not in listed.content

    staging = await inventory_registry.execute("search_inventory_by_ip", {"ip": "10.10.1.100"}, viewer)
    assert staging.ok and staging.summary == "1 instance found: stg-db-01" and "stg-db-01" in staging.content

    # The same host is there for an unrestricted asker (no grant, or a grant without scopes).
    for ctx in (ToolContext(user_id="U1"), ctx_with()):
        out = await inventory_registry.execute("search_inventory_by_ip", {"ip": "10.0.1.100"}, ctx)
        assert out.ok and out.summary == "1 instance found: prod-db-01" and "prod-db-01" in out.content


async def test_a_scope_for_another_provider_does_not_search_the_inventory(inventory_registry: ToolRegistry) -> None:
    out = await inventory_registry.execute("find_server", {"query": "10.10.1.100"}, ctx_with(ALIYUN_PROD))
    assert out.ok and out.summary == "no instance matches that you may see"
    assert "Static inventory" not in out.content


# --- the cloud fan-out ----------------------------------------------------------------------------------


@pytest.fixture
def prod_account() -> Iterator[FakeAliyun]:
    with FakeAliyun(
        {"cn-hangzhou": [aliyun_instance("i-bp1aaaaaaaaaaaa01", "prod-api-01", "172.16.1.10", tags={"env": "prod"})]},
        access_key="prod-key",
        name="prod",
    ) as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def staging_account() -> Iterator[FakeAliyun]:
    with FakeAliyun(
        {
            "cn-hangzhou": [
                aliyun_instance("i-bp1bbbbbbbbbbbb01", "stg-api-01", "172.18.1.10", tags={"env": "staging"}),
                aliyun_instance("i-bp1bbbbbbbbbbbb02", "stg-prod-mirror", "172.18.1.11", tags={"env": "prod"}),
            ]
        },
        access_key="stg-key",
        name="staging",
    ) as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
async def cloud_registry(prod_account: FakeAliyun, staging_account: FakeAliyun) -> AsyncIterator[ToolRegistry]:
    def account(name: str, key: str, fake: FakeAliyun) -> CloudAccount:
        return CloudAccount(
            name=name,
            access_key_id=key,
            access_key_secret="s",
            regions=["cn-hangzhou"],
            endpoint=fake.endpoint,  # type: ignore[arg-type]
        )

    accounts = [account("prod", "prod-key", prod_account), account("staging", "stg-key", staging_account)]
    section: Any = CloudProviderConfig(enabled=True, accounts=accounts)
    toolset = await build_toolset(ToolsConfig(inventory=InventoryConfig(enabled=False), aliyun=section))
    try:
        yield ToolRegistry(toolset.tools)
    finally:
        await toolset.aclose()


async def test_a_scope_for_one_account_never_calls_the_other(
    cloud_registry: ToolRegistry, prod_account: FakeAliyun, staging_account: FakeAliyun
) -> None:
    staging_only = ctx_with(Scope(provider="aliyun", account="staging"))
    out = await cloud_registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, staging_only)
    assert out.ok, out.content
    assert out.summary == "no instance matches that you may see"
    assert "prod-api-01" not in out.content and "i-bp1aaaaaaaaaaaa01" not in out.content

    found = await cloud_registry.execute("find_server", {"query": "172.18.1.10"}, staging_only)
    assert found.ok and found.summary == "1 instance found: stg-api-01" and "stg-api-01" in found.content
    listed = await cloud_registry.execute("list_servers", {"provider": "aliyun"}, staging_only)
    assert listed.ok and listed.summary.startswith("2 instances found: ") and "prod-api-01" not in listed.content

    assert prod_account.calls() == []  # the prod account was never called
    assert staging_account.calls("cn-hangzhou")

    # Without scopes, both accounts are asked as before.
    everyone = await cloud_registry.execute("search_ecs_by_ip", {"ip": "172.16.1.10"}, ToolContext(user_id="U1"))
    assert everyone.ok and "prod-api-01" in everyone.content
    assert prod_account.calls("cn-hangzhou")


async def test_tag_scopes_filter_cloud_results_and_a_disallowed_region_is_not_revealed(
    cloud_registry: ToolRegistry, prod_account: FakeAliyun, staging_account: FakeAliyun
) -> None:
    viewer = ctx_with(Scope(provider="aliyun", account="staging", tags={"env": "!prod"}))
    listed = await cloud_registry.execute("list_servers", {}, viewer)
    assert listed.ok and listed.summary.startswith("1 instance found: ")
    assert "stg-api-01" in listed.content and "stg-prod-mirror" not in listed.content

    mirror = await cloud_registry.execute("search_ecs_by_ip", {"ip": "172.18.1.11"}, viewer)
    assert mirror.ok and mirror.summary == "no instance matches that you may see"
    assert "stg-prod-mirror" not in mirror.content

    elsewhere = await cloud_registry.execute("list_servers", {"region": "cn-beijing"}, viewer)
    assert elsewhere.ok and elsewhere.summary == "no instance matches that you may see"
    assert (
        "Note: region cn-beijing is not one you may search in Alibaba Cloud; you may search: cn-hangzhou."
        in elsewhere.content
    )
    assert prod_account.calls() == []
