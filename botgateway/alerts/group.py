"""One alert group's state between notifications: what its card shows, folded from each notification.

Alertmanager sends the whole group each time (new alerts joined, resolved ones
marked, or the same again after ``repeat_interval``). :func:`fold` merges a
notification into the kept state and says what kind of change it was, so the
card is updated in place and a repeat is counted rather than posted again. The
state is kept in the Store as JSON (:func:`group_to_dict` / :func:`group_from_dict`),
so a restarted or another replica finds the same card.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from botgateway.alerts.payload import Alert, AlertStatus, Notification

__all__ = [
    "MAX_TRACKED_ALERTS",
    "AlertGroup",
    "Change",
    "TrackedAlert",
    "fold",
    "group_from_dict",
    "group_ref",
    "group_to_dict",
]

MAX_TRACKED_ALERTS = 200
"""Most alerts one group keeps; past it the oldest resolved ones are dropped first."""

Change: TypeAlias = Literal["new", "joined", "resolved", "refired", "changed", "repeat"]
"""What a notification did to its group (see :func:`fold`)."""


@dataclass(frozen=True)
class TrackedAlert:
    """One alert of a group, as last reported."""

    fingerprint: str
    """Alertmanager's id of the alert."""
    name: str
    """Its ``alertname`` label, or ``alert`` when it has none."""
    labels: Mapping[str, str]
    """Its labels."""
    annotations: Mapping[str, str]
    """Its annotations."""
    status: AlertStatus
    """``firing`` or ``resolved``."""
    starts_at: float | None
    """When it started firing (unix seconds), if known."""
    ends_at: float | None
    """When it resolved (unix seconds), if known."""
    generator_url: str
    """Link to the rule that fired it."""


@dataclass(frozen=True)
class AlertGroup:
    """An alert group's state: what its card shows."""

    group_key: str
    """Alertmanager's key of the group."""
    status: AlertStatus
    """The group's status, as the last notification said."""
    alerts: tuple[TrackedAlert, ...]
    """Its alerts in the order they were first seen; alerts absent from later notifications are kept."""
    group_labels: Mapping[str, str]
    """The labels the route groups by."""
    common_labels: Mapping[str, str]
    """Labels all alerts of the last notification share."""
    common_annotations: Mapping[str, str]
    """Annotations all alerts of the last notification share."""
    external_url: str
    """Alertmanager's URL (for the silence link); may be empty."""
    first_seen: float
    """When the first notification arrived (unix seconds)."""
    updated_at: float
    """When the last notification arrived (unix seconds)."""
    notifications: int
    """Notifications folded in so far."""
    repeats: int
    """Of those, how many repeated the state already shown."""
    truncated_alerts: int = 0
    """Alerts the last notification left out (Alertmanager's ``max_alerts``)."""

    @property
    def firing(self) -> tuple[TrackedAlert, ...]:
        """The alerts still firing."""
        return tuple(a for a in self.alerts if a.status == "firing")


def group_ref(group_key: str) -> str:
    """A short reference for a group shown on its card (``A-3F9C2B``), the same everywhere for the same key."""
    return "A-" + hashlib.sha256(group_key.encode("utf-8")).hexdigest()[:6].upper()


def fold(group: AlertGroup | None, n: Notification, now: float) -> tuple[AlertGroup, Change]:
    """``group`` with notification ``n`` merged in at ``now``, and what changed.

    ``new``: there was no group yet. Otherwise, in this order of precedence:
    ``refired`` (the group was resolved and fires again), ``resolved`` (it was
    firing and is resolved now), ``joined`` (an alert not seen before fires),
    ``repeat`` (every alert of ``n`` is known with the status it had, and so is
    the group's: ``repeats`` is counted), ``changed`` (anything else, such as
    one alert of several resolving).
    """
    tracked = tuple(_tracked(a) for a in n.alerts)
    if group is None:
        fresh = AlertGroup(
            group_key=n.group_key, status=n.status, alerts=_bounded(_dedupe(tracked)), group_labels=n.group_labels,
            common_labels=n.common_labels, common_annotations=n.common_annotations, external_url=n.external_url,
            first_seen=now, updated_at=now, notifications=1, repeats=0, truncated_alerts=n.truncated_alerts,
        )
        return fresh, "new"
    known = {a.fingerprint: a for a in group.alerts}
    change = _change(group, known, tracked, n.status)
    merged = dict(known)  # insertion order is first-seen order; an update keeps an alert's place
    for alert in tracked:
        merged[alert.fingerprint] = alert
    updated = replace(
        group, status=n.status, alerts=_bounded(tuple(merged.values())), group_labels=n.group_labels,
        common_labels=n.common_labels, common_annotations=n.common_annotations, external_url=n.external_url,
        updated_at=now, notifications=group.notifications + 1, repeats=group.repeats + (change == "repeat"),
        truncated_alerts=n.truncated_alerts,
    )
    return updated, change


