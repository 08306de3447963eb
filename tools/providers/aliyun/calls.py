"""The Alibaba Cloud SDK calls behind the estate's listings: each API's request and its answer as the API's dicts.

Every listing API here is read a page at a time by a fetcher
(``fetch(client, token) -> Page``) that :meth:`~tools.estate.sdk_source.SdkSource.paginate`
drives; the second call a record needs (a database's addresses, an SLB's
attribute and backend health, a group's rules, a bucket's ACL) takes
``(client, record)``. Answers are unwrapped into the API's own dict shape
(``{"Items": {"DBInstance": [...]}}``) for :mod:`tools.providers.aliyun.mapping`.
The product SDKs are optional, so each is imported when its call is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from tools.estate.sdk_source import Page

__all__ = [
    "PAGE",
    "Fetch",
    "backend_health",
    "bucket_acl",
    "bucket_pages",
    "cache_pages",
    "database_net_info",
    "database_pages",
    "domain_pages",
    "eip_pages",
    "load_balancer_attribute",
    "load_balancer_pages",
    "nat_gateway_pages",
    "security_group_pages",
    "security_group_rules",
    "trail_event_pages",
    "zone_record_pages",
]

PAGE = 100
"""Records asked per page (the most every listing API here allows, but KVStore and NAT at 50)."""

Fetch = Callable[[Any, Any], Page]
"""One page of a listing API: ``fetch(client, token)``, the token ``None`` for the first page."""


# --- the listing APIs ------------------------------------------------------------------------


def database_pages(region: str) -> Fetch:
    """RDS ``DescribeDBInstances`` in ``region``."""
    from alibabacloud_rds20140815 import models

    return _numbered_fetch(lambda client, number: client.describe_dbinstances(
        models.DescribeDBInstancesRequest(region_id=region, page_number=number, page_size=PAGE)
    ), "Items", "DBInstance", "TotalRecordCount")


def cache_pages(region: str) -> Fetch:
    """KVStore ``DescribeInstances`` in ``region``."""
    from alibabacloud_r_kvstore20150101 import models

    return _numbered_fetch(lambda client, number: client.describe_instances(
        models.DescribeInstancesRequest(region_id=region, page_number=number, page_size=50)
    ), "Instances", "KVStoreInstance")


def load_balancer_pages(region: str) -> Fetch:
    """SLB ``DescribeLoadBalancers`` in ``region``."""
    from alibabacloud_slb20140515 import models

    return _numbered_fetch(lambda client, number: client.describe_load_balancers(
        models.DescribeLoadBalancersRequest(region_id=region, page_number=number, page_size=PAGE)
    ), "LoadBalancers", "LoadBalancer")


def security_group_pages(region: str) -> Fetch:
    """ECS ``DescribeSecurityGroups`` in ``region`` (token-paged)."""
    from alibabacloud_ecs20140526 import models

    def fetch(client: Any, token: Any) -> Page:
        request = models.DescribeSecurityGroupsRequest(region_id=region, max_results=PAGE, next_token=token)
        body = _body(client.describe_security_groups(request))
        return Page(_items(body, "SecurityGroups", "SecurityGroup"), body.get("NextToken") or None)

    return fetch


def eip_pages(region: str) -> Fetch:
    """VPC ``DescribeEipAddresses`` in ``region``."""
    from alibabacloud_vpc20160428 import models

    return _numbered_fetch(lambda client, number: client.describe_eip_addresses(
        models.DescribeEipAddressesRequest(region_id=region, page_number=number, page_size=PAGE)
    ), "EipAddresses", "EipAddress")


def nat_gateway_pages(region: str) -> Fetch:
    """VPC ``DescribeNatGateways`` in ``region``."""
    from alibabacloud_vpc20160428 import models

    return _numbered_fetch(lambda client, number: client.describe_nat_gateways(
        models.DescribeNatGatewaysRequest(region_id=region, page_number=number, page_size=50)
    ), "NatGateways", "NatGateway")


def domain_pages() -> Fetch:
    """Alidns ``DescribeDomains``: the account's zones."""
    from alibabacloud_alidns20150109 import models

    return _numbered_fetch(lambda client, number: client.describe_domains(
        models.DescribeDomainsRequest(page_number=number, page_size=PAGE)
    ), "Domains", "Domain")


def zone_record_pages(zone: str) -> Fetch:
    """Alidns ``DescribeDomainRecords``: the records of ``zone``."""
    from alibabacloud_alidns20150109 import models

    return _numbered_fetch(partial(_zone_page, models.DescribeDomainRecordsRequest, zone), "DomainRecords", "Record")


def bucket_pages() -> Fetch:
    """OSS ``ListBuckets`` (marker-paged), each bucket as the XML names its fields."""
    import alibabacloud_oss_v2 as oss

    def fetch(client: Any, token: Any) -> Page:
        result = client.list_buckets(oss.ListBucketsRequest(marker=token, max_keys=1000))
        items = [_bucket_info(b) for b in result.buckets or []]
        return Page(items, result.next_marker if result.is_truncated and result.next_marker else None)

    return fetch


