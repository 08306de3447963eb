"""The question a read-only investigation asks the model about an alert group.

It names the alerts and the hosts their labels point to (``instance`` without
its port, ``host``, ``ip``, ``node``), asks to identify each host, its owner,
tags and state and what shares it, and hands over the alert's own text as
data, each value on one line so none can pass for an instruction of ours.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import urlsplit

from botgateway.alerts.group import AlertGroup, TrackedAlert
from botgateway.strings import t

__all__ = ["HOST_LABELS", "RESOURCE_LABELS", "alert_hosts", "host_of_instance", "investigation_question"]

HOST_LABELS = ("instance", "host", "ip", "node")
"""Labels whose value names a machine."""

RESOURCE_LABELS = ("pod", "instance_id", "dbinstance_identifier", "cache_cluster_id", "load_balancer", "bucket", "resource")
"""Labels whose value names another resource (a pod, a database, a load balancer, a bucket), identified the same way."""

_MAX_HOSTS = 10
_MAX_ALERTS = 10
_MAX_VALUE = 120
_MAX_TEXT = 400
_DATA_LABELS = ("alertname", "severity", *HOST_LABELS, "pod", "namespace", "job", "service", "cluster", "env")
"""Labels handed to the model with each alert; the rest say little about where it is."""


def investigation_question(group: AlertGroup, *, locale: str) -> str:
    """What the investigation turn asks, in ``locale``."""
    alerts = group.firing or group.alerts
    names = ", ".join(dict.fromkeys(_one_line(a.name, 60) for a in alerts))
    severity = next((a.labels["severity"] for a in alerts if a.labels.get("severity")), "")
    shown_severity = t(locale, "alert_q_severity", severity=_one_line(severity, 30)) if severity else ""
    key = "alert_q_firing" if group.status == "firing" else "alert_q_resolved"
    lines = [t(locale, key, names=names, severity=shown_severity)]
    hosts = alert_hosts(alerts)
    lines.append(t(locale, "alert_q_hosts", hosts=", ".join(hosts)) if hosts else t(locale, "alert_q_no_hosts"))
    lines.append(t(locale, "alert_q_instructions"))
    lines.append("")
    lines.append(t(locale, "alert_q_data"))
    lines.extend(_data_line(a) for a in alerts[:_MAX_ALERTS])
    return "\n".join(lines)


def alert_hosts(alerts: tuple[TrackedAlert, ...]) -> list[str]:
    """The distinct hosts and resources the alerts' labels name, in order: ``instance`` without its port, ``host``,
    ``ip``, ``node``, then :data:`RESOURCE_LABELS` (a pod as ``namespace/pod``).

    At most ten: an investigation of more would not fit one answer.
    """
    hosts: dict[str, None] = {}
    for alert in alerts:
        for label in (*HOST_LABELS, *RESOURCE_LABELS):
            value = alert.labels.get(label, "").strip()
            if label == "instance":
                value = host_of_instance(value)
            elif label == "pod" and value and alert.labels.get("namespace", "").strip():
                value = f"{alert.labels['namespace'].strip()}/{value}"
            value = _one_line(value, _MAX_VALUE)
            if value:
                hosts.setdefault(value)
    return list(hosts)[:_MAX_HOSTS]


_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[^:\s/]+):\d{1,5}")


def host_of_instance(instance: str) -> str:
    """The host part of a Prometheus ``instance``: ``10.0.1.100:9100`` → ``10.0.1.100``, ``[::1]:9100`` → ``::1``,
    ``https://api.example.com:443/health`` → ``api.example.com``; anything else as it is."""
    instance = instance.strip()
    if "://" in instance:
        try:
            return urlsplit(instance).hostname or instance
        except ValueError:
            return instance
    match = _HOST_PORT.fullmatch(instance)
    if match is None:
        return instance
    return match.group("host").strip("[]")


def _data_line(alert: TrackedAlert) -> str:
    labels = [f"{key}={_one_line(alert.labels[key], _MAX_VALUE)}" for key in _DATA_LABELS if alert.labels.get(key)]
    texts = [
        f"{key}: {_one_line(alert.annotations[key], _MAX_TEXT)}"
        for key in ("summary", "description") if alert.annotations.get(key, "").strip()
    ]
    return "- " + " · ".join([alert.status, *labels, *texts])


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line, without control or format characters, cut at ``limit``."""
    kept = "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf"))
    visible = " ".join(kept.split())
    return visible if len(visible) <= limit else visible[: limit - 1] + "…"
