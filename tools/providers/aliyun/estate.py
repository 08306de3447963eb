"""Alibaba Cloud's estate beyond servers, read with its official SDKs: RDS, KVStore, SLB, VPC, ECS groups, Alidns, OSS.

Each product has its own OpenAPI client (``alibabacloud_<product><version>``),
built from a ``tea_openapi`` :class:`Config` with the account's keys (or the
SDK's credential chain) and the product's endpoint; OSS has its own SDK
(``alibabacloud_oss_v2``, signature v4). Each API's requests are built and
its answers unwrapped in :mod:`tools.providers.aliyun.calls`, the records are
mapped in :mod:`tools.providers.aliyun.mapping`; the budgets, throttle retries
and paging are :class:`~tools.estate.sdk_source.SdkSource`'s.

Some kinds need a second call per record (an SLB's listeners and backend
health, a group's rules, a database's addresses). Those calls share the
listing's deadline and the API's budget; a record whose second call failed
is still listed, with a note saying what was not read.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from botgateway.config import CloudAccount
from tools.estate.gathering import raise_or
from tools.estate.resource import Change, Resource
from tools.estate.sdk_source import Page, Product, SdkSource, env_has
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, Listing, SourceError, Target
from tools.providers.aliyun import calls, mapping
from tools.providers.aliyun.servers import CHAIN_ENV, CHAIN_FILES
from tools.providers.sdk import credential_chain_configured, resolve_keys, short_reason, split_endpoint

__all__ = ["AliyunEstate", "failure"]

V = TypeVar("V")

_OPENAPI = "alibabacloud_tea_openapi"

_ENDPOINTS = {
    "rds": "rds.aliyuncs.com",
    "kvstore": "r-kvstore.aliyuncs.com",
    "slb": "slb.aliyuncs.com",
    "vpc": "vpc.aliyuncs.com",
    "ecs": "ecs.{region}.aliyuncs.com",
    "alidns": "alidns.aliyuncs.com",
    "actiontrail": "actiontrail.{region}.aliyuncs.com",
}
"""Each OpenAPI product's public endpoint (OSS derives its own from the region)."""

_CLIENTS = {
    "rds": "alibabacloud_rds20140815.client",
    "kvstore": "alibabacloud_r_kvstore20150101.client",
    "slb": "alibabacloud_slb20140515.client",
    "vpc": "alibabacloud_vpc20160428.client",
    "ecs": "alibabacloud_ecs20140526.client",
    "alidns": "alibabacloud_alidns20150109.client",
    "actiontrail": "alibabacloud_actiontrail20200706.client",
}
"""The module holding each OpenAPI product's ``Client``."""

_DEFAULT_REGION = "cn-hangzhou"
"""Where global services (Alidns, the OSS bucket list) are asked when the account names no region."""

_TRAIL_DAYS = 90
"""How far back ActionTrail's event lookup reaches."""

_PERMISSION = re.compile(r"^(Forbidden|NoPermission|Unauthorized|AccessDenied)|NotAuthorized", re.I)
_CREDENTIALS = re.compile(
    r"^(InvalidAccessKeyId|SignatureDoesNotMatch|IncompleteSignature|InvalidSecurityToken|InvalidAccessKeySecret)", re.I
)


def _product(key: str, label: str, module: str, qps: float = 10.0) -> Product:
    modules = (module,) if module == "alibabacloud_oss_v2" else (module, _OPENAPI)
    return Product(key, label, modules, qps=qps, burst=max(1, int(qps)))