def _change(
    group: AlertGroup, known: Mapping[str, TrackedAlert], alerts: tuple[TrackedAlert, ...], status: AlertStatus
) -> Change:
    if group.status == "resolved" and status == "firing":
        return "refired"
    if group.status == "firing" and status == "resolved":
        return "resolved"
    if any(a.fingerprint not in known and a.status == "firing" for a in alerts):
        return "joined"
    if all(a.fingerprint in known and known[a.fingerprint].status == a.status for a in alerts):
        return "repeat"
    return "changed"


def _tracked(alert: Alert) -> TrackedAlert:
    return TrackedAlert(
        fingerprint=alert.fingerprint, name=alert.labels.get("alertname") or "alert", labels=dict(alert.labels),
        annotations=dict(alert.annotations), status=alert.status, starts_at=alert.starts_at, ends_at=alert.ends_at,
        generator_url=alert.generator_url,
    )


def _dedupe(alerts: tuple[TrackedAlert, ...]) -> tuple[TrackedAlert, ...]:
    """One entry per fingerprint (the last reported), at the place it was first seen."""
    return tuple({a.fingerprint: a for a in alerts}.values())


def _bounded(alerts: tuple[TrackedAlert, ...]) -> tuple[TrackedAlert, ...]:
    """At most :data:`MAX_TRACKED_ALERTS`: the oldest resolved go first, then the oldest firing."""
    excess = len(alerts) - MAX_TRACKED_ALERTS
    if excess <= 0:
        return alerts
    resolved = [i for i, a in enumerate(alerts) if a.status == "resolved"]
    dropped = set(resolved[:excess])
    if len(dropped) < excess:
        firing = [i for i, a in enumerate(alerts) if a.status == "firing"]
        dropped.update(firing[: excess - len(dropped)])
    return tuple(a for i, a in enumerate(alerts) if i not in dropped)


def group_to_dict(group: AlertGroup) -> dict[str, Any]:
    """``group`` as JSON-ready data, read back by :func:`group_from_dict`."""
    return {
        "group_key": group.group_key,
        "status": group.status,
        "alerts": [_alert_to_dict(a) for a in group.alerts],
        "group_labels": dict(group.group_labels),
        "common_labels": dict(group.common_labels),
        "common_annotations": dict(group.common_annotations),
        "external_url": group.external_url,
        "first_seen": group.first_seen,
        "updated_at": group.updated_at,
        "notifications": group.notifications,
        "repeats": group.repeats,
        "truncated_alerts": group.truncated_alerts,
    }


def group_from_dict(data: Mapping[str, Any]) -> AlertGroup:
    """The group :func:`group_to_dict` wrote; missing keys (from an older release) take neutral defaults."""
    first_seen = _number(data.get("first_seen")) or 0.0
    return AlertGroup(
        group_key=str(data.get("group_key", "")),
        status=_status(data.get("status")),
        alerts=tuple(_alert_from_dict(a) for a in data.get("alerts") or () if isinstance(a, Mapping)),
        group_labels=_strings(data.get("group_labels")),
        common_labels=_strings(data.get("common_labels")),
        common_annotations=_strings(data.get("common_annotations")),
        external_url=str(data.get("external_url") or ""),
        first_seen=first_seen,
        updated_at=_number(data.get("updated_at")) or first_seen,
        notifications=int(_number(data.get("notifications")) or 0),
        repeats=int(_number(data.get("repeats")) or 0),
        truncated_alerts=int(_number(data.get("truncated_alerts")) or 0),
    )


def _alert_to_dict(alert: TrackedAlert) -> dict[str, Any]:
    return {
        "fingerprint": alert.fingerprint,
        "name": alert.name,
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "status": alert.status,
        "starts_at": alert.starts_at,
        "ends_at": alert.ends_at,
        "generator_url": alert.generator_url,
    }


def _alert_from_dict(data: Mapping[str, Any]) -> TrackedAlert:
    labels = _strings(data.get("labels"))
    return TrackedAlert(
        fingerprint=str(data.get("fingerprint", "")),
        name=str(data.get("name") or labels.get("alertname") or "alert"),
        labels=labels,
        annotations=_strings(data.get("annotations")),
        status=_status(data.get("status")),
        starts_at=_number(data.get("starts_at")),
        ends_at=_number(data.get("ends_at")),
        generator_url=str(data.get("generator_url") or ""),
    )


def _status(value: Any) -> AlertStatus:
    return "resolved" if value == "resolved" else "firing"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}
