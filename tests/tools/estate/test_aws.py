"""The AWS estate source through the real ``boto3``: every kind against moto, changes against a CloudTrail fake.

moto serves RDS, ElastiCache, ELBv2 (with target health), EC2, Route 53 and
S3; it has no CloudTrail ``LookupEvents``, which :mod:`tests.fakes.cloudtrail`
answers on loopback, checking the signing key.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from botgateway.config import CloudAccount, CloudProviderConfig
from tests.fakes.aws_estate import BUCKET_REGION, REGION, AwsEstateIds, moto_server, seed
from tests.fakes.cloudtrail import FakeCloudTrail, trail_event
from tools.estate.resource import Resource
from tools.estate.sdk_source import Page
from tools.estate.source import ChangeQuery, SourceError, Target
from tools.providers.aws.estate import AwsEstate

KEY_ID = "AKIAESTATETEST000001"
SECRET = "estate-SECRET-do-not-print"
HERE = Target("aws", "prod", REGION)
GLOBAL = Target("aws", "prod", "")
Moto = tuple[str, AwsEstateIds]
Sources = list[AwsEstate]


@pytest.fixture(scope="module")
def moto() -> Iterator[tuple[str, AwsEstateIds]]:
    with moto_server() as endpoint:
        yield endpoint, seed(endpoint)


def section(
    endpoint: str, *, trail: str = "", key: str = KEY_ID, secret: str = SECRET, **kw: Any
) -> CloudProviderConfig:
    """One account, ``prod``, in the estate's region; CloudTrail at ``trail`` when given."""
    account = CloudAccount(
        name="prod", access_key_id=key, access_key_secret=secret,
        regions=[REGION], endpoint=endpoint,
    )
    return CloudProviderConfig(enabled=True, accounts=[account], endpoints={"cloudtrail": trail} if trail else {}, **kw)


@pytest.fixture
async def sources() -> AsyncIterator[list[AwsEstate]]:
    made: list[AwsEstate] = []
    yield made
    for source in made:
        await source.aclose()


async def estate(sources: list[AwsEstate], config: CloudProviderConfig) -> AwsEstate:
    """A started source (as the toolset starts it), closed after the test."""
    source = AwsEstate(config)
    sources.append(source)
    await source.start()
    return source


async def listed(source: AwsEstate, kind: str, target: Target = HERE) -> dict[str, Resource]:
    listing = await source.list(target, kind)
    assert not listing.cut
    return {r.name or r.id: r for r in listing.resources}


def by_id(resources: dict[str, Resource]) -> dict[str, Resource]:
    return {r.id: r for r in resources.values()}


# --- every kind against moto ---------------------------------------------------------------------


async def test_databases_carry_endpoints_engine_state_and_groups(moto: Moto, sources: Sources) -> None:
    endpoint, ids = moto
    source = await estate(sources, section(endpoint))
    listing = await source.list(HERE, "database")
    assert listing.api == "rds:DescribeDBInstances"
    dbs = {r.id: r for r in listing.resources}
    prod = dbs["prod-db-03"]
    assert prod.kind == "database" and prod.provider == "aws" and prod.account == "prod" and prod.region == REGION
    assert prod.state == "stopped"
    (address,) = prod.dns_names
    assert address.startswith("prod-db-03.") and address.endswith(".rds.amazonaws.com")
    assert (prod.details["engine"], prod.details["port"], prod.details["class"]) == ("mysql", "3306", "db.t3.micro")
    assert [link.target for link in prod.links_of("security_group")] == [ids.ssh_group]
    assert prod.owner == "dba"
    assert dbs["orders-pg"].state == "available" and dbs["orders-pg"].details["port"] == "5432"


async def test_cache_lists_the_replication_group_endpoints(moto: Moto, sources: Sources) -> None:
    source = await estate(sources, section(moto[0]))
    redis = (await listed(source, "cache"))["orders-redis"]
    assert redis.state == "available"
    details = redis.details
    assert (details["engine"], details["port"], details["type"]) == ("redis", "6379", "cache.t3.micro")
    assert redis.details["primary"].startswith("master.orders-redis.")
    assert redis.details["primary"] in redis.dns_names
    assert all(name.endswith(".cache.amazonaws.com") for name in redis.dns_names)


