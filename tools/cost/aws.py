"""AWS billing: Cost Explorer ``GetCostAndUsage`` per account, grouped by service, linked account or a tag.

Cost Explorer lives in ``us-east-1`` whatever regions the account searches;
its client is built like the estate's (:class:`~tools.providers.aws.estate.AwsEstate`:
the account's keys, its endpoint override, one attempt with our own throttle
retries). AWS documents 5 requests per second; each call is billed, so a
report is one call per page and nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from tools.cost.records import CostLine, CostReport, Period
from tools.estate.sdk_source import Page, Product
from tools.estate.source import Listing, SourceError, Target
from tools.providers.aws.estate import AwsEstate

__all__ = ["AwsCost"]

_METRIC = "UnblendedCost"
_HOME = "us-east-1"
_BOUND = 500
"""Most lines a report reads (a tag with thousands of values is cut, and says so)."""
_DIMENSIONS = {"service": "SERVICE", "account": "LINKED_ACCOUNT"}


class AwsCost(AwsEstate):
    """Cost Explorer for every configured AWS account (lists no estate kinds)."""

    products: ClassVar[Mapping[str, Product]] = {"ce": Product("ce", "AWS Cost Explorer", ("boto3",), qps=5)}
    kind_products: ClassVar[Mapping[str, str]] = {}
    global_kinds: ClassVar[frozenset[str]] = frozenset()
    changes_product: ClassVar[str] = ""
    cost_api = "ce:GetCostAndUsage"

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """A billing source lists nothing."""
        raise SourceError("not_found", f"{self.label} billing has no {kind} listing")

    async def report(self, account: str, period: Period, by: str, tag_key: str | None) -> CostReport:
        """``GetCostAndUsage`` over the period, monthly, grouped as asked; every page up to a bound."""
        if by == "tag" and not tag_key:
            raise SourceError("error", "by=tag needs a tag_key")
        group = {"Type": "TAG", "Key": str(tag_key)} if by == "tag" else {"Type": "DIMENSION", "Key": _DIMENSIONS[by]}
        request = {
            "TimePeriod": {"Start": period.start.isoformat(), "End": period.end.isoformat()},
            "Granularity": "MONTHLY", "Metrics": [_METRIC], "GroupBy": [group],
        }

        def fetch(client: Any, token: Any) -> Page:
            answer = client.get_cost_and_usage(**request, **({"NextPageToken": token} if token else {}))
            return Page(items=_lines(answer, by, tag_key or ""), next_token=answer.get("NextPageToken") or None)

        target = Target(self.name, account, _HOME)
        items, cut = await self.paginate(target, "ce", "GetCostAndUsage", fetch, bound=_BOUND)
        lines = [CostLine(str(i["key"]), float(i["amount"]), str(i["currency"])) for i in items]
        return CostReport.of(self.name, account, period, by, lines, cut=cut, api=self.cost_api, fetched_at=time.time())


def _lines(answer: Mapping[str, Any], by: str, tag_key: str) -> list[dict[str, Any]]:
    """Each group of each month as ``{key, amount, currency}`` (months of one period are merged by the report)."""
    names = {
        str(a.get("Value")): str((a.get("Attributes") or {}).get("description") or "")
        for a in answer.get("DimensionValueAttributes") or []
    }
    out: list[dict[str, Any]] = []
    for result in answer.get("ResultsByTime") or []:
        for group in result.get("Groups") or []:
            keys = group.get("Keys") or [""]
            metric = (group.get("Metrics") or {}).get(_METRIC) or {}
            out.append({
                "key": _key(str(keys[0]), by, tag_key, names),
                "amount": float(metric.get("Amount") or 0.0),
                "currency": str(metric.get("Unit") or "USD"),
            })
    return out


def _key(raw: str, by: str, tag_key: str, names: Mapping[str, str]) -> str:
    """A readable key: ``env$prod`` → ``prod``, an untagged ``env$`` → ``(no env tag)``, an account id with its name."""
    if by == "tag":
        value = raw.split("$", 1)[1] if "$" in raw else raw
        return value or f"(no {tag_key} tag)"
    if by == "account" and names.get(raw):
        return f"{names[raw]} ({raw})"
    return raw or "(unnamed)"
