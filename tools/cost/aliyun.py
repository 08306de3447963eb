"""Alibaba Cloud billing: BSS OpenAPI ``QueryBillOverview`` for one billing cycle, by product.

The BSS SDK (``alibabacloud_bssopenapi20171214``) is not a dependency: the call
goes through ``alibabacloud_tea_openapi``'s generic ``call_api`` with exactly
the parameters that SDK sends (RPC style, version 2017-12-14, ACS3 signature),
so the answer and the errors are the same. The bill is monthly: a period must
lie within one calendar month. Each item states its currency (CNY on the China
site, USD on the international one); a product's subscription and
pay-as-you-go rows are one line.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from botgateway.config import CloudAccount
from tools.cost.records import CostLine, CostReport, Period
from tools.estate.sdk_source import Product
from tools.estate.source import Listing, SourceError, Target
from tools.providers.aliyun.estate import AliyunEstate, failure
from tools.providers.aliyun.servers import CHAIN_ENV, CHAIN_FILES
from tools.providers.sdk import credential_chain_configured, resolve_keys, split_endpoint

__all__ = ["AliyunCost"]

_API = "QueryBillOverview"
_VERSION = "2017-12-14"
_ENDPOINT = "business.aliyuncs.com"
_HOME = "cn-hangzhou"


class AliyunCost(AliyunEstate):
    """``QueryBillOverview`` for every configured Alibaba Cloud account (lists no estate kinds)."""

    products: ClassVar[Mapping[str, Product]] = {
        "bss": Product("bss", "BSS OpenAPI (billing)", ("alibabacloud_tea_openapi",), qps=10, burst=10),
    }
    kind_products: ClassVar[Mapping[str, str]] = {}
    global_kinds: ClassVar[frozenset[str]] = frozenset()
    changes_product: ClassVar[str] = ""
    cost_api = "bss:QueryBillOverview"

    async def list_kind(self, target: Target, kind: str) -> Listing:
        """A billing source lists nothing."""
        raise SourceError("not_found", f"{self.label} billing has no {kind} listing")

    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """A generic ``tea_openapi`` client for BSS with the account's keys (or the SDK's chain) and endpoint."""
        from alibabacloud_tea_openapi.client import Client
        from alibabacloud_tea_openapi.models import Config

        scheme, host = split_endpoint(self.endpoint(account, product))
        options: dict[str, Any] = {
            "region_id": region or _HOME, "endpoint": host or _ENDPOINT, "protocol": scheme or "https",
            "connect_timeout": int(min(self.timeout_s, 5) * 1000), "read_timeout": int(self.timeout_s * 1000),
        }
        key_id, secret, token = resolve_keys(
            account, "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"
        )
        if key_id and secret:
            options.update(access_key_id=key_id, access_key_secret=secret)
            if token:
                options["security_token"] = token
        elif credential_chain_configured(CHAIN_ENV, CHAIN_FILES):
            from alibabacloud_credentials.client import Client as CredentialClient

            options["credential"] = CredentialClient()
        else:
            raise SourceError("credentials", f"no credentials: {self.credentials_fix()}")
        return Client(Config(**options))

    def classify(self, exc: Exception, product: str) -> SourceError:
        """A short reason; a RAM denial names ``bss:QueryBillOverview``."""
        return failure(exc, self.products[product].label, product, _API)

    async def report(self, account: str, period: Period, by: str, tag_key: str | None) -> CostReport:
        """The billing cycle's overview by product; by account it is this account's one total."""
        if by == "tag":
            raise SourceError("error", "cost by tag is not available from Alibaba Cloud's bill overview")
        if not period.month:
            raise SourceError("error", "Alibaba Cloud bills by calendar month: ask this_month, last_month or YYYY-MM")
        body = await self.call(Target(self.name, account, _HOME), "bss", _API, _overview, period.month)
        items = ((body.get("Data") or {}).get("Items") or {}).get("Item") or []
        lines = [
            CostLine(_product_name(item), float(item.get("PretaxAmount") or 0.0), str(item.get("Currency") or "CNY"))
            for item in items if isinstance(item, Mapping)
        ]
        report = CostReport.of(self.name, account, period, "service", lines, api=self.cost_api, fetched_at=time.time())
        if by == "account":
            lines = [CostLine(account, report.total, report.currency)] if report.lines else []
            report = CostReport.of(self.name, account, period, by, lines, api=self.cost_api,
                                   fetched_at=report.fetched_at, currency=report.currency)
        return report


def _overview(client: Any, month: str) -> Mapping[str, Any]:
    """One ``QueryBillOverview`` call as the BSS SDK makes it (SDK errors are classified by the source)."""
    from alibabacloud_tea_openapi import utils_models
    from alibabacloud_tea_openapi.utils import Utils
    from darabonba.runtime import RuntimeOptions  # type: ignore[import-untyped]

    params = utils_models.Params(
        action=_API, version=_VERSION, protocol="HTTPS", pathname="/", method="POST", auth_type="AK", style="RPC",
        req_body_type="formData", body_type="json",
    )
    request = utils_models.OpenApiRequest(query=Utils.query({"BillingCycle": month}))
    answer = client.call_api(params, request, RuntimeOptions())
    body = answer.get("body") if isinstance(answer, Mapping) else None
    if not isinstance(body, Mapping):
        raise SourceError("error", f"{_API}: unreadable answer")
    if body.get("Success") is False:
        raise SourceError("error", f"{_API}: {body.get('Code') or 'failed'}")
    return body


def _product_name(item: Mapping[str, Any]) -> str:
    return str(item.get("ProductName") or item.get("ProductCode") or item.get("PipCode") or "(unnamed)")
