"""Alibaba Cloud ECS through the official ``alibabacloud-ecs20140526`` SDK.

``DescribeInstances`` filters addresses with JSON-array strings
(``PrivateIpAddresses='["10.0.1.100"]'``); the private, public and elastic
address filters are ANDed by the API, so an address lookup is three requests
per region, merged. Pages are walked with ``MaxResults``/``NextToken``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from botgateway.config import CloudAccount
from tools.providers.base import ServerQuery
from tools.providers.cloud import CloudProvider, NoCredentials, Page
from tools.providers.sdk import as_tuple, credential_chain_configured, first, resolve_keys, short_reason, split_endpoint
from tools.server_record import Server

__all__ = ["CHAIN_ENV", "CHAIN_FILES", "SDK_MODULES", "AliyunProvider"]

SDK_MODULES = ("alibabacloud_ecs20140526", "alibabacloud_tea_openapi")

_STATUS = {"running": "running", "stopped": "stopped", "starting": "starting", "stopping": "stopping", "pending": "pending"}
_API_STATUS = {"running": "Running", "stopped": "Stopped", "starting": "Starting", "stopping": "Stopping", "pending": "Pending"}

_PERMISSION = re.compile(r"^(Forbidden|NoPermission|Unauthorized|InvalidOperation\.NotAuthorized)", re.I)
_CREDENTIALS = re.compile(
    r"^(InvalidAccessKeyId|SignatureDoesNotMatch|IncompleteSignature|InvalidSecurityToken|InvalidAccessKeySecret)", re.I
)


class AliyunProvider(CloudProvider):
    """Every configured Alibaba Cloud account × region."""

    name = "aliyun"
    extra = "aliyun"
    example_region = "cn-hangzhou"
    id_pattern = re.compile(r"i-[a-z0-9]{6,30}")
    api = "DescribeInstances"

    def make_client(self, account: CloudAccount, region: str) -> Any:
        from alibabacloud_ecs20140526.client import Client
        from alibabacloud_tea_openapi.models import Config

        scheme, host = split_endpoint(account.endpoint)
        key_id, secret, token = resolve_keys(
            account, "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"
        )
        options: dict[str, Any] = {
            "region_id": region,
            "endpoint": host or f"ecs.{region}.aliyuncs.com",
            "protocol": scheme or "https",
            "connect_timeout": int(min(self.timeout_s, 5) * 1000),
            "read_timeout": int(self.timeout_s * 1000),
        }
        if key_id and secret:
            options.update(access_key_id=key_id, access_key_secret=secret)
            if token:
                options["security_token"] = token
        elif credential_chain_configured(CHAIN_ENV, CHAIN_FILES):
            # The SDK's default chain: credentials file, ECS RAM role, OIDC role.
            from alibabacloud_credentials.client import Client as CredentialClient

            options["credential"] = CredentialClient()
        else:
            raise NoCredentials(
                "no credentials: set access_key_id/access_key_secret, ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET, "
                "or ALIBABA_CLOUD_ECS_METADATA (RAM role name)"
            )
        return Client(Config(**options))

    def requests_for(self, query: ServerQuery) -> list[Mapping[str, Any]]:
        status = {"status": _API_STATUS[query.status]} if query.status in _API_STATUS else {}
        if query.kind == "ip":
            value = json.dumps([query.value])
            return [
                {"private_ip_addresses": value},
                {"public_ip_addresses": value},
                {"eip_addresses": value},
            ]
        if query.kind == "id":
            return [{"instance_ids": json.dumps([query.value])}]
        # Names are matched here, not with the API's case-sensitive InstanceName wildcard,
        # so "KAFKA" finds "prod-kafka-01" on every provider alike.
        return [dict(status)]

    def fetch_page(self, client: Any, region: str, request: Mapping[str, Any], token: Any) -> Page:
        from alibabacloud_ecs20140526 import models

        response = client.describe_instances(
            models.DescribeInstancesRequest(region_id=region, max_results=self.page_size, next_token=token, **request)
        )
        body = response.body.to_map() if response.body is not None else {}
        items = (body.get("Instances") or {}).get("Instance") or []
        return Page(items=items, next_token=body.get("NextToken") or None)

    def to_server(self, item: Mapping[str, Any], account: str, region: str) -> Server:
        vpc = item.get("VpcAttributes") or {}
        private = ((vpc.get("PrivateIpAddress") or {}).get("IpAddress") or []) + (
            (item.get("InnerIpAddress") or {}).get("IpAddress") or []
        )
        eip = (item.get("EipAddress") or {}).get("IpAddress")
        public = ((item.get("PublicIpAddress") or {}).get("IpAddress") or []) + ([eip] if eip else [])
        tags = {t.get("TagKey", ""): t.get("TagValue", "") for t in (item.get("Tags") or {}).get("Tag") or []}
        memory = item.get("Memory")
        expires = item.get("ExpiredTime") or ""
        if expires.startswith("2099"):  # pay-as-you-go instances "expire" in 2099
            expires = ""
        status = str(item.get("Status") or "unknown")
        return Server(
            provider=self.name,
            account=account,
            region=item.get("RegionId") or region,
            zone=item.get("ZoneId") or "",
            instance_id=item.get("InstanceId") or "",
            name=item.get("InstanceName") or item.get("HostName") or "",
            status=_STATUS.get(status.lower(), status.lower()),
            instance_type=item.get("InstanceType") or "",
            cpu=item.get("Cpu"),
            memory_gb=round(memory / 1024, 2) if isinstance(memory, (int, float)) else None,
            os=first(item.get("OSName"), item.get("OSNameEn"), item.get("OSType")) or "",
            private_ips=as_tuple(private),
            public_ips=as_tuple(public),
            vpc=vpc.get("VpcId") or "",
            tags=tags,
            security_groups=as_tuple((item.get("SecurityGroupIds") or {}).get("SecurityGroupId") or []),
            created_at=item.get("CreationTime") or "",
            expires_at=expires,
        )

    def classify(self, exc: Exception) -> str:
        """A short reason for an ECS SDK error (``TeaException`` codes such as ``Forbidden.RAM``)."""
        code = str(getattr(exc, "code", "") or "")
        message = str(getattr(exc, "message", "") or "")
        if _PERMISSION.match(code):
            return "permission denied"
        if _CREDENTIALS.match(code):
            return "invalid credentials (check the access key)"
        if code.startswith("Throttling"):
            return "throttled by the API, try again shortly"
        if code.startswith("InvalidRegionId"):
            return "unknown region"
        name = type(exc).__name__
        if "Credential" in name or "credential" in message.lower():
            return "no credentials: set access_key_id/access_key_secret or ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET"
        if "Connection" in name or "Timeout" in name or "connect" in message.lower():
            return "API endpoint unreachable"
        # The SDK's message repeats the code and status; the code says it shortest.
        return short_reason(code or name, "" if code else message)


CHAIN_ENV = (
    "ALIBABA_CLOUD_ECS_METADATA", "ALIBABA_CLOUD_ROLE_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
    "ALIBABA_CLOUD_CREDENTIALS_FILE", "ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_CREDENTIALS_URI",
)
"""Environment variables that give the SDK's default credential chain something to find."""

CHAIN_FILES = ((".alibabacloud", "credentials.ini"), (".alibabacloud", "credentials"), (".aliyun", "config.json"))
"""Credential files (under ``~``) the chain reads."""