def trail_event_pages(resource: str, start: float, end: float, limit: int) -> Fetch:
    """ActionTrail ``LookupEvents`` on ``resource`` (an id or a name) between ``start`` and ``end`` (epoch seconds)."""
    from alibabacloud_actiontrail20200706 import models

    attribute = models.LookupEventsRequestLookupAttribute(key="ResourceName", value=resource)

    def fetch(client: Any, token: Any) -> Page:
        request = models.LookupEventsRequest(
            lookup_attribute=[attribute], start_time=_iso(start), end_time=_iso(end),
            max_results=min(50, max(1, limit)), next_token=token,
        )
        body = _body(client.lookup_events(request))
        events = [e for e in body.get("Events") or [] if isinstance(e, Mapping)]
        return Page(events, (body.get("NextToken") or None) if events else None)

    return fetch


# --- the second call per record ----------------------------------------------------------------


def database_net_info(client: Any, item: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """RDS ``DescribeDBInstanceNetInfo``: a database's addresses."""
    from alibabacloud_rds20140815 import models

    request = models.DescribeDBInstanceNetInfoRequest(dbinstance_id=item.get("DBInstanceId"))
    body = _body(client.describe_dbinstance_net_info(request))
    return _items(body, "DBInstanceNetInfos", "DBInstanceNetInfo")


def load_balancer_attribute(region: str) -> Callable[[Any, Mapping[str, Any]], Mapping[str, Any]]:
    """SLB ``DescribeLoadBalancerAttribute`` in ``region``: a load balancer's listeners and backends."""
    from alibabacloud_slb20140515 import models

    def attribute(client: Any, item: Mapping[str, Any]) -> Mapping[str, Any]:
        lb = item.get("LoadBalancerId")
        request = models.DescribeLoadBalancerAttributeRequest(region_id=region, load_balancer_id=lb)
        return _body(client.describe_load_balancer_attribute(request))

    return attribute


def backend_health(region: str) -> Callable[[Any, Mapping[str, Any]], list[Mapping[str, Any]]]:
    """SLB ``DescribeHealthStatus`` in ``region``: a load balancer's backends and their health."""
    from alibabacloud_slb20140515 import models

    def health(client: Any, item: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        lb = item.get("LoadBalancerId")
        request = models.DescribeHealthStatusRequest(region_id=region, load_balancer_id=lb)
        return _items(_body(client.describe_health_status(request)), "BackendServers", "BackendServer")

    return health


def security_group_rules(region: str) -> Callable[[Any, Mapping[str, Any]], Mapping[str, Any]]:
    """ECS ``DescribeSecurityGroupAttribute`` in ``region``: a group's rules, both directions."""
    from alibabacloud_ecs20140526 import models

    def rules(client: Any, group: Mapping[str, Any]) -> Mapping[str, Any]:
        request = models.DescribeSecurityGroupAttributeRequest(
            region_id=region, security_group_id=group.get("SecurityGroupId"), direction="all"
        )
        return _body(client.describe_security_group_attribute(request))

    return rules


def bucket_acl(client: Any, name: str) -> str:
    """OSS ``GetBucketAcl``: bucket ``name``'s canned ACL (``private``, ``public-read``, …)."""
    import alibabacloud_oss_v2 as oss

    return str(client.get_bucket_acl(oss.GetBucketAclRequest(bucket=name)).acl or "")


# --- answers ------------------------------------------------------------------------------------


def _body(response: Any) -> Mapping[str, Any]:
    """An OpenAPI response's body as the API's own dict."""
    body = getattr(response, "body", None)
    return body.to_map() if body is not None else {}


def _items(body: Mapping[str, Any], outer: str, inner: str) -> list[Mapping[str, Any]]:
    """``body[outer][inner]`` (how every list arrives: ``{"Items": {"DBInstance": [...]}}``)."""
    node = (body.get(outer) or {}).get(inner) if isinstance(body.get(outer), Mapping) else None
    return [item for item in node or [] if isinstance(item, Mapping)]


def _numbered(body: Mapping[str, Any], items: list[Mapping[str, Any]], number: int, seen: int,
              total_key: str = "TotalCount") -> Page:
    """A ``PageNumber``-paged answer; the next token is (next page, records so far) while records remain."""
    seen += len(items)
    total = int(body.get(total_key) or 0)
    return Page(items, (number + 1, seen) if items and seen < total else None)


def _numbered_fetch(request: Callable[[Any, int], Any], outer: str, inner: str,
                    total_key: str = "TotalCount") -> Fetch:
    """A page fetcher for a ``PageNumber``/``PageSize`` API: ``request(client, page_number)`` calls it."""

    def fetch(client: Any, token: Any) -> Page:
        number, seen = token or (1, 0)
        body = _body(request(client, number))
        return _numbered(body, _items(body, outer, inner), number, seen, total_key)

    return fetch


def _zone_page(make_request: Callable[..., Any], zone: str, client: Any, number: int) -> Any:
    """One page of an Alidns zone's records."""
    return client.describe_domain_records(make_request(domain_name=zone, page_number=number, page_size=PAGE))


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bucket_info(bucket: Any) -> dict[str, Any]:
    """An OSS v2 ``BucketProperties`` as the ``ListBuckets`` XML names its fields."""
    return {
        "Name": bucket.name,
        "Region": bucket.region,
        "Location": bucket.location,
        "CreationDate": bucket.creation_date,
        "StorageClass": bucket.storage_class,
        "ExtranetEndpoint": bucket.extranet_endpoint,
        "IntranetEndpoint": bucket.intranet_endpoint,
    }