async def test_load_balancer_has_listeners_with_backends_and_health(
    moto: Moto, sources: Sources
) -> None:
    _, ids = moto
    source = await estate(sources, section(moto[0]))
    alb = (await listed(source, "load_balancer"))["api-alb"]
    assert alb.id == ids.alb_arn and alb.dns_names == (ids.alb_dns.lower(),)
    assert alb.details["type"] == "application" and alb.details["scheme"] == "internet"
    assert [link.target for link in alb.links_of("security_group")] == [ids.web_group]
    assert [link.target for link in alb.links_of("in_vpc")] == [ids.vpc]
    assert [(lst.protocol, lst.port) for lst in alb.listeners] == [("http", 80), ("https", 443)]
    http, https = alb.listeners
    assert http.backends == () and http.name == "redirect"  # listed although it sends nothing to a backend
    assert https.name == "api-tg"
    backends = {b.target: b for b in https.backends}
    assert set(backends) == {ids.running, ids.stopped}
    assert backends[ids.running].health == "healthy" and backends[ids.running].port == 8080
    assert backends[ids.running].kind == "server"
    # moto, like AWS, reports a stopped instance as "unused" (Target.InvalidState), not "unhealthy".
    assert backends[ids.stopped].health == "unused" and "stopped" in backends[ids.stopped].note


async def test_security_group_rules_are_normalized(moto: Moto, sources: Sources) -> None:
    _, ids = moto
    source = await estate(sources, section(moto[0]))
    groups = by_id(await listed(source, "security_group"))
    ssh = groups[ids.ssh_group]
    assert ssh.name == "bastion-ssh" and ssh.details["vpc"] == ids.vpc
    world = [r for r in ssh.rules if r.direction == "ingress" and r.open_to_world]
    assert {r.source for r in world} == {"0.0.0.0/0", "::/0"}
    assert all(r.covers(22) and not r.covers(23) and r.protocol == "tcp" for r in world)
    egress = [(r.protocol, r.port_from, r.port_to, r.source) for r in ssh.rules if r.direction == "egress"]
    assert ("all", 0, 65535, "0.0.0.0/0") in egress
    web = groups[ids.web_group]
    from_group = [r for r in web.rules if r.source == ids.ssh_group]
    assert len(from_group) == 1 and from_group[0].covers(8080) and not from_group[0].open_to_world
    assert ("udp", 5000, 5100, "10.0.0.0/8") in [(r.protocol, r.port_from, r.port_to, r.source) for r in web.rules]


async def test_elastic_ips_and_nat_gateways(moto: Moto, sources: Sources) -> None:
    _, ids = moto
    source = await estate(sources, section(moto[0]))
    ips = by_id(await listed(source, "ip"))
    eip = ips[ids.eip_allocation]
    assert eip.public_ips == (ids.eip,) and eip.state == "in_use"
    assert [(link.target, link.kind) for link in eip.links_of("attached_to")] == [(ids.running, "server")]
    nat = by_id(await listed(source, "nat_gateway"))[ids.nat]
    assert nat.public_ips == (ids.nat_ip,) and nat.state == "available" and nat.private_ips
    assert [link.target for link in nat.links_of("in_vpc")] == [ids.vpc]


async def test_dns_records_point_to_the_load_balancer(moto: Moto, sources: Sources) -> None:
    _, ids = moto
    source = await estate(sources, section(moto[0]))
    assert [t.region for t in source.targets("dns_record")] == [""]
    listing = await source.list(GLOBAL, "dns_record")
    records = {r.id: r for r in listing.resources if r.details.get("zone") == "example.com"}
    api = records["api.example.com A"]
    assert api.name == "api.example.com" and api.dns_names == ("api.example.com",) and api.region == ""
    assert [link.target for link in api.links_of("points_to")] == [ids.alb_dns.lower()]
    assert api.details["alias"] == "yes"
    www = records["www.example.com CNAME"]
    assert www.links_of("points_to")[0].target == ids.alb_dns.lower() and www.details["ttl"] == "300"
    assert {"mail.example.com A 198.51.100.1", "mail.example.com A 198.51.100.2"} <= set(records)
    assert not any(r.details.get("type") == "SOA" for r in records.values())


