"""The alert part of an alert card, as simple Markdown both platforms draw: bold, bullets and links.

It reads, top to bottom: the headline (``🔥 Firing · critical · HostDown``), the
group's reference and how long it has fired, one bullet per alert (its name,
key labels, status, what its host is once a lookup identified it, and summary),
Alertmanager's note of alerts it left out, and the links (the rule's source, a
silence for the group).

Label and annotation values come from whoever can write an alerting rule or
reach Alertmanager: they are made inert (control characters stripped, Markdown
characters turned into look-alikes, as DingTalk has no reliable backslash
escape) and kept short. Links are only ever ``http(s)``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from botgateway.alerts.group import AlertGroup, TrackedAlert, group_ref
from botgateway.alerts.known_hosts import KnownHost, host_of_alert
from botgateway.strings import STRINGS, normalize_locale, t

__all__ = ["KEY_LABELS", "alert_section", "format_alert_duration", "inline_value", "safe_url", "silence_url"]

KEY_LABELS = ("instance", "host", "ip", "node", "pod", "namespace", "job", "service")
"""Labels that say where an alert is, shown on its bullet when present (at most :data:`_MAX_KEY_LABELS`)."""

_MAX_KEY_LABELS = 4
_MAX_SHOWN_ALERTS = 10

SECTION_CHARS = 2400
"""The alert section's size, well inside the cards' 3,000-character preamble: what does not fit is counted."""
"""Bullets on one card; the rest are counted (a card has a size limit, and ten say what is going on)."""
_MAX_NAMES = 3
"""Alert names in the headline."""
_MAX_VALUE = 80
_MAX_ANNOTATION = 300
_MAX_URL = 2000
_ANNOTATIONS = ("summary", "description")
_FALLBACK_ANNOTATION = "message"
"""Older rule sets (kube-prometheus) put their text here instead."""

_MARKUP = str.maketrans({
    "*": "＊", "`": "｀", "[": "［", "]": "］", "<": "＜", ">": "＞", "|": "｜", "~": "～",
    "\\": "＼", "#": "＃", "@": "＠", "&": "＆",
})
"""Markdown (and Slack/DingTalk mention) characters → look-alikes that read the same and do nothing."""
_EDGE_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
"""An ``_`` that could open or close emphasis; inside a word (``node_exporter``) it cannot, and stays."""
_URL_UNSAFE = str.maketrans({"(": "%28", ")": "%29", "<": "%3C", ">": "%3E", " ": "%20", '"': "%22"})
"""What would end a Markdown link destination early."""


def alert_section(
    group: AlertGroup, *, locale: str, now: float, investigating: bool = False,
    hosts: Mapping[str, KnownHost] | None = None,
) -> str:
    """The alert part of ``group``'s card in ``locale``, as of ``now`` (unix seconds); ``hosts``: what the hosts its
    alerts name are, by host, as far as a lookup found them."""
    # The links come before the alerts: a big group's list is what gives way to the card's size, never the links.
    parts = [f"**{_headline(group, locale)}**", " · ".join(_meta(group, locale, now)), " · ".join(_links(group, locale))]
    tail = [t(locale, "alert_truncated", n=group.truncated_alerts)] if group.truncated_alerts > 0 else []
    if investigating:
        tail.append(t(locale, "alert_investigating"))
    budget = SECTION_CHARS - sum(len(p) + 2 for p in (*parts, *tail))
    parts.append("\n".join(_bullets(group, locale, budget, hosts or {})))
    return "\n\n".join(p for p in (*parts, *tail) if p)


def _headline(group: AlertGroup, locale: str) -> str:
    words = [t(locale, "alert_firing" if group.status == "firing" else "alert_resolved")]
    severity = _severity(group)
    if severity:
        words.append(inline_value(severity, 30))
    names = _names(group.firing if group.status == "firing" and group.firing else group.alerts)
    if names:
        shown = ", ".join(inline_value(n, 60) for n in names[:_MAX_NAMES])
        words.append(shown + (f" +{len(names) - _MAX_NAMES}" if len(names) > _MAX_NAMES else ""))
    return " · ".join(words)


def _severity(group: AlertGroup) -> str:
    for labels in (group.common_labels, group.group_labels, *(a.labels for a in group.firing or group.alerts)):
        if labels.get("severity"):
            return labels["severity"]
    return ""


def _names(alerts: tuple[TrackedAlert, ...]) -> list[str]:
    return list(dict.fromkeys(a.name for a in alerts))


def _meta(group: AlertGroup, locale: str, now: float) -> list[str]:
    meta = [group_ref(group.group_key)]
    if group.status == "firing":
        starts = [a.starts_at for a in group.firing if a.starts_at is not None]
        start = min(starts) if starts else group.first_seen
        meta.append(t(locale, "alert_firing_for", duration=format_alert_duration(now - start, locale)))
    else:
        starts = [a.starts_at for a in group.alerts if a.starts_at is not None]
        ends = [a.ends_at for a in group.alerts if a.ends_at is not None and a.status == "resolved"]
        start = min(starts) if starts else group.first_seen
        end = max(ends) if ends else group.updated_at
        meta.append(t(locale, "alert_resolved_after", duration=format_alert_duration(end - start, locale)))
    if len(group.alerts) > 1 and group.status == "firing":
        meta.append(t(locale, "alert_counts", total=len(group.alerts), firing=len(group.firing)))
    elif len(group.alerts) > 1:
        meta.append(t(locale, "alert_total", total=len(group.alerts)))
    if group.repeats > 0:
        meta.append(t(locale, "alert_repeated", n=group.repeats))
    return meta


def format_alert_duration(seconds: float, locale: str) -> str:
    """A coarse duration for alerts, which last minutes to days: ``40 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    total = max(int(seconds), 0)
    if total < 60:
        return t(locale, "alert_seconds", s=total)
    minutes = total // 60
    if minutes < 60:
        return t(locale, "alert_minutes", m=minutes)
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return t(locale, "alert_hours", h=hours, m=minutes)
    days, hours = divmod(hours, 24)
    return t(locale, "alert_days", d=days, h=hours)


