"""The AWS estate apart from servers: RDS, ElastiCache, ELBv2, EC2 network objects, Route 53, S3 and CloudTrail.

Each listing is the fewest read-only calls that give the whole picture: a load
balancer is ``DescribeLoadBalancers`` plus, per balancer, its listeners, and per
target group its health (the groups themselves in one call per region). Route
53 and the S3 bucket list are global (one target per account); a bucket's own
region comes from ``GetBucketLocation``. Calls that do not need each other's
answer run at once (instances and clusters, balancers and target groups,
listeners and health, a bucket's policy status and ACL), so a listing takes
as many round trips as its longest chain of dependent calls. Raw answers are
mapped in :mod:`tools.providers.aws.mapping`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from botgateway.budget import RateBudget
from botgateway.config import CloudAccount, CloudProviderConfig
from tools.estate.gathering import both, raise_or
from tools.estate.resource import Change, Resource
from tools.estate.sdk_source import Page, Product, SdkSource
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, Listing, SourceError, Target
from tools.providers.aws import mapping
from tools.providers.sdk import credential_chain_configured, resolve_keys, short_reason

__all__ = ["AwsEstate"]

A = TypeVar("A")
B = TypeVar("B")
V = TypeVar("V")

Paged = tuple[list[Mapping[str, Any]], bool]
"""What :meth:`SdkSource.paginate` answers: the records and whether they were cut."""

_MODULES = ("boto3",)

_PERMISSION = {"AccessDenied", "UnauthorizedOperation", "AccessDeniedException", "OptInRequired"}
_THROTTLED = {
    "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException", "PriorRequestNotComplete",
    "SlowDown", "RequestThrottled",
}
_CREDENTIALS = {
    "InvalidClientTokenId", "AuthFailure", "SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken",
    "InvalidAccessKeyId",
}
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ConnectTimeout", "ConnectionClosedError"}
_IAM_PREFIX = {"elbv2": "elasticloadbalancing"}
_IAM_ACTION = {"ListBuckets": "ListAllMyBuckets"}
"""S3 operations whose IAM action has another name."""

_CHAIN_ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ROLE_ARN",
)
_CHAIN_FILES = ((".aws", "credentials"), (".aws", "config"))

_ROUTE53_BUDGET = "route53"
"""Route 53 allows 5 requests per second per account across all its APIs, so every call draws from one budget."""
_EC2_BUDGET = "ec2"
"""EC2 meters its non-mutating (Describe*) calls in one shared bucket per account and region."""
_PAGE = 100


class AwsEstate(SdkSource):
    """Every configured AWS account × region, through ``boto3``."""

    name = "aws"
    label = "AWS"
    extra = "aws"
    products: ClassVar[Mapping[str, Product]] = {
        "rds": Product("rds", "Amazon RDS", _MODULES, qps=10),
        "elasticache": Product("elasticache", "Amazon ElastiCache", _MODULES, qps=10),
        "elbv2": Product("elbv2", "Elastic Load Balancing", _MODULES, qps=10),
        "ec2": Product("ec2", "Amazon EC2", _MODULES, qps=20),
        "route53": Product("route53", "Amazon Route 53", _MODULES, qps=5),
        "s3": Product("s3", "Amazon S3", _MODULES, qps=20),
        "cloudtrail": Product("cloudtrail", "AWS CloudTrail", _MODULES, qps=2),
    }
    kind_products: ClassVar[Mapping[str, str]] = {
        "database": "rds", "cache": "elasticache", "load_balancer": "elbv2", "security_group": "ec2",
        "ip": "ec2", "nat_gateway": "ec2", "dns_record": "route53", "bucket": "s3",
    }
    global_kinds: ClassVar[frozenset[str]] = frozenset({"dns_record", "bucket"})
    changes_product: ClassVar[str] = "cloudtrail"
    apis: ClassVar[Mapping[str, str]] = {
        "database": "rds:DescribeDBInstances",
        "cache": "elasticache:DescribeReplicationGroups",
        "load_balancer": "elasticloadbalancing:DescribeLoadBalancers",
        "security_group": "ec2:DescribeSecurityGroups",
        "ip": "ec2:DescribeAddresses",
        "nat_gateway": "ec2:DescribeNatGateways",
        "dns_record": "route53:ListResourceRecordSets",
        "bucket": "s3:ListAllMyBuckets",
    }

    def __init__(self, config: CloudProviderConfig, *, budget: RateBudget | None = None) -> None:
        super().__init__(config, budget=budget)
        self._sessions: dict[str, Any] = {}
        self._session_lock = threading.Lock()

    # -- clients and errors -------------------------------------------------------------------

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A ``boto3`` client; global services get their home region, retries are ours (one attempt here)."""
        import boto3
        from botocore.config import Config

        key_id, secret, token = resolve_keys(account, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
        if not (key_id and secret) and not credential_chain_configured(_CHAIN_ENV, _CHAIN_FILES):
            raise SourceError("credentials", self.credentials_fix())
        if product == "route53":
            region = "us-east-1"
        elif not region:
            region = account.regions[0] if account.regions else "us-east-1"
        config = Config(
            connect_timeout=min(self.timeout_s, 5), read_timeout=self.timeout_s,
            retries={"max_attempts": 1, "mode": "standard"},
        )
        endpoint = self.endpoint(account, product) or None
        # One session per account: its loader parses each service model once (a fresh session per client
        # re-reads it, about half a second a client). Sessions are not thread-safe, hence the lock.
        with self._session_lock:
            session = self._sessions.get(account.name)
            if session is None:
                session = self._sessions[account.name] = boto3.session.Session(
                    aws_access_key_id=key_id or None, aws_secret_access_key=secret or None, aws_session_token=token,
                )
            return session.client(  # type: ignore[call-overload]
                product, region_name=region, endpoint_url=endpoint, config=config
            )

    def classify(self, exc: Exception, product: str) -> SourceError:
        """ClientError codes and botocore transport errors, in the estate's words; never the error's message."""
        name = type(exc).__name__
        if isinstance(exc, SourceError):
            return exc
        response = getattr(exc, "response", None)
        if isinstance(response, Mapping) and "Error" in response:
            code = str((response.get("Error") or {}).get("Code") or "")
            operation = str(getattr(exc, "operation_name", "") or "")
            if code in _PERMISSION:
                action = _IAM_ACTION.get(operation, operation) or "?"
                service = _IAM_PREFIX.get(product, product)
                return SourceError("permission", f"permission denied: needs {service}:{action}")
            if code in _THROTTLED:
                reason = f"throttled by {operation or product}"
                return SourceError("throttled", reason, retry_after_s=_retry_after(response))
            if code in _CREDENTIALS:
                return SourceError("credentials", "invalid credentials (check the access key)")
            if code.startswith("NoSuch") or code.endswith(("NotFound", "NotFoundFault")):
                return SourceError("not_found", short_reason(code))
            return SourceError("error", short_reason(code or name))
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return SourceError("credentials", self.credentials_fix())
        if name in _UNREACHABLE:
            return SourceError("unreachable", f"{self.products[product].label} API endpoint unreachable")
        if name in ("ReadTimeoutError", "TimeoutError"):
            return SourceError("timeout", f"timed out after {self.timeout_s:g} s")
        return SourceError("error", short_reason(name))

    def has_credentials(self, account: CloudAccount) -> bool:
        """Keys in the config or environment, or a profile, role or container credentials the chain can find."""
        if account.access_key_id.get_secret_value() and account.access_key_secret.get_secret_value():
            return True
        if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
            return True
        return credential_chain_configured(_CHAIN_ENV, _CHAIN_FILES)

    def credentials_fix(self) -> str:
        """Where AWS keys go."""
        return ("no credentials: set access_key_id/access_key_secret, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE, or run with an instance/container role")

    # -- listings ---------------------------------------------------------------------------

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """Dispatch to the kind's lister."""
        listers: dict[str, Callable[[Target], Any]] = {
            "database": self._databases, "cache": self._caches, "load_balancer": self._load_balancers,
            "security_group": self._security_groups, "ip": self._addresses, "nat_gateway": self._nat_gateways,
            "dns_record": self._records, "bucket": self._buckets,
        }
        resources, cut = await listers[kind](target)
        return Listing(tuple(resources), cut, self.api_of(kind))

    async def _databases(self, target: Target) -> tuple[list[Resource], bool]:
        # Instances and clusters are independent reads: one round trip, not two.
        (items, cut), (clusters, more) = await both(
            self.paginate(target, "rds", "DescribeDBInstances", _marker_pager("describe_db_instances", "DBInstances")),
            self._db_clusters(target),
        )
        out = [mapping.to_database(i, target.account, target.region) for i in items]
        out += [mapping.to_db_cluster(c, target.account, target.region) for c in clusters]
        return out, cut or more

    async def _db_clusters(self, target: Target) -> tuple[list[Mapping[str, Any]], bool]:
        try:
            fetch = _marker_pager("describe_db_clusters", "DBClusters")
            return await self.paginate(target, "rds", "DescribeDBClusters", fetch)
        except SourceError as exc:
            if exc.kind in ("throttled", "timeout"):
                raise
            # The instances answered; clusters the role may not read only add their shared endpoints.
            return [], False

    async def _caches(self, target: Target) -> tuple[list[Resource], bool]:
        fetch = _marker_pager("describe_replication_groups", "ReplicationGroups")
        items, cut = await self.paginate(target, "elasticache", "DescribeReplicationGroups", fetch)
        return [mapping.to_cache(i, target.account, target.region) for i in items], cut

    async def _load_balancers(self, target: Target) -> tuple[list[Resource], bool]:
        fetch = _marker_pager("describe_load_balancers", "LoadBalancers", size_key="PageSize")
        groups_fetch = _marker_pager("describe_target_groups", "TargetGroups", size_key="PageSize")
        # The groups are read alongside the balancers, a round trip less (a region without balancers pays
        # that one call for nothing); with no balancer their answer, or failure, does not matter.
        reads: tuple[Paged | BaseException, Paged | BaseException] = await asyncio.gather(
            self.paginate(target, "elbv2", "DescribeLoadBalancers", fetch),
            self.paginate(target, "elbv2", "DescribeTargetGroups", groups_fetch),
            return_exceptions=True,
        )
        balancers_read, groups_read = reads
        balancers, cut = raise_or(balancers_read)
        if not balancers:
            return [], cut
        groups_list, _ = raise_or(groups_read)
        groups = {str(g.get("TargetGroupArn")): g for g in groups_list if g.get("LoadBalancerArns")}
        listener_lists, healths = await both(
            asyncio.gather(*(
                self.paginate(target, "elbv2", "DescribeListeners", _listener_pager(str(b["LoadBalancerArn"])))
                for b in balancers
            )),
            asyncio.gather(*(
                self.call(target, "elbv2", "DescribeTargetHealth", _target_health, arn) for arn in groups
            )),
        )
        health = dict(zip(groups, healths, strict=True))
        out = [
            mapping.to_load_balancer(b, listeners, groups, health, target.account, target.region)
            for b, (listeners, _) in zip(balancers, listener_lists, strict=True)
        ]
        return out, cut

    async def _security_groups(self, target: Target) -> tuple[list[Resource], bool]:
        fetch = _token_pager("describe_security_groups", "SecurityGroups", MaxResults=1000)
        items, cut = await self.paginate(target, "ec2", _EC2_BUDGET, fetch)
        return [mapping.to_security_group(i, target.account, target.region) for i in items], cut

    async def _addresses(self, target: Target) -> tuple[list[Resource], bool]:
        items, cut = await self.paginate(target, "ec2", _EC2_BUDGET, _whole("describe_addresses", "Addresses"))
        return [mapping.to_address(i, target.account, target.region) for i in items], cut

    async def _nat_gateways(self, target: Target) -> tuple[list[Resource], bool]:
        fetch = _token_pager("describe_nat_gateways", "NatGateways", MaxResults=1000)
        items, cut = await self.paginate(target, "ec2", _EC2_BUDGET, fetch)
        return [mapping.to_nat_gateway(i, target.account, target.region) for i in items], cut

    async def _records(self, target: Target) -> tuple[list[Resource], bool]:
        zones, cut = await self.paginate(target, "route53", _ROUTE53_BUDGET, _zone_pager)
        out: list[Resource] = []
        for zone in zones:  # one zone after another: they share Route 53's 5 calls a second anyway
            left = MAX_PER_LISTING - len(out)
            if left <= 0:
                return out[:MAX_PER_LISTING], True
            fetch = _record_pager(str(zone["Id"]))
            records, more = await self.paginate(target, "route53", _ROUTE53_BUDGET, fetch, bound=left)
            for item in records:
                if item.get("Type") != "SOA":
                    out.extend(mapping.to_records(item, zone, target.account))
            cut = cut or more
        return out[:MAX_PER_LISTING], cut or len(out) > MAX_PER_LISTING

    async def _buckets(self, target: Target) -> tuple[list[Resource], bool]:
        started = time.monotonic()
        items, cut = await self.paginate(target, "s3", "ListBuckets", _whole("list_buckets", "Buckets"))
        tasks = [asyncio.create_task(self._bucket_facts(target, str(b.get("Name")))) for b in items]
        if tasks:
            # Three calls a bucket: a large account gets what fits in the timeout, the rest reads "unknown".
            await asyncio.wait(tasks, timeout=max(0.1, started + 0.8 * self.timeout_s - time.monotonic()))
        for task in tasks:
            task.cancel()
        facts = [t.result() if t.done() and not t.cancelled() and t.exception() is None else {} for t in tasks]
        return [mapping.to_bucket(b, f, target.account) for b, f in zip(items, facts, strict=True)], cut

    async def _bucket_facts(self, target: Target, bucket: str) -> dict[str, str]:
        """Region, then public status from the bucket's own region (S3 answers bucket calls only there)."""
        try:
            location = await self.call(target, "s3", "GetBucketLocation", _bucket_location, bucket)
        except SourceError as exc:
            if exc.kind != "permission":
                raise
            return {"public": "unknown", "why": exc.reason}
        here = Target(target.provider, target.account, location)
        # Policy status and ACL are read at once; a public policy makes the ACL's answer (or failure) moot.
        policy_read, acl_read = await asyncio.gather(
            self.call(here, "s3", "GetBucketPolicyStatus", _policy_public, bucket),
            self.call(here, "s3", "GetBucketAcl", _acl_public, bucket),
            return_exceptions=True,
        )
        policy = raise_or(policy_read)
        facts = {"region": location}
        if policy == "yes":
            return {**facts, "public": "yes", "why": "policy"}
        acl = raise_or(acl_read)
        public = "yes" if acl == "public" else ("unknown" if "unknown" in (policy, acl) else "no")
        return {**facts, "public": public, "acl": acl, "why": "acl" if acl == "public" else ""}

    # -- changes ----------------------------------------------------------------------------

    async def read_changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """CloudTrail ``LookupEvents`` by resource name (the id, then the name if it differs), newest first."""
        wanted = list(dict.fromkeys(v for v in (query.resource_id, query.resource_name) if v))
        if not wanted:
            raise SourceError("error", "a resource id or name is needed to read CloudTrail")
        limit = max(1, min(query.limit, MAX_PER_LISTING))
        found = await asyncio.gather(*(
            self.paginate(target, "cloudtrail", "LookupEvents", _events_pager(value, query, limit), bound=limit)
            for value in wanted
        ))
        seen: dict[str, Mapping[str, Any]] = {}
        for events, _ in found:
            for event in events:
                seen.setdefault(str(event.get("EventId") or id(event)), event)
        ordered = sorted(seen.values(), key=lambda e: _epoch(e.get("EventTime")), reverse=True)[:limit]
        return [mapping.to_change(e, target.account, target.region, wanted) for e in ordered]


# --- running calls side by side ---------------------------------------------------------------


# --- blocking fetchers (run on the source's pool) -------------------------------------------------


def _marker_pager(method: str, key: str, *, size_key: str = "MaxRecords", **params: Any) -> Callable[[Any, Any], Page]:
    """Pages of an API that takes ``Marker`` and answers ``Marker``/``NextMarker`` (RDS, ElastiCache, ELBv2)."""

    def fetch(client: Any, token: Any) -> Page:
        kwargs = {**params, size_key: _PAGE}
        if token:
            kwargs["Marker"] = token
        answer = getattr(client, method)(**kwargs)
        return Page(answer.get(key) or [], answer.get("NextMarker") or answer.get("Marker") or None)

    return fetch


def _token_pager(method: str, key: str, **params: Any) -> Callable[[Any, Any], Page]:
    """Pages of an EC2 API that takes and answers ``NextToken``."""

    def fetch(client: Any, token: Any) -> Page:
        kwargs = dict(params)
        if token:
            kwargs["NextToken"] = token
        answer = getattr(client, method)(**kwargs)
        return Page(answer.get(key) or [], answer.get("NextToken") or None)

    return fetch


def _whole(method: str, key: str) -> Callable[[Any, Any], Page]:
    """An API that answers everything at once."""

    def fetch(client: Any, token: Any) -> Page:
        return Page(getattr(client, method)().get(key) or [], None)

    return fetch


def _listener_pager(arn: str) -> Callable[[Any, Any], Page]:
    return _marker_pager("describe_listeners", "Listeners", size_key="PageSize", LoadBalancerArn=arn)


def _target_health(client: Any, arn: str) -> list[Mapping[str, Any]]:
    return list(client.describe_target_health(TargetGroupArn=arn).get("TargetHealthDescriptions") or [])


def _zone_pager(client: Any, token: Any) -> Page:
    answer = client.list_hosted_zones(**({"Marker": token} if token else {}))
    return Page(answer.get("HostedZones") or [], answer.get("NextMarker") if answer.get("IsTruncated") else None)


def _record_pager(zone_id: str) -> Callable[[Any, Any], Page]:
    """Route 53 pages record sets by the next name, type and set identifier."""

    def fetch(client: Any, token: Any) -> Page:
        kwargs: dict[str, Any] = {"HostedZoneId": zone_id, "MaxItems": "300"}
        if token:
            names = ("StartRecordName", "StartRecordType", "StartRecordIdentifier")
            kwargs.update({k: v for k, v in zip(names, token, strict=True) if v})
        answer = client.list_resource_record_sets(**kwargs)
        more = answer.get("IsTruncated")
        nxt = None
        if more:
            nxt = (answer.get("NextRecordName"), answer.get("NextRecordType"), answer.get("NextRecordIdentifier"))
        return Page(answer.get("ResourceRecordSets") or [], nxt)

    return fetch


def _bucket_location(client: Any, bucket: str) -> str:
    # The API answers no constraint for us-east-1 and the legacy "EU" for eu-west-1.
    constraint = client.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    return "eu-west-1" if constraint == "EU" else str(constraint)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, Mapping) else ""


