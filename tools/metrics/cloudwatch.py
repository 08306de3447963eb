"""AWS CloudWatch as a metric source: ``GetMetricData`` for an instance's standard metrics, through ``boto3``.

It rides on the AWS estate source's plumbing (the account's keys and endpoint
override, per-API budgets, throttle retries, error mapping), adding only the
CloudWatch product; it lists no kinds itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from tools.estate.resource import Resource
from tools.estate.sdk_source import Product
from tools.estate.source import SourceError, Target
from tools.metrics.cloud import catalog_of, dimension_value, series_labels
from tools.metrics.series import Series
from tools.providers.aws.estate import AwsEstate

__all__ = ["CloudWatchSource"]

_MAX_PAGES = 5
"""``GetMetricData`` pages read per series at most (each holds up to 100,800 points: one is the rule)."""


class CloudWatchSource(AwsEstate):
    """CloudWatch metrics of AWS resources, per configured account and region."""

    products: ClassVar[Mapping[str, Product]] = {
        **AwsEstate.products,
        # GetMetricData is documented at 50 TPS per account and region.
        "cloudwatch": Product("cloudwatch", "Amazon CloudWatch", ("boto3",), qps=50),
    }
    kind_products: ClassVar[Mapping[str, str]] = {}
    metric_api: ClassVar[str] = "cloudwatch:GetMetricData"
    """The API read, as provenance names it."""

    async def series(self, resource: Resource, metric: str, start: float, end: float, step_s: int) -> list[Series]:
        """One series of ``metric`` for ``resource``; raises :class:`SourceError`."""
        spec = catalog_of(resource).get(metric)
        if spec is None:
            raise SourceError("not_found", f"no {metric} metric for an AWS {resource.kind}")
        query = {
            "Id": "m0",
            "MetricStat": {
                "Metric": {
                    "Namespace": spec.namespace,
                    "MetricName": spec.metric,
                    "Dimensions": [{"Name": spec.dimension, "Value": dimension_value(resource, spec)}],
                },
                "Period": max(60, step_s - step_s % 60),
                "Stat": spec.statistic,
            },
            "ReturnData": True,
        }

        def fetch(client: Any) -> list[tuple[float, float]]:
            points: list[tuple[float, float]] = []
            token: str | None = None
            for _ in range(_MAX_PAGES):
                extra = {"NextToken": token} if token else {}
                answer = client.get_metric_data(
                    MetricDataQueries=[query], StartTime=datetime.fromtimestamp(start, UTC),
                    EndTime=datetime.fromtimestamp(end, UTC), ScanBy="TimestampAscending", **extra,
                )
                for result in answer.get("MetricDataResults") or []:
                    points.extend((t.timestamp(), float(v)) for t, v in zip(result["Timestamps"], result["Values"],
                                                                             strict=False))
                token = answer.get("NextToken")
                if not token:
                    break
            return sorted(points)

        target = Target(self.name, resource.account, resource.region)
        points = await self.call(target, "cloudwatch", self.metric_api, fetch)
        return [Series(series_labels(resource, metric, spec), tuple(points), spec.unit)]
