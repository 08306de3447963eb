"""JSON encoding of usage rows, shared by both back-ends (a row of an older release stays readable)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from botgateway.stores._codec import dumps
from botgateway.stores.base import UsageRow

__all__ = ["decode_usage", "encode_usage"]


def encode_usage(row: UsageRow) -> str:
    """One usage row as a JSON object."""
    return dumps(asdict(row))


def decode_usage(text: str | bytes) -> UsageRow:
    """The inverse of :func:`encode_usage`; unknown keys are ignored, missing ones take their defaults."""
    data: dict[str, Any] = json.loads(text)
    known = UsageRow.__dataclass_fields__
    values = {key: value for key, value in data.items() if key in known}
    values.setdefault("at", 0.0)
    return UsageRow(**values)
