"""Alertmanager's webhook payload (version 4), read into frozen data or refused in one plain sentence.

Alertmanager POSTs one *notification* per alert group: its ``groupKey``, the
group's status, the labels the group shares and every alert of the group with
its own status, labels, annotations and times. Grafana's Alertmanager-compatible
contact point sends the same shape. The body is untrusted: a sender that is
not Alertmanager (or a broken proxy) gets a :class:`PayloadError` naming the
first things wrong, never a traceback.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

__all__ = ["MAX_ALERTS", "Alert", "AlertStatus", "Notification", "PayloadError", "parse_notification"]

MAX_ALERTS = 1000
"""Most alerts one notification may carry; Alertmanager's ``max_alerts`` bounds what it sends."""

AlertStatus: TypeAlias = Literal["firing", "resolved"]
"""An alert's or a group's status."""

_SHOWN_ERRORS = 3
"""Problems named in one :class:`PayloadError`; the rest are counted."""


class PayloadError(ValueError):
    """The body is not an Alertmanager notification; ``str(exc)`` says what is wrong.

    For example ``alerts[1].labels: expected an object``.
    """


@dataclass(frozen=True)
class Alert:
    """One alert of a notification."""

    status: AlertStatus
    """``firing`` or ``resolved``."""
    labels: Mapping[str, str]
    """Its identifying labels (``alertname``, ``instance``, ``severity``, …)."""
    annotations: Mapping[str, str]
    """Its descriptive annotations (``summary``, ``description``, ``runbook_url``, …)."""
    starts_at: float | None
    """When it started firing (unix seconds); ``None`` when not given (Alertmanager's zero time)."""
    ends_at: float | None
    """When it resolved, or when it will be considered resolved (unix seconds); ``None`` for the zero time."""
    generator_url: str
    """Link to the rule that fired it (Prometheus' graph of the expression)."""
    fingerprint: str
    """Alertmanager's id of the alert; derived from the sorted labels when the sender gave none."""


@dataclass(frozen=True)
class Notification:
    """One webhook call: the current state of one alert group."""

    version: str
    """Payload version: ``"4"`` from Alertmanager, ``"1"`` from Grafana's webhook contact point."""
    group_key: str
    """Alertmanager's key of the group, stable for its whole life: notifications with the same key update one card."""
    status: AlertStatus
    """``firing`` while any alert of the group fires, else ``resolved``."""
    receiver: str
    """The Alertmanager receiver that sent it."""
    group_labels: Mapping[str, str]
    """The labels the route groups by (``group_by``)."""
    common_labels: Mapping[str, str]
    """Labels every alert of the notification shares."""
    common_annotations: Mapping[str, str]
    """Annotations every alert of the notification shares."""
    external_url: str
    """Alertmanager's own URL (for silence links); may be empty."""
    truncated_alerts: int
    """Alerts left out because of the receiver's ``max_alerts``."""
    alerts: tuple[Alert, ...]
    """The alerts, in the order Alertmanager sent them."""


_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})")
"""RFC 3339 as Go writes it: up to nanoseconds, which ``datetime`` cannot read as they are."""


def _timestamp(value: Any) -> float | None:
    """An RFC 3339 time as unix seconds; empty or Go's zero time (``0001-01-01T00:00:00Z``) is ``None``."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("expected an RFC 3339 time such as 2024-05-01T10:00:00Z")
    match = _TIME.fullmatch(value)
    if match is None:
        raise ValueError(f"expected an RFC 3339 time such as 2024-05-01T10:00:00Z, got {_clip(value)!r}")
    day, clock, fraction, zone = match.groups()
    if day.startswith("0001-"):
        return None
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        moment = datetime.fromisoformat(f"{day}T{clock}.{(fraction or '')[:6].ljust(6, '0')}{zone}")
    except ValueError:
        raise ValueError(f"{_clip(value)!r} is not a real date and time") from None
    return moment.timestamp()


_Time = Annotated[float | None, BeforeValidator(_timestamp)]


class _RawAlert(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: AlertStatus
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: _Time = Field(None, alias="startsAt")
    ends_at: _Time = Field(None, alias="endsAt")
    generator_url: str = Field("", alias="generatorURL")
    fingerprint: str = ""


class _RawNotification(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    version: str
    group_key: str = Field(alias="groupKey", min_length=1)
    status: AlertStatus
    receiver: str = ""
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field("", alias="externalURL")
    truncated_alerts: int = Field(0, alias="truncatedAlerts", ge=0)
    alerts: list[_RawAlert] = Field(min_length=1)


VERSIONS = frozenset({"4", "1"})
"""Alertmanager's webhook payload version, and Grafana's webhook contact point's (the same fields, and more)."""