def _bullets(group: AlertGroup, locale: str, budget: int, hosts: Mapping[str, KnownHost]) -> list[str]:
    """One bullet per alert, firing ones first, as many as ``budget`` characters hold (then "… and N more")."""
    alerts = group.alerts
    # Firing alerts are shown before resolved ones are, in first-seen order either way.
    chosen = sorted(range(len(alerts)), key=lambda i: (alerts[i].status != "firing", i))[:_MAX_SHOWN_ALERTS]
    room = budget - len(t(locale, "alert_more", n=len(alerts))) - 1
    kept: list[int] = []
    for i in chosen:
        size = sum(len(line) + 1 for line in _bullet(alerts[i], locale, hosts))
        if kept and size > room:
            break  # the first alert is always shown, if need be alone
        kept.append(i)
        room -= size
    lines = [line for i in sorted(kept) for line in _bullet(alerts[i], locale, hosts)]
    if len(alerts) > len(kept):
        lines.append(t(locale, "alert_more", n=len(alerts) - len(kept)))
    return lines


def _bullet(alert: TrackedAlert, locale: str, hosts: Mapping[str, KnownHost]) -> list[str]:
    resolved = alert.status == "resolved"
    head = [f"{'✅ ' if resolved else ''}**{inline_value(alert.name, 60)}**"]
    present = [key for key in KEY_LABELS if alert.labels.get(key)]
    head.extend(
        f"{inline_value(key, 20)}={inline_value(alert.labels[key], _MAX_VALUE)}" for key in present[:_MAX_KEY_LABELS]
    )
    if resolved:
        head.append(t(locale, "alert_item_resolved"))
    lines = ["- " + " · ".join(head)]
    known = hosts.get(host_of_alert(alert))
    if known is not None and known.state == "found" and known.name:
        lines.append(f"  {_identity(known, locale)}")
    lines.extend(f"  {inline_value(text, _MAX_ANNOTATION)}" for text in _texts(alert.annotations))
    return lines


