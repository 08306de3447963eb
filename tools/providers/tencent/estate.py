"""Tencent Cloud's estate beyond servers (CDB, Redis, CLB, VPC, DNSPod, COS, CloudAudit) through the official SDKs.

Every TC3 product is called the same way: a typed ``<Action>Request`` model
filled from a dict, the client's method of that name, the response model back
as a dict for :mod:`.mapping`. Lists page by ``Offset``/``Limit`` against a
total; CloudAudit pages by ``NextToken``. An SDK error is classified where the
action is known, so a CAM denial names the exact action to grant. Follow-up
calls that do not need each other's answer (a balancer's health, listeners and
targets; every DNS zone's records) run at once; when several fail, the first in
call order is the one reported, as when they ran one after another.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from botgateway.budget import RateLimit
from botgateway.config import CloudAccount
from tools.estate.gathering import settled
from tools.estate.resource import Change, Resource
from tools.estate.sdk_source import Page, Product, SdkSource
from tools.estate.source import ChangeQuery, Listing, SourceError, Target
from tools.providers.sdk import short_reason, split_endpoint
from tools.providers.tencent import credentials, mapping

__all__ = ["TencentEstate"]

V = TypeVar("V")

PAGE = 100
"""Records asked per page (every list API here takes at least 100)."""
DETAIL_FANOUT = 100
"""Most per-resource detail calls (a database's groups, a bucket's ACL) one listing makes; past it they are skipped."""

_SDK: Mapping[str, tuple[str, str, str]] = {
    "cdb": ("tencentcloud.cdb.v20170320", "CdbClient", "cdb.tencentcloudapi.com"),
    "redis": ("tencentcloud.redis.v20180412", "RedisClient", "redis.tencentcloudapi.com"),
    "clb": ("tencentcloud.clb.v20180317", "ClbClient", "clb.tencentcloudapi.com"),
    "vpc": ("tencentcloud.vpc.v20170312", "VpcClient", "vpc.tencentcloudapi.com"),
    "dnspod": ("tencentcloud.dnspod.v20210323", "DnspodClient", "dnspod.tencentcloudapi.com"),
    "cloudaudit": ("tencentcloud.cloudaudit.v20190319", "CloudauditClient", "cloudaudit.tencentcloudapi.com"),
}
"""TC3 products: the SDK package, its client class, the real endpoint."""

_EMPTY_CODES = ("ResourceNotFound.NoDataOfDomain", "ResourceNotFound.NoDataOfRecord")
"""DNSPod answers an empty list with these errors instead of an empty page."""



class _Empty(Exception):
    """A DNSPod "no data" answer: an empty page, not a failure."""


class TencentEstate(SdkSource):
    """Databases, caches, load balancers, security groups, EIPs, NAT gateways, DNS records, buckets and the trail."""

    name = "tencent"
    label = "Tencent Cloud"
    extra = "tencent"
    products: ClassVar[Mapping[str, Product]] = {
        "cdb": Product("cdb", "TencentDB for MySQL", ("tencentcloud.cdb.v20170320", "tencentcloud.common"), qps=20),
        "redis": Product("redis", "TencentDB for Redis", ("tencentcloud.redis.v20180412",), qps=20),
        "clb": Product("clb", "Cloud Load Balancer", ("tencentcloud.clb.v20180317",), qps=20),
        "vpc": Product("vpc", "Virtual Private Cloud", ("tencentcloud.vpc.v20170312",), qps=20),
        "dnspod": Product("dnspod", "DNSPod", ("tencentcloud.dnspod.v20210323",), qps=20),
        "cos": Product("cos", "Cloud Object Storage", ("qcloud_cos",), qps=20),
        "cloudaudit": Product("cloudaudit", "CloudAudit", ("tencentcloud.cloudaudit.v20190319",), qps=5),
    }
    kind_products: ClassVar[Mapping[str, str]] = {
        "database": "cdb", "cache": "redis", "load_balancer": "clb", "security_group": "vpc", "ip": "vpc",
        "nat_gateway": "vpc", "dns_record": "dnspod", "bucket": "cos",
    }
    global_kinds: ClassVar[frozenset[str]] = frozenset({"dns_record", "bucket"})
    changes_product: ClassVar[str] = "cloudaudit"
    apis: ClassVar[Mapping[str, str]] = {
        "database": "cdb:DescribeDBInstances", "cache": "redis:DescribeInstances",
        "load_balancer": "clb:DescribeLoadBalancers", "security_group": "vpc:DescribeSecurityGroups",
        "ip": "vpc:DescribeAddresses", "nat_gateway": "vpc:DescribeNatGateways",
        "dns_record": "dnspod:DescribeRecordList", "bucket": "cos:GetService",
    }

    # -- clients and errors -----------------------------------------------------------

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A TC3 client (or a COS client) with the endpoint override and the account's credentials."""
        scheme, host = split_endpoint(self.endpoint(account, product))
        if product == "cos":
            secret_id, secret_key, token = credentials.keys(account)
            return self._cos_client(region, scheme, host, secret_id, secret_key, token)
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile

        cred = credentials.sdk_credential(account)
        if cred is None:
            raise SourceError("credentials", self.credentials_fix())
        package, class_name, real_host = _SDK[product]
        http = HttpProfile(
            protocol=scheme or "https", endpoint=host or real_host, reqTimeout=max(1, round(self.timeout_s))
        )
        client_class = getattr(importlib.import_module(f"{package}.{package.rsplit('.', 2)[1]}_client"), class_name)
        return client_class(cred, region, ClientProfile(httpProfile=http))

    def _cos_client(
        self, region: str, scheme: str | None, host: str | None, secret_id: str, secret_key: str, token: str | None
    ) -> Any:
        from qcloud_cos import CosConfig, CosS3Client

        if not (secret_id and secret_key):
            raise SourceError("credentials", self.credentials_fix())
        options: dict[str, Any] = {}
        if host:  # a private or test endpoint: every request goes there, with the bucket's usual Host header
            address, _, port = host.partition(":")
            options = {"ServiceDomain": host, "IP": address, "Port": int(port) if port else None}
        config = CosConfig(
            Region=region or "ap-guangzhou", SecretId=secret_id, SecretKey=secret_key, Token=token,
            Scheme=scheme or "https", Timeout=max(1, round(self.timeout_s)), **options,
        )
        return CosS3Client(config, retry=1)

    def classify(self, exc: Exception, product: str) -> SourceError:
        """A :class:`SourceError` for an SDK error whose action is unknown (see :func:`_classify`)."""
        return _classify(exc, product, "")

    def limit_of(self, product: str, api: str) -> RateLimit:
        """The config's ``api_qps`` for ``cdb:DescribeDBInstances``, for ``DescribeDBInstances``, else the product's."""
        spec = self.products[product]
        qps = (self.config.api_qps.get(api) or self.config.api_qps.get(api.partition(":")[2])
               or self.config.api_qps.get(product) or spec.qps)
        return RateLimit(rate_per_s=qps, burst=spec.burst or max(1, int(qps)))

    def has_credentials(self, account: CloudAccount) -> bool:
        """Keys in the config or environment, or a credential chain to read."""
        return credentials.has_credentials(account)

    def credentials_fix(self) -> str:
        """Where Tencent Cloud keys go."""
        return credentials.NO_CREDENTIALS

    # -- calling -----------------------------------------------------------------------

    @staticmethod
    def invoke(client: Any, product: str, action: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``client.<action>(<action>Request from body)`` as a dict; SDK errors become :class:`SourceError`."""
        models = importlib.import_module(f"{_SDK[product][0]}.models")
        request = getattr(models, f"{action}Request")()
        request.from_json_string(json.dumps(body))
        try:
            answer: dict[str, Any] = json.loads(getattr(client, action)(request).to_json_string())
        except Exception as exc:
            if _code(exc) in _EMPTY_CODES:
                raise _Empty from None
            raise _classify(exc, product, action) from None
        return answer

    def offset_pages(
        self, product: str, action: str, body: Mapping[str, Any], items: str, total: Callable[[Mapping[str, Any]], Any],
        *, as_text: bool = False,
    ) -> Callable[[Any, Any], Page]:
        """A ``fetch`` for :meth:`paginate` over ``Offset``/``Limit`` (strings where the API types them so)."""

        def fetch(client: Any, token: Any) -> Page:
            offset = int(token or 0)
            paging: dict[str, Any] = {"Offset": offset, "Limit": PAGE}
            try:
                answer = self.invoke(client, product, action, {**body, **({k: str(v) for k, v in paging.items()}
                                                                           if as_text else paging)})
            except _Empty:
                return Page(items=[])
            found = answer.get(items) or []
            more = bool(found) and offset + len(found) < int(total(answer) or 0)
            return Page(items=found, next_token=offset + len(found) if more else None)

        return fetch

    async def one(self, target: Target, product: str, action: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One unpaged call."""
        api = f"{product}:{action}"
        return await self.call(target, product, api, lambda client: self.invoke(client, product, action, body))

    # -- kinds --------------------------------------------------------------------------

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """One kind at one target."""
        lister = {
            "database": self._databases, "cache": self._caches, "load_balancer": self._load_balancers,
            "security_group": self._security_groups, "ip": self._addresses, "nat_gateway": self._nat_gateways,
            "dns_record": self._records, "bucket": self._buckets,
        }[kind]
        resources, cut = await lister(target)
        return Listing(tuple(resources), cut=cut, api=self.api_of(kind))

    async def _list(
        self, target: Target, product: str, action: str, items: str, total: str = "TotalCount", *, as_text: bool = False
    ) -> tuple[list[Mapping[str, Any]], bool]:
        fetch = self.offset_pages(product, action, {}, items, lambda a: a.get(total), as_text=as_text)
        return await self.paginate(target, product, f"{product}:{action}", fetch)

    async def _databases(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "cdb", "DescribeDBInstances", "Items")
        groups = await asyncio.gather(*(
            self._db_groups(target, item.get("InstanceId") or "") for item in items[:DETAIL_FANOUT]
        ))
        padded = list(groups) + [()] * (len(items) - len(groups))
        out = [
            mapping.database_to_resource(i, target.account, target.region, g)
            for i, g in zip(items, padded, strict=True)
        ]
        return out, cut

    async def _db_groups(self, target: Target, instance_id: str) -> tuple[str, ...]:
        """The instance's security groups; a denial of this one call leaves them out rather than failing the list."""
        try:
            answer = await self.one(target, "cdb", "DescribeDBSecurityGroups", {"InstanceId": instance_id})
        except SourceError as exc:
            if exc.kind in ("permission", "not_found", "error"):
                return ()
            raise
        return tuple(g.get("SecurityGroupId") or "" for g in answer.get("Groups") or [] if g.get("SecurityGroupId"))

    async def _caches(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "redis", "DescribeInstances", "InstanceSet")
        return [mapping.cache_to_resource(i, target.account, target.region) for i in items], cut

    async def _load_balancers(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "clb", "DescribeLoadBalancers", "LoadBalancerSet")
        ids = [i.get("LoadBalancerId") or "" for i in items]
        # DescribeTargetHealth takes 20 load balancers per call; its batches and each balancer's details are
        # independent reads, all started at once (each draws from its own API's budget).
        batches, details = await asyncio.gather(
            asyncio.gather(*(
                self.one(target, "clb", "DescribeTargetHealth", {"LoadBalancerIds": ids[start : start + 20]})
                for start in range(0, len(ids), 20)
            ), return_exceptions=True),
            asyncio.gather(*(self._lb_detail(target, lb) for lb in ids), return_exceptions=True),
        )
        settled([*batches, *details])
        health: list[Mapping[str, Any]] = [lb for answer in batches for lb in answer.get("LoadBalancers") or []]
        out = [
            mapping.load_balancer_to_resource(item, target.account, target.region, listeners, targets, health)
            for item, (listeners, targets) in zip(items, details, strict=True)
        ]
        return out, cut

    async def _lb_detail(self, target: Target, lb: str) -> tuple[list[Any], list[Any]]:
        listeners, targets = settled(await asyncio.gather(
            self.one(target, "clb", "DescribeListeners", {"LoadBalancerId": lb}),
            self.one(target, "clb", "DescribeTargets", {"LoadBalancerId": lb}),
            return_exceptions=True,
        ))
        return listeners.get("Listeners") or [], targets.get("Listeners") or []

    async def _security_groups(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "vpc", "DescribeSecurityGroups", "SecurityGroupSet", as_text=True)
        policies = await asyncio.gather(*(
            self.one(target, "vpc", "DescribeSecurityGroupPolicies", {"SecurityGroupId": i.get("SecurityGroupId")})
            for i in items
        ))
        out = [
            mapping.security_group_to_resource(i, target.account, target.region, p.get("SecurityGroupPolicySet") or {})
            for i, p in zip(items, policies, strict=True)
        ]
        return out, cut

    async def _addresses(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "vpc", "DescribeAddresses", "AddressSet")
        return [mapping.address_to_resource(i, target.account, target.region) for i in items], cut

    async def _nat_gateways(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self._list(target, "vpc", "DescribeNatGateways", "NatGatewaySet")
        return [mapping.nat_gateway_to_resource(i, target.account, target.region) for i in items], cut

    async def _records(self, target: Target) -> tuple[list[Resource], bool]:
        zones, cut = await self.paginate(target, "dnspod", "dnspod:DescribeDomainList", self.offset_pages(
            "dnspod", "DescribeDomainList", {}, "DomainList",
            lambda a: (a.get("DomainCountInfo") or {}).get("AllTotal"),
        ))
        names = [str(zone.get("Name") or "") for zone in zones]
        # Every zone's records at once: they share DescribeRecordList's budget, which paces them anyway.
        listed = settled(
            await asyncio.gather(*(self._zone_records(target, name) for name in names), return_exceptions=True)
        )
        out: list[Resource] = []
        for name, (records, zone_cut) in zip(names, listed, strict=True):
            out.extend(mapping.records_to_resources(records, name, target.account))
            cut = cut or zone_cut
        return out, cut

    async def _zone_records(self, target: Target, name: str) -> tuple[list[Mapping[str, Any]], bool]:
        return await self.paginate(target, "dnspod", "dnspod:DescribeRecordList", self.offset_pages(
            "dnspod", "DescribeRecordList", {"Domain": name}, "RecordList",
            lambda a: (a.get("RecordCountInfo") or {}).get("TotalCount"),
        ))

    async def _buckets(self, target: Target) -> tuple[list[Resource], bool]:
        answer = await self.call(
            target, "cos", "cos:GetService", lambda client: _cos("GetService", client.list_buckets)
        )
        buckets = (answer.get("Buckets") or {}).get("Bucket") or []
        acls = await asyncio.gather(*(self._bucket_acl(target, b) for b in buckets[:DETAIL_FANOUT]))
        padded = list(acls) + [None] * (len(buckets) - len(acls))
        return [mapping.bucket_to_resource(b, target.account, a) for b, a in zip(buckets, padded, strict=True)], False

    async def _bucket_acl(self, target: Target, bucket: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The bucket's ACL, read in its own region; a denied ACL leaves "public" unknown."""
        where = Target(self.name, target.account, str(bucket.get("Location") or ""))
        name = str(bucket.get("Name") or "")
        try:
            acl: Mapping[str, Any] = await self.call(
                where, "cos", "cos:GetBucketACL",
                lambda client: _cos("GetBucketACL", client.get_bucket_acl, Bucket=name),
            )
        except SourceError as exc:
            if exc.kind in ("permission", "not_found"):
                return None
            raise
        return acl

    # -- the trail --------------------------------------------------------------------

    async def read_changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """CloudAudit ``LookUpEvents`` for the resource (by id, else by name), newest first."""
        key, value = ("ResourceId", query.resource_id) if query.resource_id else ("ResourceName", query.resource_name)
        until = int(query.until or time.time())
        body: dict[str, Any] = {
            "StartTime": int(query.since or until - 7 * 86400), "EndTime": until,
            "MaxResults": min(50, max(1, query.limit)),
        }
        if value:
            body["LookupAttributes"] = [{"AttributeKey": key, "AttributeValue": value}]

        def fetch(client: Any, token: Any) -> Page:
            paging = {"NextToken": token} if token else {}
            answer = self.invoke(client, "cloudaudit", "LookUpEvents", {**body, **paging})
            more = not answer.get("ListOver", True) and answer.get("NextToken")
            return Page(items=answer.get("Events") or [], next_token=answer.get("NextToken") if more else None)

        events, _ = await self.paginate(
            target, "cloudaudit", "cloudaudit:LookUpEvents", fetch, bound=max(1, query.limit)
        )
        changes = [
            mapping.event_to_change(e, target.account, target.region, resource_id=query.resource_id) for e in events
        ]
        return sorted(changes, key=lambda c: c.time, reverse=True)


def _cos(action: str, method: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """Call the COS SDK; its errors become :class:`SourceError` naming the COS ``action``."""
    try:
        answer: dict[str, Any] = method(**kwargs)
    except Exception as exc:
        raise _classify(exc, "cos", action) from None
    return answer


def _code(exc: Exception) -> str:
    if hasattr(exc, "get_code"):  # TencentCloudSDKException
        return str(exc.get_code() or "")
    if hasattr(exc, "get_error_code"):  # CosServiceError
        return str(exc.get_error_code() or "")
    return ""


def _classify(exc: Exception, product: str, action: str) -> SourceError:
    """A short, secret-free reason; a CAM denial names ``product:Action``."""
    if isinstance(exc, SourceError):
        return exc
    code = _code(exc)
    needs = f"{product}:{action}" if action else product
    if code in ("AuthFailure.UnauthorizedOperation", "AccessDenied") or code.startswith("UnauthorizedOperation"):
        return SourceError("permission", f"permission denied: needs {needs} (CAM)")
    if code.startswith("AuthFailure") or code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
        return SourceError("credentials", f"invalid credentials ({code}): check the SecretId/SecretKey")
    if code.startswith("RequestLimitExceeded") or code == "SlowDown":
        return SourceError("throttled", f"throttled by {needs} ({code})")
    if code in ("ResourceNotFound", "NoSuchBucket") or code.startswith("ResourceNotFound"):
        return SourceError("not_found", f"{needs}: {code}")
    network = code in ("ClientNetworkError", "ServerNetworkError") or type(exc).__name__ == "CosClientError"
    if network or "Connection" in type(exc).__name__:
        return SourceError("unreachable", f"{needs}: API endpoint unreachable")
    return SourceError("error", short_reason(code or type(exc).__name__, "" if code else f"{needs} failed"))