def _policy_public(client: Any, bucket: str) -> str:
    """``yes``/``no`` from the policy status; ``unknown`` when the caller may not read it (the listing still stands)."""
    try:
        status = client.get_bucket_policy_status(Bucket=bucket).get("PolicyStatus") or {}
    except Exception as exc:
        code = _error_code(exc)
        if code == "NoSuchBucketPolicy":
            return "no"
        if code in _PERMISSION:
            return "unknown"
        raise
    return "yes" if status.get("IsPublic") else "no"


def _acl_public(client: Any, bucket: str) -> str:
    try:
        grants = client.get_bucket_acl(Bucket=bucket).get("Grants") or []
    except Exception as exc:
        if _error_code(exc) in _PERMISSION:
            return "unknown"
        raise
    return "public" if mapping.acl_is_public(grants) else "private"


def _events_pager(value: str, query: ChangeQuery, limit: int) -> Callable[[Any, Any], Page]:
    def fetch(client: Any, token: Any) -> Page:
        kwargs: dict[str, Any] = {
            "LookupAttributes": [{"AttributeKey": "ResourceName", "AttributeValue": value}],
            "MaxResults": min(50, limit),
        }
        if query.since:
            kwargs["StartTime"] = datetime.fromtimestamp(query.since, UTC)
        if query.until:
            kwargs["EndTime"] = datetime.fromtimestamp(query.until, UTC)
        if token:
            kwargs["NextToken"] = token
        answer = client.lookup_events(**kwargs)
        return Page(answer.get("Events") or [], answer.get("NextToken") or None)

    return fetch


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, int | float) else 0.0


def _retry_after(response: Mapping[str, Any]) -> float | None:
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    try:
        return float(headers["retry-after"])
    except (KeyError, TypeError, ValueError):
        return None
