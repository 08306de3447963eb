"""Alibaba Cloud's estate through its real SDKs (RDS, KVStore, SLB, VPC, ECS, Alidns, ActionTrail, OSS v2)
against the loopback fake of their HTTP APIs."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig
from tests.fakes.aliyun_estate import FakeAliyunEstate, eip, sample_estate
from tests.ports import closed_port
from tools.estate.resource import Resource
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, SourceError, Target
from tools.providers.aliyun.estate import AliyunEstate

KEY = "test-key-id"
SECRET = "ALIYUN-ESTATE-SECRET-do-not-print"
REGION = "cn-hangzhou"
HERE = Target("aliyun", "prod", REGION)
GLOBAL = Target("aliyun", "prod", "")

Make = Callable[..., AliyunEstate]


@pytest.fixture
def fake() -> Iterator[FakeAliyunEstate]:
    with FakeAliyunEstate(access_key=KEY, access_secret=SECRET) as started:
        yield started  # type: ignore[misc]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    """Builds sources on a fake (or any endpoint) and closes them after the test."""
    made: list[AliyunEstate] = []

    def build(
        endpoint: str, *, key: str = KEY, secret: str = SECRET, timeout_s: float = 10.0, **section: Any
    ) -> AliyunEstate:
        account = CloudAccount(
            name="prod", access_key_id=key, access_key_secret=secret, regions=[REGION], endpoint=endpoint
        )
        source = AliyunEstate(CloudProviderConfig(enabled=True, accounts=[account], timeout_s=timeout_s, **section))
        made.append(source)
        return source

    yield build
    for source in made:
        await source.aclose()


def by_id(resources: tuple[Resource, ...]) -> dict[str, Resource]:
    return {r.id: r for r in resources}


async def failure(source: AliyunEstate, kind: str, target: Target = HERE) -> SourceError:
    with pytest.raises(SourceError) as caught:
        await source.list(target, kind)
    assert SECRET not in caught.value.reason and KEY not in caught.value.reason
    return caught.value


# --- each kind ---------------------------------------------------------------------------------


async def test_databases_carry_their_endpoint_address_state_and_engine(fake: FakeAliyunEstate, make: Make) -> None:
    listing = await make(fake.endpoint).list(HERE, "database")

    found = by_id(listing.resources)
    assert set(found) == {"rm-bp1db01", "rm-bp1db02", "rm-bp1db03"} and not listing.cut
    prod = found["rm-bp1db01"]
    assert prod.name == "prod-db-01" and prod.state == "running"
    assert prod.private_ips == ("10.0.3.7",) and prod.public_ips == ()
    assert prod.dns_names == ("rm-bp1db01.mysql.rds.aliyuncs.com",)
    assert prod.details["engine"] == "mysql" and prod.details["port"] == "3306" and prod.details["version"] == "8.0"
    assert [(link.rel, link.target) for link in prod.links] == [("in_vpc", "vpc-bp1prod")]
    stopped = found["rm-bp1db03"]
    assert stopped.name == "prod-db-03" and stopped.state == "stopped" and stopped.public_ips == ("47.96.5.9",)

    listed = [c for c in fake.calls() if c["action"] == "DescribeDBInstances"]
    assert [c["params"]["PageNumber"] for c in listed] == ["1", "2"]  # three instances, two per page
    assert all(c["params"]["RegionId"] == REGION for c in listed)
    described = [c["params"]["DBInstanceId"] for c in fake.calls() if c["action"] == "DescribeDBInstanceNetInfo"]
    assert sorted(described) == sorted(found)


async def test_the_cache_is_read_from_kvstore_not_ecs(fake: FakeAliyunEstate, make: Make) -> None:
    listing = await make(fake.endpoint).list(HERE, "cache")

    (redis,) = listing.resources
    assert (redis.id, redis.name, redis.state) == ("r-bp1orders", "orders-redis", "running")
    assert redis.private_ips == ("10.0.3.20",) and redis.dns_names == ("r-bp1orders.redis.rds.aliyuncs.com",)
    assert redis.details["port"] == "6379" and redis.details["engine"] == "redis" and redis.owner == "orders-team"
    assert {(c["action"], c["version"]) for c in fake.calls()} == {("DescribeInstances", "2015-01-01")}


async def test_load_balancers_show_listeners_backend_health_and_which_vip_is_public(
    fake: FakeAliyunEstate, make: Make
) -> None:
    listing = await make(fake.endpoint).list(HERE, "load_balancer")

    found = by_id(listing.resources)
    api = found["lb-bp1api"]
    assert api.public_ips == ("47.96.2.20",) and api.private_ips == () and api.details["scheme"] == "internet"
    (https,) = api.listeners
    assert (https.protocol, https.port) == ("https", 443)
    health = {(b.target, b.kind, b.port): b.health for b in https.backends}
    assert health == {("i-bp1web01", "server", 8443): "healthy", ("i-bp1web02", "server", 8443): "unhealthy"}
    internal = found["lb-bp1int"]
    assert internal.private_ips == ("172.16.0.50",) and internal.public_ips == () and internal.listeners == ()
    assert internal.details["scheme"] == "intranet"
    asked = [c["action"] for c in fake.calls()]
    assert asked.count("DescribeLoadBalancerAttribute") == 2 and asked.count("DescribeHealthStatus") == 2


async def test_security_group_rules_show_ssh_open_to_the_world(fake: FakeAliyunEstate, make: Make) -> None:
    listing = await make(fake.endpoint).list(HERE, "security_group")

    found = by_id(listing.resources)
    assert set(found) == {"sg-bp1web", "sg-bp1db", "sg-bp1ops"}
    open_ssh = [r for r in found["sg-bp1web"].rules if r.direction == "ingress" and r.open_to_world and r.covers(22)]
    assert [(r.direction, r.protocol, r.port_from, r.port_to, r.source, r.priority) for r in open_ssh] == [
        ("ingress", "tcp", 22, 22, "0.0.0.0/0", 1)
    ]
    assert not any(r.direction == "ingress" and r.open_to_world for r in found["sg-bp1ops"].rules)
    db_rules = {(r.source, r.action, r.port_from, r.port_to, r.protocol) for r in found["sg-bp1db"].rules}
    assert db_rules == {("sg-bp1web", "allow", 3306, 3306, "tcp"), ("0.0.0.0/0", "deny", 0, 65535, "all")}
    assert found["sg-bp1web"].details["vpc"] == "vpc-bp1prod"

    pages = [c["params"] for c in fake.calls() if c["action"] == "DescribeSecurityGroups"]
    assert len(pages) == 2 and "NextToken" not in pages[0] and pages[1]["NextToken"]


async def test_elastic_ips_are_attached_and_the_nat_gateway_carries_its_eip(fake: FakeAliyunEstate, make: Make) -> None:
    source = make(fake.endpoint)
    ips = by_id((await source.list(HERE, "ip")).resources)
    nats = (await source.list(HERE, "nat_gateway")).resources

    web = ips["eip-bp1web01"]
    assert web.public_ips == ("47.96.1.10",) and web.state == "in-use"
    assert [(link.rel, link.target, link.kind) for link in web.links] == [("attached_to", "i-bp1web01", "server")]
    assert [(link.target, link.kind) for link in ips["eip-bp1nat"].links] == [("ngw-bp1prod", "nat_gateway")]
    assert ips["eip-bp1spare"].links == () and ips["eip-bp1spare"].state == "available"
    (nat,) = nats
    assert nat.id == "ngw-bp1prod" and nat.public_ips == ("47.96.3.30",) and nat.state == "available"


async def test_dns_records_point_to_the_load_balancer(fake: FakeAliyunEstate, make: Make) -> None:
    source = make(fake.endpoint)
    assert source.targets("dns_record") == [GLOBAL]
    listing = await source.list(GLOBAL, "dns_record")

    found = by_id(listing.resources)
    api = found["api.example.com A"]
    assert api.name == "api.example.com" and api.dns_names == ("api.example.com",) and api.region == ""
    assert [(link.rel, link.target) for link in api.links] == [("points_to", "47.96.2.20")]
    assert api.details["zone"] == "example.com" and api.details["ttl"] == "600"
    assert [link.target for link in found["www.example.com CNAME"].links] == ["api.example.com"]
    assert found["example.com MX"].details["priority"] == "10"
    pages = [c["params"]["PageNumber"] for c in fake.calls() if c["action"] == "DescribeDomainRecords"]
    assert pages == ["1", "2"]  # four records, two per page


async def test_buckets_say_whether_they_are_public_and_where_they_live(fake: FakeAliyunEstate, make: Make) -> None:
    listing = await make(fake.endpoint).list(GLOBAL, "bucket")

    found = by_id(listing.resources)
    assets = found["example-assets"]
    assert assets.details["public"] == "yes" and assets.details["acl"] == "public-read" and assets.region == REGION
    assert assets.dns_names == ("example-assets.oss-cn-hangzhou.aliyuncs.com",)
    backup = found["example-backup-bj"]
    assert backup.details["public"] == "no" and backup.region == "cn-beijing"
    assert found["example-logs"].details["public"] == "no"

    listed = [c for c in fake.calls() if c["action"] == "ListBuckets"]
    assert len(listed) == 2 and listed[1]["params"]["marker"]  # three buckets, two per page
    acl_regions = {c["region"] for c in fake.calls() if c["action"] == "GetBucketAcl"}
    assert acl_regions == {REGION, "cn-beijing"}  # each ACL is signed for the bucket's own region


# --- changes ---------------------------------------------------------------------------------------


async def test_changes_name_who_stopped_prod_db_03(fake: FakeAliyunEstate, make: Make) -> None:
    changes = await make(fake.endpoint).changes(HERE, ChangeQuery(resource_id="rm-bp1db03", resource_name="prod-db-03"))

    stop = next(c for c in changes if c.action == "StopDBInstance")
    assert stop.principal == "alice" and stop.source_ip == "203.0.113.5" and stop.outcome == "success"
    assert stop.resource_id == "rm-bp1db03" and stop.resource_name == "prod-db-03" and stop.resource_kind == "database"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stop.time)
    assert "StopDBInstance by alice on prod-db-03 [rm-bp1db03] from 203.0.113.5" in stop.render()
    assert [c.time for c in changes] == sorted((c.time for c in changes), reverse=True)
    assert not any("key-id" in repr(c) for c in changes)  # the trail's caller access key stays out

    (asked,) = [c["params"] for c in fake.calls() if c["action"] == "LookupEvents"]
    assert (asked["LookupAttribute.1.Key"], asked["LookupAttribute.1.Value"]) == ("ResourceName", "rm-bp1db03")
    assert asked["StartTime"] < asked["EndTime"]


async def test_a_failed_call_in_the_trail_shows_its_error(fake: FakeAliyunEstate, make: Make) -> None:
    (change,) = await make(fake.endpoint).changes(HERE, ChangeQuery(resource_id="rm-bp1db01"))
    assert change.action == "RestartDBInstance" and change.principal == "bob" and change.outcome == "Forbidden.RAM"


# --- failures --------------------------------------------------------------------------------------


async def test_throttling_is_retried_with_backoff_then_succeeds(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, throttle_first=2) as fake:
        listing = await make(fake.endpoint).list(HERE, "nat_gateway")
        assert [r.id for r in listing.resources] == ["ngw-bp1prod"]
        times = [c["time"] for c in fake.calls()]
    assert len(times) == 3  # two throttled answers, then the page
    assert all(later - earlier >= 0.09 for earlier, later in itertools.pairwise(times))  # backed off


async def test_throttling_past_the_timeout_says_throttled(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, throttle_first=10_000) as fake:
        error = await failure(make(fake.endpoint, timeout_s=1.0), "ip")
    assert error.kind == "throttled" and "DescribeEipAddresses" in error.reason


@pytest.mark.parametrize(
    ("action", "kind", "target", "needs"),
    [
        ("DescribeDBInstances", "database", HERE, "rds:DescribeDBInstances"),
        ("DescribeSecurityGroupAttribute", "security_group", HERE, "ecs:DescribeSecurityGroupAttribute"),
        ("DescribeLoadBalancerAttribute", "load_balancer", HERE, "slb:DescribeLoadBalancerAttribute"),
        ("DescribeDomainRecords", "dns_record", GLOBAL, "alidns:DescribeDomainRecords"),
        ("ListBuckets", "bucket", GLOBAL, "oss:ListBuckets"),
    ],
)
async def test_a_permission_denial_names_the_missing_ram_action(
    make: Make, action: str, kind: str, target: Target, needs: str
) -> None:
    with FakeAliyunEstate(access_key=KEY, denied_actions={action}) as fake:
        error = await failure(make(fake.endpoint), kind, target)
    assert error.kind == "permission"
    assert error.reason == f"permission denied: needs {needs} (RAM)"


async def test_a_denied_trail_names_lookup_events(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, denied_actions={"LookupEvents"}) as fake:
        with pytest.raises(SourceError) as caught:
            await make(fake.endpoint).changes(HERE, ChangeQuery(resource_id="rm-bp1db03"))
    assert caught.value.kind == "permission" and "actiontrail:LookupEvents" in caught.value.reason


async def test_a_denied_acl_read_still_lists_the_buckets_as_unknown(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, denied_actions={"GetBucketAcl"}) as fake:
        listing = await make(fake.endpoint).list(GLOBAL, "bucket")
    assets = by_id(listing.resources)["example-assets"]
    assert assets.details["public"] == "unknown"
    assert assets.details["acl"] == "not read: permission denied: needs oss:GetBucketAcl (RAM)"


async def test_unread_backend_health_reads_unknown_not_healthy(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, denied_actions={"DescribeHealthStatus"}) as fake:
        listing = await make(fake.endpoint).list(HERE, "load_balancer")
    (https,) = by_id(listing.resources)["lb-bp1api"].listeners
    assert {(b.target, b.health) for b in https.backends} == {("i-bp1web01", "unknown"), ("i-bp1web02", "unknown")}
    assert "slb:DescribeHealthStatus" in by_id(listing.resources)["lb-bp1api"].details["listeners"]


async def test_a_database_whose_addresses_cannot_be_read_is_still_listed(make: Make) -> None:
    with FakeAliyunEstate(access_key=KEY, denied_actions={"DescribeDBInstanceNetInfo"}) as fake:
        listing = await make(fake.endpoint).list(HERE, "database")
    prod = by_id(listing.resources)["rm-bp1db01"]
    assert prod.state == "running" and prod.private_ips == ()
    assert "rds:DescribeDBInstanceNetInfo" in prod.details["addresses"]


@pytest.mark.parametrize(("kind", "target"), [("database", HERE), ("bucket", GLOBAL)])
async def test_a_wrong_access_key_is_a_credentials_failure(
    fake: FakeAliyunEstate, make: Make, kind: str, target: Target
) -> None:
    error = await failure(make(fake.endpoint, key="wrong-key-id"), kind, target)
    assert error.kind == "credentials"
    assert "wrong-key-id" not in error.reason


async def test_a_wrong_secret_fails_the_signature_check_as_credentials(fake: FakeAliyunEstate, make: Make) -> None:
    error = await failure(make(fake.endpoint, secret="not-the-secret"), "nat_gateway")
    assert error.kind == "credentials" and "SignatureDoesNotMatch" in error.reason
    assert "not-the-secret" not in error.reason


async def test_an_endpoint_that_refuses_connections_is_unreachable(make: Make) -> None:
    error = await failure(make(f"http://127.0.0.1:{closed_port()}"), "cache")
    assert error.kind == "unreachable" and "Tair/KVStore" in error.reason


async def test_no_credentials_anywhere_says_how_to_configure_them(
    make: Make, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials file for the SDK's chain to find
    source = make("http://127.0.0.1:1", key="", secret="")
    assert not source.has_credentials(source.account(HERE))
    error = await failure(source, "database")
    assert error.kind == "credentials" and "access_key_id" in error.reason


async def test_paging_stops_at_the_bound_and_says_the_listing_was_cut(make: Make) -> None:
    state = sample_estate()
    state.eips[REGION] = [
        eip(f"eip-bulk{n:05d}", f"47.97.{n // 250}.{n % 250}", "", "") for n in range(MAX_PER_LISTING + 5)
    ]
    with FakeAliyunEstate(state, access_key=KEY, page_cap=100) as fake:
        listing = await make(fake.endpoint, api_qps={"DescribeEipAddresses": 50}).list(HERE, "ip")
        pages = len(fake.calls())
    assert len(listing.resources) == MAX_PER_LISTING and listing.cut
    assert pages == MAX_PER_LISTING // 100  # stopped at the bound, not at the end


async def test_every_sdk_is_installed_and_credentials_are_seen(make: Make) -> None:
    source = make("http://127.0.0.1:1")
    assert source.kinds() == frozenset(AliyunEstate.kind_products)
    checks = source.prerequisites()
    assert all(check.ok for check in checks), [c for c in checks if not c.ok]
    assert any("ActionTrail" in check.what for check in checks)
