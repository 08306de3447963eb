"""AWS EC2 through ``boto3``.

``describe_instances`` filters are ANDed, so an address lookup is three
requests per region (``private-ip-address``, ``ip-address`` and
``network-interface.addresses.private-ip-address`` for secondary addresses).
Memory is not part of an instance record; it comes from
``describe_instance_types``, cached per region for the provider's lifetime.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from botgateway.config import CloudAccount
from tools.providers.base import ServerQuery
from tools.providers.cloud import CloudProvider, Page
from tools.providers.sdk import as_tuple, short_reason, tag_filter
from tools.server_record import Server

__all__ = ["SDK_MODULES", "AwsProvider"]

SDK_MODULES = ("boto3",)


_STATUS = {
    "running": "running", "stopped": "stopped", "stopping": "stopping", "pending": "pending",
    "shutting-down": "stopping", "terminated": "terminated",
}
_API_STATUS = {"running": "running", "stopped": "stopped", "stopping": "stopping", "pending": "pending", "terminated": "terminated"}

_PERMISSION = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "OptInRequired"}
_CREDENTIALS = {"AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken"}


class _RegionClient:
    """An EC2 client and the instance-type memory sizes seen in its region."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.memory_gb: dict[str, float | None] = {}
        self.lock = threading.Lock()


class AwsProvider(CloudProvider):
    """Every configured AWS account × region."""

    name = "aws"
    extra = "aws"
    example_region = "us-east-1"
    page_size = 200
    id_pattern = re.compile(r"i-[0-9a-f]{8,17}")
    api = "ec2:DescribeInstances"

    def make_client(self, account: CloudAccount, region: str) -> Any:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(
            aws_access_key_id=account.access_key_id.get_secret_value() or None,
            aws_secret_access_key=account.access_key_secret.get_secret_value() or None,
            region_name=region,
        )
        config = Config(
            connect_timeout=min(self.timeout_s, 5),
            read_timeout=self.timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        return _RegionClient(session.client("ec2", endpoint_url=account.endpoint or None, config=config))

    def requests_for(self, query: ServerQuery) -> list[Mapping[str, Any]]:
        if query.kind == "ip":
            return [
                {"Filters": [{"Name": name, "Values": [query.value]}]}
                for name in ("private-ip-address", "ip-address", "network-interface.addresses.private-ip-address")
            ]
        if query.kind == "id":
            return [{"InstanceIds": [query.value]}]
        filters = []
        if query.status in _API_STATUS:
            filters.append({"Name": "instance-state-name", "Values": [_API_STATUS[query.status]]})
        if query.tag:
            filters.append(tag_filter(query.tag))
        return [{"Filters": filters} if filters else {}]

    def fetch_page(self, client: Any, region: str, request: Mapping[str, Any], token: Any) -> Page:
        rc: _RegionClient = client
        kwargs: dict[str, Any] = dict(request)
        if "InstanceIds" not in kwargs:  # InstanceIds and MaxResults do not mix
            kwargs["MaxResults"] = self.page_size
        if token:
            kwargs["NextToken"] = token
        answer = rc.client.describe_instances(**kwargs)
        items = [i for r in answer.get("Reservations") or [] for i in r.get("Instances") or []]
        self._learn_memory(rc, {i.get("InstanceType") for i in items if i.get("InstanceType")})
        items = [{**i, "_MemoryGiB": rc.memory_gb.get(i.get("InstanceType", ""))} for i in items]
        return Page(items=items, next_token=answer.get("NextToken") or None)

    def _learn_memory(self, rc: _RegionClient, types: set[str]) -> None:
        with rc.lock:
            unknown = sorted(t for t in types if t not in rc.memory_gb)
            if not unknown:
                return
            try:
                answer = rc.client.describe_instance_types(InstanceTypes=unknown)
            except Exception:  # memory is a nicety; the lookup must not fail for it
                rc.memory_gb.update({t: None for t in unknown})
                return
            for info in answer.get("InstanceTypes") or []:
                mib = (info.get("MemoryInfo") or {}).get("SizeInMiB")
                rc.memory_gb[info.get("InstanceType", "")] = round(mib / 1024, 2) if mib else None

    def to_server(self, item: Mapping[str, Any], account: str, region: str) -> Server:
        tags = {t.get("Key", ""): t.get("Value", "") for t in item.get("Tags") or []}
        interfaces = item.get("NetworkInterfaces") or []
        private = [item.get("PrivateIpAddress")] + [
            a.get("PrivateIpAddress") for n in interfaces for a in n.get("PrivateIpAddresses") or []
        ]
        public = [item.get("PublicIpAddress")] + [
            (a.get("Association") or {}).get("PublicIp") for n in interfaces for a in n.get("PrivateIpAddresses") or []
        ]
        cpu_options = item.get("CpuOptions") or {}
        cpu = None
        if cpu_options.get("CoreCount"):
            cpu = int(cpu_options["CoreCount"]) * int(cpu_options.get("ThreadsPerCore") or 1)
        state = str((item.get("State") or {}).get("Name") or "unknown")
        launched = item.get("LaunchTime")
        placement = item.get("Placement") or {}
        return Server(
            provider=self.name,
            account=account,
            region=region,
            zone=placement.get("AvailabilityZone") or "",
            instance_id=item.get("InstanceId") or "",
            name=tags.get("Name", ""),
            status=_STATUS.get(state, state),
            instance_type=item.get("InstanceType") or "",
            cpu=cpu,
            memory_gb=item.get("_MemoryGiB"),
            os=item.get("PlatformDetails") or item.get("Platform") or "",
            private_ips=as_tuple(private),
            public_ips=as_tuple(public),
            vpc=item.get("VpcId") or "",
            tags=tags,
            security_groups=as_tuple(g.get("GroupId") for g in item.get("SecurityGroups") or []),
            created_at=launched.isoformat() if isinstance(launched, datetime) else str(launched or ""),
        )

    def classify(self, exc: Exception) -> str:
        name = type(exc).__name__
        if name == "ClientError":
            error = getattr(exc, "response", {}).get("Error", {})
            code = str(error.get("Code") or "")
            if code in _PERMISSION:
                return "permission denied"
            if code in _CREDENTIALS:
                return "invalid credentials (check the access key)"
            if code in ("RequestLimitExceeded", "Throttling", "ThrottlingException"):
                return "throttled by the API, try again shortly"
            return short_reason(code)
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return "no credentials: set access_key_id/access_key_secret or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
            return "API endpoint unreachable"
        if name == "ReadTimeoutError":
            return f"timed out after {self.timeout_s:g} s"
        return short_reason(name)
