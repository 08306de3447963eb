"""What an alert card knows of the hosts its alerts name: which host is what, as a follow-up lookup found it.

An alert names its machine in a label (``instance="10.0.2.11:9100"``); the
card shows the alert's labels, and once a lookup has identified the host, what
it is (``10.0.2.11 → prod-web-01``, its kind, where it lives and its team).
Each host the card asked about is kept on the card's record
(:class:`KnownHost`), found or not, so it is asked once per group, and every
redraw (an edit, the investigation's updates, another replica's) shows it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from botgateway.alerts.group import TrackedAlert
from botgateway.alerts.question import HOST_LABELS, host_of_instance

__all__ = ["HostState", "KnownHost", "host_of_alert", "hosts_from_list", "hosts_to_list"]

HostState: TypeAlias = Literal["asking", "found", "unknown", "failed"]
"""Where a host's lookup is: under way, found, looked up and matching nothing, or failed (asked again later)."""

_HOST = re.compile(r"[0-9A-Za-z:][0-9A-Za-z.:%_-]{0,252}")
"""An address or a host name worth handing to a lookup tool (a label value is whatever a rule's author wrote)."""


@dataclass(frozen=True, kw_only=True)
class KnownHost:
    """One host an alert card asked about, and what it is."""

    host: str
    """The address or name the alert's labels give (``10.0.2.11``)."""
    state: HostState
    """Where its lookup is."""
    at: float = 0.0
    """Unix time of the state (an ``asking`` left by a process that died is asked again once stale)."""
    name: str = ""
    """What it is called where it was found (``prod-web-01``), once found."""
    kind: str = ""
    """What kind of resource it is (``server``), when the lookup said."""
    provider: str = ""
    """Where it lives: its provider's key (``inventory``, ``aliyun``), when the lookup said."""
    team: str = ""
    """Its owner or team (``web-team``), when the lookup said."""


def host_of_alert(alert: TrackedAlert) -> str:
    """The host ``alert`` is about: its ``instance`` label's host part (``10.0.2.11:9100`` → ``10.0.2.11``), else its
    ``host``, ``ip`` or ``node`` label; empty when none names one a lookup could take."""
    for label in HOST_LABELS:
        value = alert.labels.get(label, "").strip()
        if label == "instance":
            value = host_of_instance(value)
        if value:
            return value if _HOST.fullmatch(value) else ""
    return ""


def hosts_to_list(hosts: tuple[KnownHost, ...]) -> list[dict[str, Any]]:
    """``hosts`` as JSON-ready data, read back by :func:`hosts_from_list`."""
    return [{"host": h.host, "state": h.state, "at": h.at, "name": h.name, "kind": h.kind, "provider": h.provider,
             "team": h.team} for h in hosts]


def hosts_from_list(data: Any) -> tuple[KnownHost, ...]:
    """The hosts :func:`hosts_to_list` wrote (nothing from a record of an older release)."""
    if not isinstance(data, list):
        return ()
    return tuple(_host(item) for item in data if isinstance(item, Mapping) and item.get("host"))


def _host(item: Mapping[str, Any]) -> KnownHost:
    state = item.get("state")
    at = item.get("at")
    return KnownHost(
        host=str(item["host"]), state=state if state in ("asking", "found", "unknown", "failed") else "failed",
        at=float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0,
        name=str(item.get("name") or ""), kind=str(item.get("kind") or ""),
        provider=str(item.get("provider") or ""), team=str(item.get("team") or ""),
    )