class AliyunEstate(SdkSource):
    """Every configured Alibaba Cloud account × region: data stores, network, DNS, buckets and the trail."""

    name = "aliyun"
    label = "Alibaba Cloud"
    extra = "aliyun"
    products: ClassVar[Mapping[str, Product]] = {
        "rds": _product("rds", "ApsaraDB RDS", "alibabacloud_rds20140815"),
        "kvstore": _product("kvstore", "Tair/KVStore for Redis", "alibabacloud_r_kvstore20150101"),
        "slb": _product("slb", "Server Load Balancer", "alibabacloud_slb20140515"),
        "vpc": _product("vpc", "VPC (EIP, NAT gateway)", "alibabacloud_vpc20160428"),
        "ecs": _product("ecs", "ECS security groups", "alibabacloud_ecs20140526"),
        "alidns": _product("alidns", "Alibaba Cloud DNS", "alibabacloud_alidns20150109"),
        "oss": _product("oss", "Object Storage Service", "alibabacloud_oss_v2"),
        # LookupEvents is documented far below the others' rates.
        "actiontrail": _product("actiontrail", "ActionTrail", "alibabacloud_actiontrail20200706", qps=2.0),
    }
    kind_products: ClassVar[Mapping[str, str]] = {
        "database": "rds",
        "cache": "kvstore",
        "load_balancer": "slb",
        "security_group": "ecs",
        "ip": "vpc",
        "nat_gateway": "vpc",
        "dns_record": "alidns",
        "bucket": "oss",
    }
    global_kinds = frozenset({"dns_record", "bucket"})
    changes_product = "actiontrail"
    apis: ClassVar[Mapping[str, str]] = {
        "database": "rds:DescribeDBInstances",
        "cache": "kvstore:DescribeInstances",
        "load_balancer": "slb:DescribeLoadBalancers",
        "security_group": "ecs:DescribeSecurityGroups",
        "ip": "vpc:DescribeEipAddresses",
        "nat_gateway": "vpc:DescribeNatGateways",
        "dns_record": "alidns:DescribeDomainRecords",
        "bucket": "oss:ListBuckets",
    }

    # -- clients and errors -----------------------------------------------------------------

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A ``tea_openapi`` client of ``product`` (or the OSS v2 client) for ``account`` in ``region``."""
        region = region or (account.regions[0] if account.regions else _DEFAULT_REGION)
        endpoint = self.endpoint(account, product)
        if product == "oss":
            return _oss_client(account, region, endpoint, self.timeout_s)
        return _openapi_client(product, account, region, endpoint, self.timeout_s)

    def has_credentials(self, account: CloudAccount) -> bool:
        """Keys in the config or the environment, or something for the SDK's credential chain to find."""
        configured = bool(account.access_key_id.get_secret_value() and account.access_key_secret.get_secret_value())
        chain = credential_chain_configured(CHAIN_ENV, CHAIN_FILES)
        return configured or env_has("ALIBABA_CLOUD_ACCESS_KEY_ID") or chain

    def credentials_fix(self) -> str:
        """Where Alibaba Cloud keys go."""
        return _CREDENTIALS_FIX

    def classify(self, exc: Exception, product: str) -> SourceError:
        """A short reason for an SDK error whose API is not known (see :func:`failure`)."""
        return failure(exc, self.products[product].label, product, "")

    async def _pages(self, target: Target, product: str, api: str, fetch: Callable[[Any, Any], Page],
                     bound: int | None = None) -> tuple[list[Mapping[str, Any]], bool]:
        guarded = _guarded(fetch, self.products[product].label, product, api)
        if bound is None:
            return await self.paginate(target, product, api, guarded)
        return await self.paginate(target, product, api, guarded, bound=bound)

    async def _each(self, target: Target, product: str, api: str, fn: Callable[[Any, Any], V],
                    items: Sequence[Any], deadline: float, *, required: bool = True) -> list[V | SourceError]:
        """``fn(client, item)`` for every item, concurrently within the API's budget; failures returned, not raised.

        When the second call is ``required`` (a group's rules, an SLB's listeners: without them the record
        would read as "no rules", "no listener") and every call failed for want of permission or
        credentials, that failure is raised instead, naming the missing action.
        """
        guarded = _guarded(fn, self.products[product].label, product, api)

        async def one(item: Any) -> V | SourceError:
            try:
                return await self.call(target, product, api, guarded, item, deadline=deadline)
            except SourceError as exc:
                return exc

        results = await asyncio.gather(*(one(item) for item in items))
        failures = [r for r in results if isinstance(r, SourceError)]
        if required and items and len(failures) == len(results) and failures[0].kind in ("permission", "credentials"):
            raise failures[0]
        return list(results)

    # -- listings -------------------------------------------------------------------------

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """List ``kind`` at ``target`` (a region, or the account for DNS records and buckets)."""
        listers: dict[str, Callable[[Target], Awaitable[Listing]]] = {
            "database": self._databases,
            "cache": self._caches,
            "load_balancer": self._load_balancers,
            "security_group": self._security_groups,
            "ip": self._eips,
            "nat_gateway": self._nat_gateways,
            "dns_record": self._dns_records,
            "bucket": self._buckets,
        }
        return await listers[kind](target)

    async def _plain(self, target: Target, product: str, api: str, fetch: Callable[[Any, Any], Page],
                     to_resource: Callable[[Mapping[str, Any], str, str], Resource]) -> Listing:
        """A kind read by one paged API, each record mapped alone."""
        items, cut = await self._pages(target, product, api, fetch)
        return Listing(tuple(to_resource(i, target.account, target.region) for i in items), cut, f"{product}:{api}")

    async def _databases(self, target: Target) -> Listing:
        deadline = time.monotonic() + self.timeout_s
        items, cut = await self._pages(target, "rds", "DescribeDBInstances", calls.database_pages(target.region))
        infos = await self._each(target, "rds", "DescribeDBInstanceNetInfo", calls.database_net_info, items, deadline,
                                 required=False)
        resources = tuple(
            mapping.to_database(item, _ok(info), target.account, target.region, note=_not_read(info))
            for item, info in zip(items, infos, strict=True)
        )
        return Listing(resources, cut, "rds:DescribeDBInstances+DescribeDBInstanceNetInfo")

    async def _caches(self, target: Target) -> Listing:
        fetch = calls.cache_pages(target.region)
        return await self._plain(target, "kvstore", "DescribeInstances", fetch, mapping.to_cache)

    async def _load_balancers(self, target: Target) -> Listing:
        deadline = time.monotonic() + self.timeout_s
        fetch = calls.load_balancer_pages(target.region)
        attribute, health = calls.load_balancer_attribute(target.region), calls.backend_health(target.region)
        items, cut = await self._pages(target, "slb", "DescribeLoadBalancers", fetch)
        attributes, healths = await asyncio.gather(
            self._each(target, "slb", "DescribeLoadBalancerAttribute", attribute, items, deadline),
            self._each(target, "slb", "DescribeHealthStatus", health, items, deadline, required=False),
        )
        resources = tuple(
            mapping.to_load_balancer(item, _ok(attr), _ok(rows), target.account, target.region,
                                     note=_not_read(attr) or _not_read(rows).replace("not read", "health not read"))
            for item, attr, rows in zip(items, attributes, healths, strict=True)
        )
        return Listing(resources, cut, "slb:DescribeLoadBalancers+DescribeLoadBalancerAttribute+DescribeHealthStatus")

    async def _security_groups(self, target: Target) -> Listing:
        deadline = time.monotonic() + self.timeout_s
        fetch, rules = calls.security_group_pages(target.region), calls.security_group_rules(target.region)
        groups, cut = await self._pages(target, "ecs", "DescribeSecurityGroups", fetch)
        attributes = await self._each(target, "ecs", "DescribeSecurityGroupAttribute", rules, groups, deadline)
        resources = tuple(
            mapping.to_security_group(group, _ok(attr), target.account, target.region, note=_not_read(attr))
            for group, attr in zip(groups, attributes, strict=True)
        )
        return Listing(resources, cut, "ecs:DescribeSecurityGroups+DescribeSecurityGroupAttribute")

    async def _eips(self, target: Target) -> Listing:
        fetch = calls.eip_pages(target.region)
        return await self._plain(target, "vpc", "DescribeEipAddresses", fetch, mapping.to_eip)

    async def _nat_gateways(self, target: Target) -> Listing:
        fetch = calls.nat_gateway_pages(target.region)
        return await self._plain(target, "vpc", "DescribeNatGateways", fetch, mapping.to_nat_gateway)

    async def _dns_records(self, target: Target) -> Listing:
        zones, cut = await self._pages(target, "alidns", "DescribeDomains", calls.domain_pages())
        names = [str(zone.get("DomainName") or "") for zone in zones]
        api = "alidns:DescribeDomains+DescribeDomainRecords"
        # Every zone's first page at once (most zones fit in one); then, in zone order as if read one by one, a
        # zone with more is read again up to what the bound leaves, and the first failure in order fails it all.
        firsts = await asyncio.gather(*(
            self._pages(target, "alidns", "DescribeDomainRecords", calls.zone_record_pages(name), bound=calls.PAGE)
            for name in names
        ), return_exceptions=True)
        out: list[Resource] = []
        for name, first in zip(names, firsts, strict=True):
            if len(out) >= MAX_PER_LISTING:
                return Listing(tuple(out), True, api)
            rows, zone_cut = raise_or(first)
            bound = MAX_PER_LISTING - len(out)
            if zone_cut and bound > len(rows):
                rows, zone_cut = await self._pages(target, "alidns", "DescribeDomainRecords",
                                                   calls.zone_record_pages(name), bound)
            out.extend(mapping.to_dns_records(rows[:bound], name, target.account))
            cut = cut or zone_cut or len(rows) > bound
        return Listing(tuple(out), cut, api)

    async def _buckets(self, target: Target) -> Listing:
        deadline = time.monotonic() + self.timeout_s
        buckets, cut = await self._pages(target, "oss", "ListBuckets", calls.bucket_pages())
        names: dict[str, list[str]] = {}
        for info in buckets:  # an ACL is read at the bucket's own regional endpoint, every region's at once
            names.setdefault(str(info.get("Region") or ""), []).append(str(info["Name"]))
        grants = await asyncio.gather(*(
            self._each(Target(target.provider, target.account, region), "oss", "GetBucketAcl", calls.bucket_acl,
                       in_region, deadline, required=False)
            for region, in_region in names.items()
        ))
        acls: dict[str, str | SourceError] = {}
        for in_region, read in zip(names.values(), grants, strict=True):
            acls.update(zip(in_region, read, strict=True))
        resources = tuple(
            mapping.to_bucket(info, _ok(acls.get(str(info["Name"]), "")) or "", target.account,
                              note=_not_read(acls.get(str(info["Name"]))))
            for info in buckets
        )
        return Listing(resources, cut, "oss:ListBuckets+GetBucketAcl")

    # -- changes --------------------------------------------------------------------------

    async def read_changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """ActionTrail events on the resource (looked up by its id, else its name), newest first."""
        wanted = query.resource_id or query.resource_name
        if not wanted:
            raise SourceError("error", "ActionTrail is looked up by a resource id or name; give one")
        now = time.time()
        start = max(query.since, now - _TRAIL_DAYS * 86400)
        fetch = calls.trail_event_pages(wanted, start, query.until or now, query.limit)
        events, _ = await self._pages(target, "actiontrail", "LookupEvents", fetch, bound=max(1, query.limit))
        changes = [
            mapping.to_change(e, target.account, target.region, wanted_id=query.resource_id or wanted,
                              wanted_name=query.resource_name)
            for e in events
        ]
        return sorted(changes, key=lambda change: change.time, reverse=True)