async def test_buckets_carry_their_own_region_and_public_flag(moto: Moto, sources: Sources) -> None:
    _, ids = moto
    source = await estate(sources, section(moto[0]))
    buckets = await listed(source, "bucket", GLOBAL)
    by_policy, by_acl, private = buckets[ids.public_bucket], buckets[ids.acl_bucket], buckets[ids.private_bucket]
    assert by_policy.region == REGION
    assert (by_policy.details["public"], by_policy.details["public_by"]) == ("yes", "policy")
    assert f"{ids.public_bucket}.s3.{REGION}.amazonaws.com" in by_policy.dns_names
    assert by_acl.details["public"] == "yes" and by_acl.details["acl"] == "public"
    assert private.region == BUCKET_REGION and private.details["public"] == "no" and private.details["acl"] == "private"


# --- changes from CloudTrail -----------------------------------------------------------------------


def trail_events(now: float) -> list[dict[str, Any]]:
    return [
        trail_event("StopDBInstance", now - 3600, user="alice", resource="prod-db-03", source_ip="198.51.100.9"),
        trail_event("ModifyDBInstance", now - 7200, user="bob", role="ops-automation", resource="prod-db-03"),
        trail_event("StartDBInstance", now - 9000, user="mallory", resource="prod-db-03", error_code="AccessDenied"),
        trail_event("StopDBInstance", now - 600, user="carol", resource="orders-pg"),
        trail_event("CreateDBInstance", now - 40 * 86400, user="alice", resource="prod-db-03"),
    ]


async def test_changes_name_who_stopped_the_database(moto: Moto, sources: Sources) -> None:
    now = time.time()
    with FakeCloudTrail({REGION: trail_events(now)}, access_key=KEY_ID) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint))
        changes = await source.changes(HERE, ChangeQuery(resource_id="prod-db-03", since=now - 86400))
        request = trail.arrivals()[0].body
    assert [c.action for c in changes] == ["StopDBInstance", "ModifyDBInstance", "StartDBInstance"]
    stop, modify, start = changes
    assert stop.principal == "alice" and stop.source_ip == "198.51.100.9" and stop.outcome == "success"
    assert stop.resource_id == "prod-db-03" and stop.resource_kind == "database" and stop.region == REGION
    assert stop.time == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600))
    assert modify.principal == "AssumedRole/ops-automation (bob)"
    assert start.outcome == "AccessDenied"
    assert request["LookupAttributes"] == [{"AttributeKey": "ResourceName", "AttributeValue": "prod-db-03"}]
    assert abs(request["StartTime"] - (now - 86400)) < 1


async def test_a_throttled_lookup_is_retried_then_answers(moto: Moto, sources: Sources) -> None:
    now = time.time()
    with FakeCloudTrail({REGION: trail_events(now)}, access_key=KEY_ID, throttle_first=2) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint))
        changes = await source.changes(HERE, ChangeQuery(resource_id="prod-db-03", since=now - 86400))
        statuses = [a.status for a in trail.arrivals()]
    assert changes[0].principal == "alice"
    assert statuses == [400, 400, 200]  # boto3's own retries are off: each throttle came back to the budget


async def test_the_budget_paces_concurrent_lookups(moto: Moto, sources: Sources) -> None:
    now, calls, qps = time.time(), 16, 5
    with FakeCloudTrail({REGION: trail_events(now)}, access_key=KEY_ID) as trail:
        config = section(moto[0], trail=trail.endpoint, api_qps={"LookupEvents": qps}, timeout_s=30)
        source = await estate(sources, config)
        query = ChangeQuery(resource_id="prod-db-03", since=now - 86400)
        answers = await asyncio.gather(*(source.changes(HERE, query) for _ in range(calls)))
        times = sorted(a.at for a in trail.arrivals() if a.region == REGION)
    assert len(times) == calls and all(a[0].action == "StopDBInstance" for a in answers)
    burst = qps  # the budget starts full: one second's worth may go at once
    for i, start in enumerate(times):
        in_window = sum(1 for t in times if start <= t < start + 1.0)
        assert in_window <= burst + qps, (i, in_window)
        if i >= burst:  # after the initial burst, the rate holds (one call of slack for arrival jitter)
            assert in_window <= qps + 1, (i, in_window)
    assert times[-1] - times[0] >= (calls - burst - 1) / qps * 0.9


