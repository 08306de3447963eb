"""Tencent Cloud's estate through the official SDKs (CDB, Redis, CLB, VPC, DNSPod, COS, CloudAudit), on a loopback fake.

The fake checks what the real APIs check (the TC3 signature with the configured
key, the API version of each service, the type of paging parameters, COS's
``q-ak``), so each test fails if the source built a request the real API would
refuse.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig
from tests.fakes.tencent_estate import LB_DOMAIN, FakeTencentEstate
from tools.estate.resource import Resource
from tools.estate.source import ChangeQuery, SourceError, Target
from tools.providers.tencent.estate import TencentEstate
from tools.providers.tencent.mapping import parse_ports

SECRET_ID = "tc-secret-id"
SECRET_KEY = "tc-secret-KEY-never-shown"
GZ = Target("tencent", "prod", "ap-guangzhou")
GLOBAL = Target("tencent", "prod", "")


def make_source(endpoint: str, *, secret_id: str = SECRET_ID, secret_key: str = SECRET_KEY, **kw: Any) -> TencentEstate:
    account = CloudAccount(
        name="prod", access_key_id=secret_id, access_key_secret=secret_key,
        regions=["ap-guangzhou"], endpoint=endpoint,
    )
    return TencentEstate(CloudProviderConfig(enabled=True, accounts=[account], **kw))


@pytest.fixture
def fake() -> Iterator[FakeTencentEstate]:
    with FakeTencentEstate(secret_id=SECRET_ID, secret_key=SECRET_KEY) as started:
        yield started


@pytest.fixture
async def source(fake: FakeTencentEstate) -> AsyncIterator[TencentEstate]:
    made = make_source(fake.endpoint)
    await made.start()
    yield made
    await made.aclose()


def by_name(resources: tuple[Resource, ...]) -> dict[str, Resource]:
    return {r.name: r for r in resources}


async def failure(source: TencentEstate, target: Target, kind: str) -> SourceError:
    with pytest.raises(SourceError) as caught:
        await source.list(target, kind)
    assert SECRET_KEY not in caught.value.reason and SECRET_ID not in caught.value.reason
    return caught.value


def test_knows_every_kind_and_documented_rates() -> None:
    source = make_source("http://127.0.0.1:9", api_qps={"DescribeDBInstances": 3})
    assert source.kinds() == {
        "database", "cache", "load_balancer", "security_group", "ip", "nat_gateway", "dns_record", "bucket"
    }
    assert source.targets("dns_record") == [GLOBAL] and source.targets("database") == [GZ]
    assert source.limit_of("cloudaudit", "cloudaudit:LookUpEvents").rate_per_s == 5
    assert source.limit_of("clb", "clb:DescribeListeners").rate_per_s == 20
    assert source.limit_of("cdb", "cdb:DescribeDBInstances").rate_per_s == 3
    assert all(p.ok for p in source.prerequisites())


async def test_databases(source: TencentEstate, fake: FakeTencentEstate) -> None:
    listing = await source.list(GZ, "database")
    found = by_name(listing.resources)
    assert set(found) == {"orders-db", "prod-db-03", "reports-db"}  # three records over two pages of two
    assert len(fake.actions("DescribeDBInstances")) == 2 and not listing.cut
    assert listing.api == "cdb:DescribeDBInstances"
    orders = found["orders-db"]
    assert (orders.id, orders.private_ips, orders.state) == ("cdb-ord00001", ("10.0.3.7",), "running")
    assert orders.details["port"] == "3306" and orders.details["version"] == "8.0"
    assert [link.target for link in orders.links_of("security_group")] == ["sg-db000001"]
    assert [link.target for link in orders.links_of("in_vpc")] == ["vpc-gz01"]
    stopped = found["prod-db-03"]
    assert (stopped.state, stopped.details["status"]) == ("stopped", "isolated")
    assert stopped.dns_names == ("gz-cdb-prd3.sql.tencentcdb.com",) and stopped.details["wan_port"] == "28001"
    assert found["reports-db"].state == "creating" and not found["reports-db"].links_of("security_group")
    assert {c["region"] for c in fake.actions("DescribeDBInstances")} == {"ap-guangzhou"}


async def test_cache(source: TencentEstate) -> None:
    listing = await source.list(GZ, "cache")
    redis = by_name(listing.resources)["orders-redis"]
    assert (redis.id, redis.private_ips, redis.state) == ("crs-ord00001", ("10.0.4.12",), "running")
    assert redis.details["port"] == "6379" and redis.details["engine"] == "redis"


async def test_load_balancer_with_listeners_backends_and_health(source: TencentEstate, fake: FakeTencentEstate) -> None:
    listing = await source.list(GZ, "load_balancer")
    lb = by_name(listing.resources)["api-clb"]
    assert lb.id == "lb-api00001" and lb.public_ips == ("119.29.10.20",) and lb.dns_names == (LB_DOMAIN,)
    assert lb.details["scheme"] == "internet" and lb.details["type"] == "application" and lb.state == "active"
    assert [link.target for link in lb.links_of("security_group")] == ["sg-web00001"]
    https, tcp = lb.listeners
    assert (https.protocol, https.port, tcp.protocol, tcp.port) == ("https", 443, "tcp", 9000)
    assert [(b.target, b.kind, b.port, b.health) for b in https.backends] == [
        ("ins-gz000001", "server", 8080, "healthy"),
        ("ins-gz000002", "server", 8080, "unhealthy"),
    ]
    assert tcp.backends == ()  # listed all the same: the trace says "no backend"
    assert {r["action"] for r in fake.calls()} >= {"DescribeListeners", "DescribeTargets", "DescribeTargetHealth"}


async def test_security_groups_rules(source: TencentEstate, fake: FakeTencentEstate) -> None:
    listing = await source.list(GZ, "security_group")
    groups = by_name(listing.resources)
    assert set(groups) == {"web", "db", "default"}
    web = groups["web"]
    ssh = web.rules[0]
    assert (ssh.direction, ssh.protocol, ssh.port_from, ssh.port_to) == ("ingress", "tcp", 22, 22)
    assert ssh.source == "0.0.0.0/0"
    assert ssh.open_to_world and ssh.priority == 1 and ssh.description == "ssh from anywhere"
    assert [(r.port_from, r.priority) for r in web.rules[1:3]] == [(80, 2), (443, 2)]  # "80,443": one rule per port
    deny = web.rules[3]
    assert (deny.action, deny.protocol, deny.port_from, deny.port_to) == ("deny", "all", 0, 65535)
    assert [r.direction for r in web.rules].count("egress") == 1
    db = groups["db"].rules
    assert (db[0].source, db[0].port_from) == ("sg-web00001", 3306)
    assert (db[1].port_from, db[1].port_to, db[1].source) == (8000, 8080, "10.0.0.0/16")
    assert (db[2].protocol, db[2].source) == ("udp", "::/0")
    assert groups["default"].rules == ()
    assert all(isinstance(c["params"]["Offset"], str) for c in fake.actions("DescribeSecurityGroups"))


async def test_elastic_ips_and_nat_gateway(source: TencentEstate) -> None:
    ips = {r.id: r for r in (await source.list(GZ, "ip")).resources}
    bound = ips["eip-cvm00001"]
    assert bound.public_ips == ("119.29.1.11",) and bound.state == "in-use"
    assert [(link.target, link.kind) for link in bound.links_of("attached_to")] == [("ins-gz000001", "server")]
    assert [(link.target, link.kind) for link in ips["eip-nat00001"].links] == [("nat-gz000001", "nat_gateway")]
    assert ips["eip-free0001"].state == "available" and ips["eip-free0001"].links == ()
    (nat,) = (await source.list(GZ, "nat_gateway")).resources
    assert (nat.id, nat.state, nat.public_ips) == ("nat-gz000001", "available", ("119.29.2.2",))
    assert [link.target for link in nat.links_of("in_vpc")] == ["vpc-gz01"]


async def test_dns_records(source: TencentEstate, fake: FakeTencentEstate) -> None:
    listing = await source.list(GLOBAL, "dns_record")
    records = {r.id: r for r in listing.resources}
    api = records["api.example.com CNAME"]
    assert api.name == "api.example.com" and api.dns_names == ("api.example.com",) and api.region == ""
    assert [link.target for link in api.links_of("points_to")] == [LB_DOMAIN]
    assert api.details["zone"] == "example.com" and api.details["ttl"] == "600"
    assert [link.target for link in records["www.example.com A"].links] == ["119.29.10.20"]
    assert {"example.com NS 2003", "example.com NS 2004"} <= set(records)  # two values of one name: ids told apart
    assert len(records) == 4 and not listing.cut  # example.org has none: DNSPod's "no data" error is an empty zone
    assert [c["params"]["Domain"] for c in fake.actions("DescribeRecordList")].count("example.org") == 1


async def test_buckets_with_public_acl_and_region(source: TencentEstate, fake: FakeTencentEstate) -> None:
    listing = await source.list(GLOBAL, "bucket")
    buckets = by_name(listing.resources)
    assets, backups = buckets["assets-1251234567"], buckets["backups-1251234567"]
    assert (assets.region, assets.details["public"], assets.details["acl"]) == ("ap-guangzhou", "yes", "public-read")
    assert assets.dns_names == ("assets-1251234567.cos.ap-guangzhou.myqcloud.com",)
    assert (backups.region, backups.details["public"]) == ("ap-shanghai", "no")
    assert sorted(c["region"] for c in fake.actions("GetBucketACL")) == ["ap-guangzhou", "ap-shanghai"]


async def test_changes_name_who_stopped_the_database(source: TencentEstate, fake: FakeTencentEstate) -> None:
    changes = await source.changes(GZ, ChangeQuery(resource_name="prod-db-03"))
    assert [(c.principal, c.action, c.outcome) for c in changes] == [
        ("bob", "IsolateDBInstance", "success"),
        ("mallory", "IsolateDBInstance", "403"),
    ]
    bob = changes[0]
    assert (bob.resource_id, bob.resource_name, bob.source_ip) == ("cdb-prd00003", "prod-db-03", "203.0.113.7")
    assert bob.time.endswith("Z") and len(bob.time) == 20
    assert "AKID" not in repr(changes)  # the trail's SecretId of the caller is never carried
    (asked,) = fake.actions("LookUpEvents")[:1]
    assert asked["params"]["LookupAttributes"] == [{"AttributeKey": "ResourceName", "AttributeValue": "prod-db-03"}]
    by_id = await source.changes(GZ, ChangeQuery(resource_id="cdb-ord00001"))
    assert [(c.principal, c.action) for c in by_id] == [("alice", "ModifyDBInstanceName")]


async def test_throttling_is_retried_then_succeeds() -> None:
    with FakeTencentEstate(secret_id=SECRET_ID, secret_key=SECRET_KEY, throttle_first=2) as fake:
        source = make_source(fake.endpoint)
        try:
            listing = await source.list(GZ, "cache")
        finally:
            await source.aclose()
    assert by_name(listing.resources)["orders-redis"].private_ips == ("10.0.4.12",)
    assert fake.throttled == 2 and len(fake.actions("DescribeInstances")) == 3


async def test_permission_denial_names_the_action() -> None:
    denied = {"DescribeDBInstances", "GetService"}
    with FakeTencentEstate(secret_id=SECRET_ID, secret_key=SECRET_KEY, denied_actions=denied) as fake:
        source = make_source(fake.endpoint)
        try:
            db = await failure(source, GZ, "database")
            cos = await failure(source, GLOBAL, "bucket")
        finally:
            await source.aclose()
    assert (db.kind, db.reason) == ("permission", "permission denied: needs cdb:DescribeDBInstances (CAM)")
    assert (cos.kind, cos.reason) == ("permission", "permission denied: needs cos:GetService (CAM)")


@pytest.mark.parametrize(("secret_id", "secret_key"), [("tc-other-id", SECRET_KEY), (SECRET_ID, "wrong-secret-key")])
async def test_wrong_key_is_a_credentials_failure(fake: FakeTencentEstate, secret_id: str, secret_key: str) -> None:
    source = make_source(fake.endpoint, secret_id=secret_id, secret_key=secret_key)
    try:
        error = await failure(source, GZ, "security_group")
        assert secret_key not in error.reason and secret_id not in error.reason
        cos = await failure(source, GLOBAL, "bucket") if secret_id != SECRET_ID else None
    finally:
        await source.aclose()
    assert error.kind == "credentials" and "AuthFailure" in error.reason
    assert cos is None or cos.kind == "credentials"


async def test_paging_stops_at_the_bound_and_says_cut() -> None:
    with FakeTencentEstate(secret_id=SECRET_ID, secret_key=SECRET_KEY, page_cap=100, extra_addresses=2050) as fake:
        source = make_source(fake.endpoint, api_qps={"vpc": 200})
        try:
            listing = await source.list(GZ, "ip")
        finally:
            await source.aclose()
    assert listing.cut and len(listing.resources) == 2000
    assert len(fake.actions("DescribeAddresses")) == 20  # stopped at the bound, not at the end of 2053


async def test_unreachable_endpoint() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = make_source(f"http://127.0.0.1:{port}", timeout_s=5)
    try:
        error = await failure(source, GZ, "cache")
    finally:
        await source.aclose()
    assert error.kind == "unreachable" and "redis:DescribeInstances" in error.reason


def test_port_forms() -> None:
    assert parse_ports("22", "tcp") == [(22, 22)]
    assert parse_ports("ALL", "tcp") == [(0, 65535)]
    assert parse_ports("80,443", "tcp") == [(80, 80), (443, 443)]
    assert parse_ports("8000-8080", "udp") == [(8000, 8080)]
    assert parse_ports("", "icmp") == [(0, 65535)]
