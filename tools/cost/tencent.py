"""Tencent Cloud billing: ``DescribeBillSummaryByProduct`` (billing 2018-07-09) for one month, by product.

The billing SDK package is not a dependency: the call goes through the common
SDK's generic ``CommonClient.call_json`` (TC3 signature, the same request the
typed client sends). The API takes one calendar month; its amounts carry no
currency, and the China site bills in CNY, which is what the report says.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from botgateway.config import CloudAccount
from tools.cost.records import CostLine, CostReport, Period
from tools.estate.sdk_source import Product
from tools.estate.source import Listing, SourceError, Target
from tools.providers.sdk import split_endpoint
from tools.providers.tencent import credentials
from tools.providers.tencent.estate import TencentEstate

__all__ = ["TencentCost"]

_API = "DescribeBillSummaryByProduct"
_VERSION = "2018-07-09"
_ENDPOINT = "billing.tencentcloudapi.com"
_HOME = "ap-guangzhou"
_CURRENCY = "CNY"


class TencentCost(TencentEstate):
    """``DescribeBillSummaryByProduct`` for every configured Tencent Cloud account (lists no estate kinds)."""

    products: ClassVar[Mapping[str, Product]] = {
        "billing": Product("billing", "Tencent Cloud Billing", ("tencentcloud.common",), qps=5),
    }
    kind_products: ClassVar[Mapping[str, str]] = {}
    global_kinds: ClassVar[frozenset[str]] = frozenset()
    changes_product: ClassVar[str] = ""
    cost_api = "billing:DescribeBillSummaryByProduct"

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """A billing source lists nothing."""
        raise SourceError("not_found", f"{self.label} billing has no {kind} listing")

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A generic TC3 ``CommonClient`` for billing with the account's credentials and endpoint override."""
        from tencentcloud.common.common_client import CommonClient
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile

        cred = credentials.sdk_credential(account)
        if cred is None:
            raise SourceError("credentials", self.credentials_fix())
        scheme, host = split_endpoint(self.endpoint(account, product))
        timeout = max(1, round(self.timeout_s))
        http = HttpProfile(protocol=scheme or "https", endpoint=host or _ENDPOINT, reqTimeout=timeout)
        return CommonClient("billing", _VERSION, cred, region or _HOME, profile=ClientProfile(httpProfile=http))

    def classify(self, exc: Exception, product: str) -> SourceError:
        """The estate's classification, with a CAM denial naming the billing action."""
        error = super().classify(exc, product)
        if error.kind == "permission":
            return SourceError("permission", f"permission denied: needs billing:{_API} (CAM)")
        return error

    async def report(self, account: str, period: Period, by: str, tag_key: str | None) -> CostReport:
        """The month's summary by product; by account it is this account's one total."""
        if by == "tag":
            raise SourceError("error", "cost by tag is not available from Tencent Cloud's product summary")
        if not period.month:
            raise SourceError("error", "Tencent Cloud bills by calendar month: ask this_month, last_month or YYYY-MM")
        year, month = (int(part) for part in period.month.split("-"))
        body = {
            "BeginTime": f"{period.month}-01 00:00:00",
            "EndTime": f"{period.month}-{calendar.monthrange(year, month)[1]:02d} 23:59:59",
        }
        answer = await self.call(Target(self.name, account, _HOME), "billing", self.cost_api, _summary, body)
        if answer.get("Ready") == 0:
            raise SourceError("error", f"the {period.month} bill is not ready yet")
        lines = [
            CostLine(str(row.get("BusinessCodeName") or row.get("BusinessCode") or "(unnamed)"),
                     float(row.get("RealTotalCost") or 0.0), _CURRENCY)
            for row in answer.get("SummaryOverview") or [] if isinstance(row, Mapping)
        ]
        if by == "account":
            total = sum(line.amount for line in lines)
            lines = [CostLine(account, total, _CURRENCY)] if lines else []
        return CostReport.of(self.name, account, period, by, lines, api=self.cost_api, fetched_at=time.time(),
                             currency=_CURRENCY)


def _summary(client: Any, body: Mapping[str, Any]) -> Mapping[str, Any]:
    """One ``DescribeBillSummaryByProduct`` call (SDK errors are classified by the source)."""
    answer = client.call_json(_API, dict(body))
    response = answer.get("Response") if isinstance(answer, Mapping) else None
    if not isinstance(response, Mapping):
        raise SourceError("error", f"{_API}: unreadable answer")
    return response
