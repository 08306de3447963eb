"""Reading a metrics question and planning its call: "how is prod-db-01 doing?" → ``resource_metrics``.

An on-call engineer asks how a host is doing, what its CPU did, or
``prod-db-01 怎么样``; a careful model reads the host's standard metrics over
a recent window (an hour unless the question names one) rather than guess.
A question the estate tools answer better (a path, a change, an exposure, a
list, an alert's investigation) is not a metrics question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tools.demo.estate_questions import read_estate_question
from tools.demo.planning import PlannedCall, find_tool
from tools.demo.question import analyze_question

__all__ = ["METRIC_TOOL", "METRIC_WORDS", "MetricAsk", "plan_metric_calls", "read_metric_question"]

METRIC_TOOL = "resource_metrics"
"""The tool the demo reads a resource's metrics with."""

METRIC_WORDS: tuple[tuple[str, str], ...] = (
    ("cpu", r"\bcpus?\b|处理器"),
    ("memory", r"\bmem(?:ory)?\b|\bram\b|内存"),
    ("net", r"\bnetwork\b|\btraffic\b|\bbandwidth\b|网络|流量|带宽"),
    ("disk", r"\bdisks?\b|\bi/?o\b|\biops\b|磁盘|硬盘"),
    ("connections", r"\bconnections?\b|连接数"),
)
"""Our metric families (``net`` is net_in and net_out) and the words that name them."""

_HOW = re.compile(
    r"\bhow(?:'s|\s+is|\s+are|\s+was|\s+has)\b.*\b(?:doing|going|looking|performing|holding up|been)\b"
    r"|\bhow(?:'s|\s+is)\s+\S+\s*\??\s*$|\bperformance\b|\bbusy\b|\bload\b(?!\s*-?\s*balanc)|\bmetrics?\b"
    r"|\butili[sz]ation\b|\busage\b|\bgraphs?\b|\bcharts?\b|\bspik\w*|\bwhat did\b.*\bdo\b"
    r"|怎么样|怎样|如何|状况|情况|负载(?!均衡)|指标|监控|使用率|利用率|忙不忙|走势|趋势|曲线|图表",
    re.IGNORECASE,
)
_WINDOWS: tuple[tuple[str, str], ...] = (
    (r"\btoday\b|\blast night\b|\bovernight\b|今天|昨晚|夜里", "24h"),
    (r"\byesterday\b|昨天", "48h"),
    (r"\b(?:this|last|past) week\b|本周|上周|这周|最近一周", "7d"),
)
_LAST_N = re.compile(
    r"\b(?:last|past)\s+(\d{1,3})\s*(minute|min|hour|day)s?\b|最近\s*(\d{1,3})\s*(分钟|小时|天)", re.IGNORECASE
)
_UNIT = {"minute": "m", "min": "m", "hour": "h", "day": "d", "分钟": "m", "小时": "h", "天": "d"}
_ESTATE_SHAPES = frozenset({"trace", "changes", "exposed", "list", "investigate"})
_RULES = re.compile(r"\ballow\w*|\bpermit\w*|\bopens?\b|\brules?\b|允许|放行|开放|规则", re.IGNORECASE)
"""What a firewall lets through ("which traffic does sg-web allow?") is a rule question, not a metric's."""


@dataclass(frozen=True, kw_only=True)
class MetricAsk:
    """What a metrics question asks."""

    subject: str
    """The host or resource: a name, an IP or an id."""
    window: str = "1h"
    """How far back to read (``1h`` unless the question says)."""
    focus: tuple[str, ...] = ()
    """The metric families the question names (``cpu``), told first."""


def read_metric_question(text: str, known_hosts: Iterable[str] = ()) -> MetricAsk | None:
    """The metrics question in ``text``, or ``None`` when it asks for something else or names no resource."""
    focus = tuple(family for family, pattern in METRIC_WORDS if re.search(pattern, text, re.IGNORECASE))
    if (not focus and not _HOW.search(text)) or _RULES.search(text):
        return None
    known = list(known_hosts)
    estate = read_estate_question(text, known)
    if estate is not None and estate.shape in _ESTATE_SHAPES:
        return None
    lookup = analyze_question(text, known)
    subject = lookup.queries[0] if lookup.queries else (estate.subject if estate is not None else "")
    if not subject or (estate is not None and estate.fragment):
        return None  # "how is the orders Redis?" names a kind, not one resource: find it first
    return MetricAsk(subject=subject, window=_window(text), focus=focus)


def plan_metric_calls(ask: MetricAsk, tools: Mapping[str, Mapping[str, Any]]) -> list[PlannedCall]:
    """``resource_metrics(resource, window)`` when the request offers it; else nothing."""
    name = find_tool(tools, METRIC_TOOL)
    if name is None:
        return []
    return [(name, {"resource": ask.subject, "window": ask.window})]


def _window(text: str) -> str:
    match = _LAST_N.search(text)
    if match:
        number, unit = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        return f"{number}{_UNIT[unit.lower()]}"
    return next((window for pattern, window in _WINDOWS if re.search(pattern, text, re.IGNORECASE)), "1h")