def parse_notification(body: bytes) -> Notification:
    """Read one webhook body; raises :class:`PayloadError` when it is not a version 4 notification."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PayloadError("expected a JSON object (Alertmanager's webhook payload) at the top level")
    if data.get("version") not in VERSIONS:
        got = data.get("version")
        shown = f", got {_clip(str(got))!r}" if isinstance(got, (str, int, float)) else ""
        raise PayloadError(
            f'version: expected "4" (Alertmanager\'s webhook payload version; Grafana\'s webhook sends "1"){shown}'
        )
    alerts = data.get("alerts")
    if isinstance(alerts, list) and len(alerts) > MAX_ALERTS:
        # Refused before each of them is validated: the count alone is the answer.
        raise PayloadError(
            f"alerts: {len(alerts)} alerts, more than {MAX_ALERTS}; set max_alerts in Alertmanager's webhook_config"
        )
    try:
        raw = _RawNotification.model_validate(data)
    except ValidationError as exc:
        raise PayloadError(_describe(exc)) from None
    return Notification(
        version=raw.version,
        group_key=raw.group_key,
        status=raw.status,
        receiver=raw.receiver,
        group_labels=raw.group_labels,
        common_labels=raw.common_labels,
        common_annotations=raw.common_annotations,
        external_url=raw.external_url,
        truncated_alerts=raw.truncated_alerts,
        alerts=tuple(_alert(a) for a in raw.alerts),
    )


def _alert(raw: _RawAlert) -> Alert:
    return Alert(
        status=raw.status,
        labels=raw.labels,
        annotations=raw.annotations,
        starts_at=raw.starts_at,
        ends_at=raw.ends_at,
        generator_url=raw.generator_url,
        fingerprint=raw.fingerprint or _fingerprint(raw.labels),
    )


def _fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id from the sorted labels, as Alertmanager's own is (its hash differs; both only need to be stable)."""
    text = "\x00".join(f"{key}\x01{value}" for key, value in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_PHRASES = {
    "dict_type": "expected an object",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "missing": "required but missing",
    "string_too_short": "must not be empty",
    "greater_than_equal": "must be 0 or more",
}


def _describe(error: ValidationError) -> str:
    """The first problems as ``path: what is wrong``, joined; the rest counted."""
    problems = []
    for item in error.errors():
        kind = item["type"]
        if kind == "literal_error":
            what = f"expected {item.get('ctx', {}).get('expected', 'another value')}"
        elif kind == "too_short" and item["loc"] == ("alerts",):
            what = "expected at least one alert"
        elif kind == "value_error":
            what = str(item.get("ctx", {}).get("error", item["msg"]))
        else:
            what = _PHRASES.get(kind, item["msg"])
        problems.append(f"{_path(item['loc'])}: {what}")
    shown = "; ".join(problems[:_SHOWN_ERRORS])
    more = len(problems) - _SHOWN_ERRORS
    return f"{shown} (and {more} more)" if more > 0 else shown


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{_clip(str(part), 40)}"
    return path or "<body>"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clip(text: str, limit: int = 60) -> str:
    """Text of the body shown in a message (and so in a log line): no control characters, short."""
    text = _CONTROL.sub("?", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