# --- clients -------------------------------------------------------------------------------------

_CREDENTIALS_FIX = (
    "set access_key_id/access_key_secret, ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET, "
    "or ALIBABA_CLOUD_ECS_METADATA (RAM role name)"
)


def _keys(account: CloudAccount) -> tuple[str, str, str | None]:
    """The account's keys (or the environment's); empty keys mean the SDK's chain, checked to have something first."""
    key_id, secret, token = resolve_keys(
        account, "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"
    )
    if not (key_id and secret) and not credential_chain_configured(CHAIN_ENV, CHAIN_FILES):
        raise SourceError("credentials", f"no credentials: {_CREDENTIALS_FIX}")
    return key_id, secret, token


def _openapi_client(product: str, account: CloudAccount, region: str, endpoint: str | None, timeout_s: float) -> Any:
    """A ``tea_openapi`` product client; the endpoint's scheme (``http`` for a loopback fake) sets the protocol."""
    import importlib

    from alibabacloud_tea_openapi.models import Config

    scheme, host = split_endpoint(endpoint)
    options: dict[str, Any] = {
        "region_id": region,
        "endpoint": host or _ENDPOINTS[product].format(region=region),
        "protocol": scheme or "https",
        "connect_timeout": int(min(timeout_s, 5) * 1000),
        "read_timeout": int(timeout_s * 1000),
    }
    key_id, secret, token = _keys(account)
    if key_id and secret:
        options.update(access_key_id=key_id, access_key_secret=secret)
        if token:
            options["security_token"] = token
    else:  # the SDK's default chain: credentials file, ECS RAM role, OIDC role
        from alibabacloud_credentials.client import Client as CredentialClient

        options["credential"] = CredentialClient()
    return importlib.import_module(_CLIENTS[product]).Client(Config(**options))