async def test_a_denied_lookup_names_the_missing_action(moto: Moto, sources: Sources) -> None:
    with FakeCloudTrail({REGION: []}, access_key=KEY_ID, denied=True) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint))
        with pytest.raises(SourceError) as caught:
            await source.changes(HERE, ChangeQuery(resource_id="prod-db-03"))
    assert caught.value.kind == "permission"
    assert caught.value.reason == "permission denied: needs cloudtrail:LookupEvents"


async def test_a_wrong_key_is_a_credentials_failure_without_the_key(moto: Moto, sources: Sources) -> None:
    wrong = "AKIAWRONGWRONGWRONG1"
    with FakeCloudTrail({REGION: []}, access_key=KEY_ID) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint, key=wrong))
        with pytest.raises(SourceError) as caught:
            await source.changes(HERE, ChangeQuery(resource_id="prod-db-03"))
        assert len(trail.arrivals(400)) == 1  # not retried: a bad key does not get better
    assert caught.value.kind == "credentials"
    for secret in (wrong, KEY_ID, SECRET):
        assert secret not in caught.value.reason and secret not in str(caught.value)


async def test_pagination_is_bounded_and_says_it_was_cut(moto: Moto, sources: Sources) -> None:
    now = time.time()
    events = [trail_event("RebootDBInstance", now - 60 * n, user=f"u{n}", resource="prod-db-03") for n in range(7)]
    with FakeCloudTrail({REGION: events}, access_key=KEY_ID, page_cap=2) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint, api_qps={"cloudtrail": 50}))

        def fetch(client: Any, token: Any) -> Page:
            answer = client.lookup_events(MaxResults=50, **({"NextToken": token} if token else {}))
            return Page(answer.get("Events") or [], answer.get("NextToken"))

        items, cut = await source.paginate(HERE, "cloudtrail", "LookupEvents", fetch, bound=3)
        assert (len(items), cut) == (3, True)
        assert len(trail.arrivals()) == 2  # stopped paging at the bound
        items, cut = await source.paginate(HERE, "cloudtrail", "LookupEvents", fetch, bound=100)
        assert (len(items), cut) == (7, False)
        changes = await source.changes(HERE, ChangeQuery(resource_id="prod-db-03", limit=3))
    assert [c.principal for c in changes] == ["u0", "u1", "u2"]


# --- failures before and around calls ------------------------------------------------------------------


async def test_an_unreachable_endpoint_is_reported_as_such(sources: list[AwsEstate]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    source = await estate(sources, section(f"http://127.0.0.1:{port}"))
    with pytest.raises(SourceError) as caught:
        await source.list(HERE, "security_group")
    assert caught.value.kind == "unreachable" and "Amazon EC2" in caught.value.reason


async def test_missing_credentials_are_reported_without_any_call(
    moto: Moto, sources: Sources, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws files
    for name in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    with FakeCloudTrail({REGION: []}, access_key=KEY_ID) as trail:
        source = await estate(sources, section(moto[0], trail=trail.endpoint, key="", secret=""))
        assert not source.has_credentials(source.config.accounts[0])
        missing = [p for p in source.prerequisites() if not p.ok]
        assert [p.what for p in missing] == ["AWS credentials of account prod"]
        with pytest.raises(SourceError) as caught:
            await source.changes(HERE, ChangeQuery(resource_id="prod-db-03"))
        assert trail.arrivals() == []
    assert caught.value.kind == "credentials" and "AWS_ACCESS_KEY_ID" in caught.value.reason