def _identity(host: KnownHost, locale: str) -> str:
    """``↳ 10.0.2.11 → **prod-web-01** (server · static inventory · team web-team)``: what a lookup found the host to
    be. What the lookup returned is data like a label: made inert the same way."""
    details = [inline_value(host.kind, 30)] if host.kind else []
    if host.provider:
        details.append(inline_value(_provider_label(host.provider, locale), 40))
    if host.team:
        details.append(t(locale, "alert_host_team", team=inline_value(host.team, 40)))
    shown = t(locale, "alert_host_details", details=" · ".join(details)) if details else ""
    return t(locale, "alert_host", host=inline_value(host.host, _MAX_VALUE), name=inline_value(host.name, 60),
             details=shown)


def _provider_label(provider: str, locale: str) -> str:
    """The provider's name in ``locale`` (``static inventory``, ``静态清单``); its key when it has no name there."""
    key = f"source_{provider}"
    return t(locale, key) if key in STRINGS[normalize_locale(locale)] else provider


def _texts(annotations: Mapping[str, str]) -> list[str]:
    texts = [annotations[key] for key in _ANNOTATIONS if annotations.get(key, "").strip()]
    if not texts and annotations.get(_FALLBACK_ANNOTATION, "").strip():
        texts = [annotations[_FALLBACK_ANNOTATION]]
    return list(dict.fromkeys(" ".join(text.split()) for text in texts))  # a description that repeats the summary once


def _links(group: AlertGroup, locale: str) -> list[str]:
    links = []
    source = next((url for url in (safe_url(a.generator_url) for a in group.alerts) if url), None)
    if source:
        links.append(f"[{t(locale, 'alert_source')}]({source})")
    silence = silence_url(group)
    if silence:
        links.append(f"[{t(locale, 'alert_silence')}]({silence})")
    return links


def silence_url(group: AlertGroup) -> str | None:
    """Alertmanager's page for a new silence of the group (its ``group_labels``), or ``None`` without a usable URL."""
    labels = group.group_labels or group.common_labels
    if not group.external_url or not labels:
        return None
    matchers = ",".join(f'{name}="{_quoted(value)}"' for name, value in sorted(labels.items()))
    return safe_url(f"{group.external_url.rstrip('/')}/#/silences/new?filter={quote('{' + matchers + '}', safe='')}")


def _quoted(value: str) -> str:
    """A label value inside a matcher's double quotes, escaped as Alertmanager reads it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def safe_url(url: str) -> str | None:
    """``url`` fit for a Markdown link: ``http(s)`` with a host, no spaces or control characters; else ``None``."""
    url = url.strip()
    if not url or len(url) > _MAX_URL or any(ch.isspace() or unicodedata.category(ch)[0] == "C" for ch in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url.translate(_URL_UNSAFE)


_SPACES = re.compile(r"\s+")


def inline_value(text: str, limit: int) -> str:
    """An untrusted value as inert Markdown on one line: no control characters, markup as look-alikes, cut short."""
    visible = "".join(" " if ch.isspace() else ch for ch in text if not _hidden(ch))
    visible = _SPACES.sub(" ", visible).strip()
    if len(visible) > limit:
        visible = visible[: limit - 1].rstrip() + "…"
    return _EDGE_UNDERSCORE.sub("＿", visible.translate(_MARKUP))


def _hidden(ch: str) -> bool:
    """Control and format characters (bidi overrides, zero-width joiners), which could disguise what is shown."""
    return not ch.isspace() and unicodedata.category(ch) in ("Cc", "Cf")