def _oss_client(account: CloudAccount, region: str, endpoint: str | None, timeout_s: float) -> Any:
    """An OSS v2 client (signature v4, signed for ``region``); retries are left to the source's budget."""
    import alibabacloud_oss_v2 as oss

    config = oss.config.load_default()
    key_id, secret, token = _keys(account)
    if key_id and secret:
        config.credentials_provider = oss.credentials.StaticCredentialsProvider(key_id, secret, token)
    else:
        from alibabacloud_credentials.client import Client as CredentialClient

        chain = CredentialClient()

        def from_chain() -> Any:
            found = chain.get_credential()
            return oss.types.Credentials(found.access_key_id, found.access_key_secret, found.security_token)

        config.credentials_provider = oss.credentials.CredentialsProviderFunc(from_chain)
    config.region = region
    if endpoint:
        config.endpoint = endpoint if "://" in endpoint else f"https://{endpoint}"
    config.connect_timeout = min(timeout_s, 5)
    config.readwrite_timeout = timeout_s
    config.retryer = oss.retry.NopRetryer()
    return oss.Client(config)


# --- errors --------------------------------------------------------------------------------------


def failure(exc: BaseException, label: str, product: str, api: str) -> SourceError:
    """A short, secret-free :class:`SourceError` for an SDK error; permission denials name the RAM action.

    ``product`` is also the RAM action namespace (``rds:DescribeDBInstances``); ``label`` names the product.
    """
    if isinstance(exc, SourceError):
        return exc
    service = _service_error(exc)
    code = str(getattr(service, "code", "") or "")
    if _PERMISSION.search(code):
        return SourceError("permission", f"permission denied: needs {product}:{api or '*'} (RAM)")
    if _CREDENTIALS.match(code):
        return SourceError("credentials", f"invalid credentials ({code}): check the access key")
    if code.startswith("Throttling"):
        wait_ms = getattr(service, "retry_after", None)  # the x-acs-retry-after header, in milliseconds
        retry_after_s = wait_ms / 1000 if isinstance(wait_ms, (int, float)) else None
        return SourceError("throttled", f"throttled by {api or product} ({code})", retry_after_s=retry_after_s)
    names = " ".join(type(e).__name__ for e in _chain(exc))
    if "Timeout" in names:
        return SourceError("timeout", f"{api or product}: the API did not answer in time")
    if "Connection" in names or "MaxRetryError" in names or "NameResolution" in names:
        return SourceError("unreachable", f"{label} API endpoint unreachable")
    if code:
        return SourceError("not_found" if ".NotFound" in code else "error", short_reason(code))
    return SourceError("error", short_reason(type(exc).__name__))


