"""Fake billing APIs on 127.0.0.1: Alibaba BSS ``QueryBillOverview``, Tencent ``DescribeBillSummaryByProduct``, AWS CE.

* :class:`FakeAliyunBilling` is the Alibaba estate fake (ACS3 signature and key checks, RAM denials) with BSS's
  ``QueryBillOverview`` (2017-12-14) added: ``BillingCycle`` must be ``YYYY-MM``; the answer has the real shape
  (``Data.Items.Item[]`` with ``ProductCode``, ``ProductName``, ``SubscriptionType``, ``PretaxAmount``, ``Currency``).
* :class:`FakeTencentBilling` is the Tencent estate fake's transport (TC3 signature checked with the secret key)
  answering billing 2018-07-09 ``DescribeBillSummaryByProduct``: ``BeginTime``/``EndTime`` must be
  ``YYYY-MM-DD HH:MM:SS`` within one month; amounts are strings, as the real API gives them.
* :class:`FakeCostExplorer` answers ``GetCostAndUsage`` (JSON 1.1) after checking the SigV4 credential's key id:
  an account that must never be called points here, and its requests are recorded.
* :func:`seed_moto_costs` queues Cost Explorer answers in moto's server (``/moto-api/static/ce/...``).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.aliyun_estate import AliyunEstateState, FakeAliyunEstate
from tests.fakes.clouds import FakeCloud
from tests.fakes.tencent_estate import ApiError, FakeTencentEstate

__all__ = [
    "FakeAliyunBilling",
    "FakeCostExplorer",
    "FakeTencentBilling",
    "aliyun_item",
    "ce_answer",
    "seed_moto_costs",
    "tencent_row",
]

Record = dict[str, Any]

_CYCLE = re.compile(r"^\d{4}-\d{2}$")
_STAMP = "%Y-%m-%d %H:%M:%S"


def aliyun_item(
    code: str, name: str, amount: float, *, subscription: str = "PayAsYouGo", currency: str = "CNY"
) -> Record:
    """One ``QueryBillOverview`` item as BSS returns it."""
    return {
        "ProductCode": code, "ProductName": name, "PipCode": code, "CommodityCode": code, "ProductType": "",
        "SubscriptionType": subscription, "PretaxAmount": amount, "PretaxGrossAmount": round(amount * 1.1, 2),
        "InvoiceDiscount": 0.0, "DeductedByCoupons": 0.0, "PaymentAmount": amount, "OutstandingAmount": 0.0,
        "Currency": currency, "Item": "PayAsYouGoBill" if subscription == "PayAsYouGo" else "SubscriptionOrder",
        "BizType": code,
    }


class FakeAliyunBilling(FakeAliyunEstate):
    """The Alibaba estate fake plus BSS's bill overview; ``bills`` holds items by billing cycle."""

    def __init__(self, bills: Mapping[str, Sequence[Record]], *, access_key: str = "test-key-id",
                 access_secret: str | None = None, denied_actions: Iterable[str] = ()) -> None:
        super().__init__(AliyunEstateState(), access_key=access_key, access_secret=access_secret,
                         denied_actions=denied_actions)
        self.bills = {cycle: list(items) for cycle, items in bills.items()}
        self.routes[("QueryBillOverview", "2017-12-14")] = self._overview

    def _overview(self, params: dict[str, str]) -> tuple[int, Any]:
        cycle = params.get("BillingCycle", "")
        if not _CYCLE.match(cycle):
            return self._bad("InvalidParameter", "The specified parameter BillingCycle is not valid.")
        data = {
            "BillingCycle": cycle, "AccountID": "1234567890123456", "AccountName": "ops@example.com",
            "Items": {"Item": self.bills.get(cycle, [])},
        }
        return 200, {"Code": "Success", "Message": "Successful!", "Success": True, "Data": data}


def tencent_row(code: str, name: str, amount: float, month: str) -> Record:
    """One ``SummaryOverview`` row as Tencent billing returns it (amounts are strings)."""
    text = f"{amount:.8f}"
    return {
        "BusinessCode": code, "BusinessCodeName": name, "RealTotalCostRatio": "0", "RealTotalCost": text,
        "CashPayAmount": text, "IncentivePayAmount": "0.00000000", "VoucherPayAmount": "0.00000000",
        "TransferPayAmount": "0.00000000", "TotalCost": f"{amount * 1.2:.8f}", "BillMonth": month,
    }


