"""Tencent Cloud Monitor as a metric source: ``GetMonitorData`` (monitor 2018-07-24) for standard metrics.

The monitor SDK package is optional: the call goes through the common SDK's
``CommonClient.call_json``, signed (TC3) as the product SDK would. The Tencent
estate source's plumbing gives keys, endpoint overrides, budgets, throttle
retries and error mapping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from botgateway.config import CloudAccount
from tools.estate.resource import Resource
from tools.estate.sdk_source import Product
from tools.estate.source import SourceError, Target
from tools.metrics.cloud import catalog_of, dimension_value, series_labels
from tools.metrics.series import Series
from tools.providers.sdk import split_endpoint
from tools.providers.tencent import credentials
from tools.providers.tencent.estate import TencentEstate

__all__ = ["TencentMonitorSource"]

_PERIODS = (60, 300, 3600, 86400)
"""Periods ``GetMonitorData`` accepts (10 s too, for a few metrics only)."""


class TencentMonitorSource(TencentEstate):
    """Cloud Monitor metrics of Tencent Cloud resources, per configured account and region."""

    products: ClassVar[Mapping[str, Product]] = {
        **TencentEstate.products,
        # GetMonitorData is documented at 20 requests per second.
        "monitor": Product("monitor", "Cloud Monitor", ("tencentcloud.common",), qps=20),
    }
    kind_products: ClassVar[Mapping[str, str]] = {}
    metric_api: ClassVar[str] = "monitor:GetMonitorData"
    """The API read, as provenance names it."""

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A common TC3 client for the monitor API; the estate's clients for its own products."""
        if product != "monitor":
            return super().make_client(product, account, region)
        from tencentcloud.common.common_client import CommonClient
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile

        cred = credentials.sdk_credential(account)
        if cred is None:
            raise SourceError("credentials", self.credentials_fix())
        scheme, host = split_endpoint(self.endpoint(account, product))
        http = HttpProfile(protocol=scheme or "https", endpoint=host or "monitor.tencentcloudapi.com",
                           reqTimeout=max(1, round(self.timeout_s)))
        return CommonClient("monitor", "2018-07-24", cred, region, ClientProfile(httpProfile=http))

    async def series(self, resource: Resource, metric: str, start: float, end: float, step_s: int) -> list[Series]:
        """One series of ``metric`` for ``resource``; raises :class:`SourceError`."""
        spec = catalog_of(resource).get(metric)
        if spec is None:
            raise SourceError("not_found", f"no {metric} metric for a Tencent Cloud {resource.kind}")
        period = next((p for p in _PERIODS if p >= step_s), _PERIODS[-1])
        body = {
            "Namespace": spec.namespace, "MetricName": spec.metric, "Period": period,
            "StartTime": _iso(start), "EndTime": _iso(end),
            "Instances": [{"Dimensions": [{"Name": spec.dimension, "Value": dimension_value(resource, spec)}]}],
        }

        def fetch(client: Any) -> list[tuple[float, float]]:
            try:
                answer = client.call_json("GetMonitorData", body)
            except Exception as exc:  # SDK errors of every shape: mapped without their message
                raise self.classify(exc, "monitor") from None
            points: list[tuple[float, float]] = []
            for data in (answer.get("Response") or {}).get("DataPoints") or []:
                pairs = zip(data.get("Timestamps") or [], data.get("Values") or [], strict=False)
                points.extend((float(t), float(v)) for t, v in pairs if v is not None and math.isfinite(v))
            return sorted(points)

        target = Target(self.name, resource.account, resource.region)
        points = await self.call(target, "monitor", self.metric_api, fetch)
        return [Series(series_labels(resource, metric, spec), tuple(points), spec.unit)]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
