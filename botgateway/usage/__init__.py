"""Usage: every model call's tokens and cost, recorded and written behind."""

from __future__ import annotations

from botgateway.usage.pricing import Pricing
from botgateway.usage.recorder import USAGE_KEY, UsageRecorder, usage_entry, usage_rows_of
from botgateway.usage.writer import UsageWriter

__all__ = [
    "USAGE_KEY",
    "Pricing",
    "UsageRecorder",
    "UsageWriter",
    "usage_entry",
    "usage_rows_of",
]