class FakeTencentBilling(FakeTencentEstate):
    """Tencent billing: ``DescribeBillSummaryByProduct`` from ``bills`` (rows by month), signature checked."""

    def __init__(self, bills: Mapping[str, Sequence[Record]], *, secret_id: str = "tc-secret-id",
                 secret_key: str = "tc-secret-key", denied_actions: Iterable[str] = ()) -> None:
        super().__init__(secret_id=secret_id, secret_key=secret_key, denied_actions=denied_actions)
        self.bills = {month: list(rows) for month, rows in bills.items()}

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        action = handler.headers.get("X-TC-Action", "")
        auth = handler.headers.get("Authorization", "")
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
        service = scope[2] if len(scope) == 4 else ""
        params = json.loads(raw or b"{}")
        self.record({"t": time.monotonic(), "service": service, "action": action, "params": params, "region": ""})
        try:
            self._check_signature(handler, raw, scope)
            if service != "billing" or handler.headers.get("X-TC-Version") != "2018-07-09":
                raise ApiError("InvalidParameterValue", "Version is not valid.")
            if action in self.denied_actions:
                raise ApiError("AuthFailure.UnauthorizedOperation", f"you are not authorized ({service}:{action})")
            if action != "DescribeBillSummaryByProduct":
                raise ApiError("InvalidAction", f"The action {action} is not found.")
            answer = self._summary(params)
        except ApiError as err:
            answer = {"Error": {"Code": err.code, "Message": err.message}}
        self._send(handler, 200, {"Response": {**answer, "RequestId": str(uuid.uuid4())}})

    def _summary(self, params: Mapping[str, Any]) -> Record:
        begin, end = str(params.get("BeginTime") or ""), str(params.get("EndTime") or "")
        try:
            first, last = time.strptime(begin, _STAMP), time.strptime(end, _STAMP)
        except ValueError:
            raise ApiError("InvalidParameterValue", "BeginTime and EndTime must be yyyy-mm-dd hh:ii:ss.") from None
        if (first.tm_year, first.tm_mon) != (last.tm_year, last.tm_mon):
            raise ApiError("InvalidParameter", "BeginTime and EndTime must be in the same month.")
        rows = self.bills.get(begin[:7], [])
        total = sum(float(r["RealTotalCost"]) for r in rows)
        return {"Ready": 1, "SummaryOverview": rows,
                "SummaryTotal": {"RealTotalCost": f"{total:.8f}", "TotalCost": f"{total * 1.2:.8f}"}}


def ce_answer(groups: Mapping[str, float], start: str, end: str, *, unit: str = "USD") -> Record:
    """A monthly ``GetCostAndUsage`` answer with one group per key."""
    return {
        "GroupDefinitions": [{"Type": "DIMENSION", "Key": "SERVICE"}],
        "ResultsByTime": [{
            "TimePeriod": {"Start": start, "End": end}, "Total": {}, "Estimated": False,
            "Groups": [
                {"Keys": [key], "Metrics": {"UnblendedCost": {"Amount": f"{amount:.10f}", "Unit": unit}}}
                for key, amount in groups.items()
            ],
        }],
        "DimensionValueAttributes": [],
    }


def seed_moto_costs(endpoint: str, answers: Sequence[Record]) -> None:
    """Queue ``GetCostAndUsage`` answers in moto's server (each new request body takes the next)."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/static/ce/cost-and-usage-results", data=json.dumps({"results": list(answers)}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201, answer.status


class FakeCostExplorer(FakeCloud):
    """``GetCostAndUsage`` with a SigV4 key-id check; every request recorded (the ``answer`` is returned as is)."""

    content_type = "application/x-amz-json-1.1"

    def __init__(self, answer: Record, *, access_key: str = "testing") -> None:
        super().__init__({}, access_key=access_key)
        self.answer = answer

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        target = handler.headers.get("X-Amz-Target", "")
        auth = handler.headers.get("Authorization", "")
        self.record({"action": target.rsplit(".", 1)[-1], "params": json.loads(raw or b"{}"), "region": ""})
        if f"Credential={self.access_key}/" not in auth:
            return self._send(handler, 400, {"__type": "UnrecognizedClientException",
                                             "message": "The security token included in the request is invalid."})
        if target != "AWSInsightsIndexService.GetCostAndUsage":
            return self._send(handler, 400, {"__type": "UnknownOperationException", "message": target})
        return self._send(handler, 200, self.answer)
