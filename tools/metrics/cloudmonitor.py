"""Alibaba Cloud CloudMonitor as a metric source: ``DescribeMetricList`` (CMS 2019-01-01) for standard metrics.

The CMS SDK package (``alibabacloud_cms20190101``) is optional: the call goes
through ``tea_openapi``'s generic ``call_api``, which signs it (ACS3) exactly
as the product SDK would. The Alibaba estate source's plumbing gives keys,
endpoint overrides, budgets, throttle retries and error mapping.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from botgateway.config import CloudAccount
from tools.estate.resource import Resource
from tools.estate.sdk_source import Product
from tools.estate.source import SourceError, Target
from tools.metrics.cloud import catalog_of, dimension_value, series_labels
from tools.metrics.series import Series
from tools.providers.aliyun.estate import AliyunEstate, failure
from tools.providers.aliyun.servers import CHAIN_ENV, CHAIN_FILES
from tools.providers.sdk import credential_chain_configured, resolve_keys, split_endpoint

__all__ = ["CloudMonitorSource"]

_VERSION = "2019-01-01"
_PAGE = 1440
"""Datapoints asked per page (the API allows up to 1440)."""
_MAX_PAGES = 5


class CloudMonitorSource(AliyunEstate):
    """CloudMonitor metrics of Alibaba Cloud resources, per configured account and region."""

    products: ClassVar[Mapping[str, Product]] = {
        **AliyunEstate.products,
        # DescribeMetricList: the documented per-account limit is far above this; stay modest.
        "cms": Product("cms", "CloudMonitor", ("alibabacloud_tea_openapi",), qps=20, burst=20),
    }
    kind_products: ClassVar[Mapping[str, str]] = {}
    metric_api: ClassVar[str] = "cms:DescribeMetricList"
    """The API read, as provenance names it."""

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A generic ``tea_openapi`` client for CMS; the estate's clients for its own products."""
        if product != "cms":
            return super().make_client(product, account, region)
        from alibabacloud_tea_openapi.client import Client
        from alibabacloud_tea_openapi.models import Config

        region = region or (account.regions[0] if account.regions else "cn-hangzhou")
        scheme, host = split_endpoint(self.endpoint(account, product))
        key_id, secret, token = resolve_keys(
            account, "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"
        )
        options: dict[str, Any] = {
            "region_id": region, "endpoint": host or f"metrics.{region}.aliyuncs.com", "protocol": scheme or "https",
            "connect_timeout": int(min(self.timeout_s, 5) * 1000), "read_timeout": int(self.timeout_s * 1000),
        }
        if key_id and secret:
            options.update(access_key_id=key_id, access_key_secret=secret, security_token=token or None)
        elif credential_chain_configured(CHAIN_ENV, CHAIN_FILES):
            from alibabacloud_credentials.client import Client as CredentialClient

            options["credential"] = CredentialClient()
        else:
            raise SourceError("credentials", f"no credentials: {self.credentials_fix()}")
        return Client(Config(**options))

    async def series(self, resource: Resource, metric: str, start: float, end: float, step_s: int) -> list[Series]:
        """One series of ``metric`` for ``resource``; raises :class:`SourceError`."""
        spec = catalog_of(resource).get(metric)
        if spec is None:
            raise SourceError("not_found", f"no {metric} metric for an Alibaba Cloud {resource.kind}")
        query = {
            "Namespace": spec.namespace, "MetricName": spec.metric, "Period": str(max(60, math.ceil(step_s / 60) * 60)),
            "StartTime": str(int(start * 1000)), "EndTime": str(int(end * 1000)), "Length": str(_PAGE),
            "Dimensions": json.dumps([{spec.dimension: dimension_value(resource, spec)}]),
            "RegionId": resource.region,
        }
        field = spec.statistic

        def fetch(client: Any) -> list[tuple[float, float]]:
            points: list[tuple[float, float]] = []
            token = ""
            for _ in range(_MAX_PAGES):
                body = _call(client, {**query, **({"NextToken": token} if token else {})})
                for point in json.loads(body.get("Datapoints") or "[]"):
                    value = point.get(field)
                    if isinstance(value, (int, float)) and math.isfinite(value):
                        points.append((float(point["timestamp"]) / 1000, float(value)))
                token = str(body.get("NextToken") or "")
                if not token:
                    break
            return sorted(points)

        target = Target(self.name, resource.account, resource.region)
        points = await self.call(target, "cms", self.metric_api, fetch)
        return [Series(series_labels(resource, metric, spec), tuple(points), spec.unit)]


def _call(client: Any, query: Mapping[str, str]) -> Mapping[str, Any]:
    """One signed ``DescribeMetricList`` through the generic call; a failed answer raises :class:`SourceError`."""
    from alibabacloud_tea_openapi import utils_models
    from darabonba.runtime import RuntimeOptions  # type: ignore[import-untyped]

    params = utils_models.Params(
        action="DescribeMetricList", version=_VERSION, protocol="HTTPS", method="POST", auth_type="AK",
        style="RPC", pathname="/", req_body_type="formData", body_type="json",
    )
    try:
        answer = client.call_api(params, utils_models.OpenApiRequest(query=dict(query)), RuntimeOptions())
    except Exception as exc:  # SDK errors of every shape: mapped without their message
        raise failure(exc, "CloudMonitor", "cms", "DescribeMetricList") from None
    body = answer.get("body") or {}
    code = str(body.get("Code") or "200")
    if body.get("Success") is False or code != "200":
        raise SourceError("error", f"cms:DescribeMetricList answered {code}")
    return body