# --- helpers -------------------------------------------------------------------------------------


def _guarded(fn: Callable[..., V], label: str, product: str, api: str) -> Callable[..., V]:
    """``fn`` raising :func:`failure`'s error for its API instead of the SDK's."""

    def guarded(client: Any, *args: Any) -> V:
        try:
            return fn(client, *args)
        except Exception as exc:  # every SDK error shape becomes a short reason naming the API
            raise failure(exc, label, product, api) from None

    return guarded


def _not_read(result: object) -> str:
    """The note on a record whose second call failed."""
    return f"not read: {result.reason}" if isinstance(result, SourceError) else ""


def _ok(result: V | SourceError) -> V | None:
    return None if isinstance(result, SourceError) else result


def _chain(exc: BaseException) -> list[BaseException]:
    """The error and what it wraps (the SDKs nest: ``OperationError`` → ``ServiceError``, ``inner_exception``…)."""
    out: list[BaseException] = []
    node: Any = exc
    while isinstance(node, BaseException) and node not in out and len(out) < 8:
        out.append(node)
        unwrap = getattr(node, "unwrap", None)
        inner = unwrap() if callable(unwrap) else None
        node = inner or getattr(node, "inner_exception", None) or node.__cause__ or node.__context__
    return out


def _service_error(exc: BaseException) -> BaseException:
    """The first error in the chain that carries the API's error code."""
    return next((e for e in _chain(exc) if getattr(e, "code", None)), exc)
