"""Tencent Cloud CVM through the official ``tencentcloud-sdk-python-cvm`` SDK.

``DescribeInstances`` takes ``Filters`` (``private-ip-address``,
``public-ip-address``, ``instance-state``…); filters of one request are ANDed,
so an address lookup is two requests per region. Pages are walked with
``Offset``/``Limit`` against ``TotalCount``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from botgateway.config import CloudAccount
from tools.providers.base import ServerQuery
from tools.providers.cloud import CloudProvider, NoCredentials, Page
from tools.providers.sdk import as_tuple, first, short_reason, split_endpoint, tag_filter
from tools.providers.tencent.credentials import NO_CREDENTIALS, sdk_credential
from tools.server_record import Server

__all__ = ["SDK_MODULES", "TencentProvider"]

SDK_MODULES = ("tencentcloud.cvm", "tencentcloud.common")


_STATUS = {
    "running": "running", "stopped": "stopped", "starting": "starting", "stopping": "stopping",
    "pending": "pending", "rebooting": "rebooting", "shutdown": "stopped", "terminating": "terminated",
    "launch_failed": "failed",
}
_API_STATUS = {
    "running": "RUNNING", "stopped": "STOPPED", "starting": "STARTING", "stopping": "STOPPING",
    "pending": "PENDING", "rebooting": "REBOOTING", "terminated": "TERMINATING",
}


class TencentProvider(CloudProvider):
    """Every configured Tencent Cloud account × region."""

    name = "tencent"
    extra = "tencent"
    example_region = "ap-guangzhou"
    id_pattern = re.compile(r"ins-[a-z0-9]{6,20}")
    api = "DescribeInstances (CVM)"

    def make_client(self, account: CloudAccount, region: str) -> Any:
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile
        from tencentcloud.cvm.v20170312 import cvm_client

        scheme, host = split_endpoint(account.endpoint)
        cred = sdk_credential(account)
        if cred is None:
            raise NoCredentials(NO_CREDENTIALS)
        http = HttpProfile(
            protocol=scheme or "https",
            endpoint=host or "cvm.tencentcloudapi.com",
            reqTimeout=max(1, round(self.timeout_s)),
        )
        return cvm_client.CvmClient(cred, region, ClientProfile(httpProfile=http))

    def requests_for(self, query: ServerQuery) -> list[Mapping[str, Any]]:
        if query.kind == "ip":
            return [
                {"Filters": [{"Name": "private-ip-address", "Values": [query.value]}]},
                {"Filters": [{"Name": "public-ip-address", "Values": [query.value]}]},
            ]
        if query.kind == "id":
            return [{"InstanceIds": [query.value]}]
        filters = []
        if query.status in _API_STATUS:
            filters.append({"Name": "instance-state", "Values": [_API_STATUS[query.status]]})
        if query.tag:
            filters.append(tag_filter(query.tag))
        return [{"Filters": filters} if filters else {}]

    def fetch_page(self, client: Any, region: str, request: Mapping[str, Any], token: Any) -> Page:
        from tencentcloud.cvm.v20170312 import models

        offset = int(token or 0)
        body = dict(request)
        if "InstanceIds" not in body:  # one id answers in one page
            body.update(Offset=offset, Limit=self.page_size)
        req = models.DescribeInstancesRequest()
        req.from_json_string(json.dumps(body))
        answer = json.loads(client.DescribeInstances(req).to_json_string())
        items = answer.get("InstanceSet") or []
        total = int(answer.get("TotalCount") or 0)
        more = "InstanceIds" not in body and items and offset + len(items) < total
        return Page(items=items, next_token=offset + len(items) if more else None)

    def to_server(self, item: Mapping[str, Any], account: str, region: str) -> Server:
        placement = item.get("Placement") or {}
        vpc = item.get("VirtualPrivateCloud") or {}
        state = str(item.get("InstanceState") or "unknown").lower()
        memory = item.get("Memory")
        return Server(
            provider=self.name,
            account=account,
            region=region,
            zone=placement.get("Zone") or "",
            instance_id=item.get("InstanceId") or "",
            name=item.get("InstanceName") or "",
            status=_STATUS.get(state, state),
            instance_type=item.get("InstanceType") or "",
            cpu=item.get("CPU"),
            memory_gb=float(memory) if isinstance(memory, (int, float)) else None,
            os=first(item.get("OsName")) or "",
            private_ips=as_tuple(item.get("PrivateIpAddresses")),
            public_ips=as_tuple(item.get("PublicIpAddresses")),
            vpc=vpc.get("VpcId") or "",
            tags={t.get("Key", ""): t.get("Value", "") for t in item.get("Tags") or []},
            security_groups=as_tuple(item.get("SecurityGroupIds") or []),
            created_at=item.get("CreatedTime") or "",
            expires_at=item.get("ExpiredTime") or "",
        )

    def classify(self, exc: Exception) -> str:
        """A short reason for a CVM SDK error (``TencentCloudSDKException`` codes such as ``AuthFailure.*``)."""
        code = ""
        message = ""
        if hasattr(exc, "get_code") and hasattr(exc, "get_message"):  # the SDK's exception has both
            code = str(exc.get_code() or "")
            message = str(exc.get_message() or "")
        if code in ("AuthFailure.UnauthorizedOperation", "UnauthorizedOperation") or code.startswith("UnauthorizedOperation"):
            return "permission denied"
        if code.startswith("AuthFailure"):
            return "invalid credentials (check the secret id/key)"
        if code.startswith("RequestLimitExceeded"):
            return "throttled by the API, try again shortly"
        if code in ("InvalidRegion", "UnsupportedRegion") or code.startswith("InvalidParameterValue.Region"):
            return "unknown region"
        if code == "ClientNetworkError" or "Connection" in type(exc).__name__:
            return "API endpoint unreachable"
        return short_reason(code or type(exc).__name__, message if not code else "")
