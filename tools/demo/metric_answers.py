"""What the demo says about a resource's metrics, in English or Chinese: the numbers, never an adjective alone.

The figures are read back from the data behind the ``resource_metrics`` (or
``query_metrics``) tool message (:meth:`MetricQueryResult.data
<tools.metrics.metric_tools.MetricQueryResult.data>`: one summary per series,
the points beside them for the chart). The answer leads with one line (CPU
now, its p95 and peak with the peak's time, the trend; memory), then one
bullet per metric, then what stood out, each with its number and time. A
value called "high" is always shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botgateway.tooling import RecentOutcomes, tool_result_body
from tools.demo.metric_questions import METRIC_TOOL, MetricAsk
from tools.demo.question import message_text, since_last_question
from tools.metrics.metric_tools import METRIC_QUERY_KIND

__all__ = [
    "Figures",
    "MetricFindings",
    "compose_metric_answer",
    "metric_results_thought",
    "metric_thought",
    "read_metric_findings",
]

_TOOLS = (METRIC_TOOL, "query_metrics")
_HIGH_PERCENT = 80.0
"""A percentage at or above this is called high (and shown)."""
_LABELS: Mapping[str, tuple[str, str]] = {
    "cpu": ("CPU", "CPU"), "memory": ("memory", "内存"), "net_in": ("network in", "入流量"),
    "net_out": ("network out", "出流量"), "disk_read": ("disk read", "磁盘读"), "disk_write": ("disk write", "磁盘写"),
    "connections": ("connections", "连接数"), "requests": ("requests", "请求数"),
}  # fmt: skip
_TRENDS = {"rising": "上升", "falling": "下降", "flat": "平稳"}


@dataclass(frozen=True)
class Figures:
    """One series' figures, as the tool's data gives them."""

    metric: str
    """Our metric name (``cpu``), or the series' name for a PromQL query."""
    unit: str
    count: int
    last: float
    p95: float
    max: float
    min: float
    max_time: float
    """Unix time of the peak (0 when the points were not carried)."""
    trend: str
    slope_per_hour: float
    changes: tuple[Mapping[str, Any], ...]
    """Notable changes: ``time`` (ISO), ``kind`` (step, spike), ``before``, ``after``."""


@dataclass(frozen=True)
class MetricFindings:
    """What this question's metric calls returned."""

    called: bool = False
    """A metric tool was called for this question."""
    figures: tuple[Figures, ...] = ()
    """Every series read, in the tool's order."""
    window: str = ""
    """The window read (``1h``)."""
    source: str = ""
    """Where the numbers come from, as provenance says it ("Prometheus (query_range)")."""
    notes: tuple[str, ...] = ()
    """The tool's notes (bounds, metrics not read)."""
    failures: tuple[str, ...] = ()
    """Calls that failed, in their own words."""
    charted: bool = False
    """The tool drew a chart that goes with the answer."""


def read_metric_findings(messages: Sequence[Mapping[str, Any]], outcomes: RecentOutcomes | None) -> MetricFindings:
    """The metric tool messages after the last user message, read through the data behind them."""
    since = since_last_question(messages)
    names = {call.get("id"): (call.get("function") or {}).get("name", "")
             for message in since for call in message.get("tool_calls") or ()}
    called, charted = False, False
    figures: list[Figures] = []
    notes: list[str] = []
    failures: list[str] = []
    window, source = "", ""
    for message in since:
        name = str(names.get(message.get("tool_call_id"), ""))
        if message.get("role") != "tool" or not any(name == t or name.endswith(f"_{t}") for t in _TOOLS):
            continue
        called = True
        outcome = outcomes.recall(message_text(message)) if outcomes is not None else None
        if outcome is None or not outcome.ok:
            failures.append(outcome.error if outcome is not None else tool_result_body(message_text(message)).strip())
            continue
        data = outcome.data if isinstance(outcome.data, Mapping) else {}
        if data.get("kind") != METRIC_QUERY_KIND:
            continue
        figures += _figures(data)
        notes += [str(n) for n in data.get("notes") or ()]
        window = window or str(data.get("window") or "")
        if outcome.sources and not source:
            first = outcome.sources[0]
            source = first.label + (f" ({first.api})" if first.api else "")
        charted = charted or bool(getattr(outcome, "artifacts", ()))
    return MetricFindings(called, tuple(figures), window, source, tuple(dict.fromkeys(notes)),
                          tuple(dict.fromkeys(failures)), charted)


def _figures(data: Mapping[str, Any]) -> list[Figures]:
    out = []
    series = list(data.get("series") or ())
    for i, s in enumerate(data.get("summaries") or ()):
        if not s.get("count"):
            continue
        behind = series[i] if i < len(series) else {}  # the summaries and the series come in the same order
        labels, points = behind.get("labels") or {}, behind.get("points") or []
        metric = str(labels.get("__name__") or str(s.get("name") or "").split("{", 1)[0] or s.get("name"))
        try:
            peak = max(points, key=lambda p: float(p[1]), default=(0.0, 0.0))
            out.append(Figures(
                metric, str(s.get("unit") or ""), int(s["count"]), float(s["last"]), float(s["p95"]), float(s["max"]),
                float(s["min"]), float(peak[0]), str(s.get("trend") or "flat"), float(s.get("slope_per_hour") or 0),
                tuple(s.get("changes") or ()),
            ))
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # not the shape this demo knows: say nothing of it rather than guess
    return out


def metric_thought(ask: MetricAsk, zh: bool) -> str:
    """The reasoning before reading the metrics."""
    if zh:
        return f"用户想知道 {ask.subject} 的运行情况。我不应该凭印象回答，先用 resource_metrics 读取最近 {ask.window} 的指标。"
    return (f"The question is how {ask.subject} is doing. I shouldn't guess; I'll read its metrics over the last "
            f"{ask.window} with resource_metrics and answer with the numbers.")


def metric_results_thought(zh: bool) -> str:
    """The reasoning before answering from the figures."""
    if zh:
        return "指标已经返回。我用当前值、p95、峰值及其时间、趋势来回答，说“高”的地方给出数字。"
    return "The figures are in. I'll give the current value, p95, the peak and when, and the trend, with numbers."


def compose_metric_answer(ask: MetricAsk | None, findings: MetricFindings, zh: bool) -> str:
    """A Markdown answer from the figures: a headline, one bullet per metric, what stood out, where it came from."""
    subject = ask.subject if ask is not None else ("该资源" if zh else "the resource")
    window = findings.window or (ask.window if ask is not None else "1h")
    if not findings.figures:
        why = "; ".join(findings.failures + findings.notes) or ("没有数据" if zh else "no data")
        return f"无法读取 **{subject}** 的指标：{why}" if zh else f"I couldn't read the metrics of **{subject}**: {why}"
    figures = _ordered(findings.figures, ask.focus if ask is not None else ())
    head = [_headline(figures[0], zh, full=True)] + [_headline(f, zh, full=False) for f in figures[1:2]]
    if zh:
        lines = [f"**{subject}** 过去 {window}：{'；'.join(head)}。", ""]
    else:
        lines = [f"**{subject}** over the last {window}: {'; '.join(head)}.", ""]
    lines += [_bullet(f, zh) for f in figures]
    notable = [line for f in figures for line in _notable(f, zh)]
    if notable:
        lines += ["", "值得注意：" if zh else "What stood out:", *(f"- {line}" for line in notable)]
    if findings.notes:
        lines += ["", *(("注：" if zh else "Note: ") + note for note in findings.notes)]
    tail = []
    if findings.charted:
        tail.append("图表展示了整个时间窗口。" if zh else "The chart with this answer shows the whole window.")
    if findings.source:
        tail.append(f"数据来源：{findings.source}。" if zh else f"Source: {findings.source}.")
    return "\n".join([*lines, *(["", *tail] if tail else [])]).strip()


def _ordered(figures: Sequence[Figures], focus: Sequence[str]) -> list[Figures]:
    """The metrics the question named first (``net`` names both directions), then the tool's order."""
    def rank(f: Figures) -> int:
        family = next((i for i, name in enumerate(focus) if f.metric == name or f.metric.startswith(f"{name}_")), None)
        return family if family is not None else len(focus)
    return sorted(figures, key=rank)


def _label(metric: str, zh: bool) -> str:
    en, cn = _LABELS.get(metric, (metric, metric))
    return cn if zh else en


def _headline(f: Figures, zh: bool, *, full: bool) -> str:
    label, now, trend = _label(f.metric, zh), _value(f.last, f.unit), _trend(f.trend, zh)
    if not full:
        return f"{label} {now}，{trend}" if zh else f"{label} {now}, {trend}"
    peak = _value(f.max, f.unit) + (f" at {_clock(f.max_time)}" if f.max_time and not zh else "")
    if zh:
        when = f"，{_clock(f.max_time)}" if f.max_time else ""
        return f"{label} 当前 {now}（p95 {_value(f.p95, f.unit)}，最高 {_value(f.max, f.unit)}{when}），{trend}"
    return f"{label} {now} now (p95 {_value(f.p95, f.unit)}, max {peak}), {trend}"


def _bullet(f: Figures, zh: bool) -> str:
    label = _label(f.metric, zh)
    label = label[:1].upper() + label[1:]
    now, p95, peak, trend = _value(f.last, f.unit), _value(f.p95, f.unit), _value(f.max, f.unit), _trend(f.trend, zh)
    if zh:
        return f"- **{label}：** 当前 {now} · p95 {p95} · 最高 {peak} · 最低 {_value(f.min, f.unit)} · {trend}"
    return f"- **{label}:** {now} now · p95 {p95} · max {peak} · min {_value(f.min, f.unit)} · {trend}"


def _notable(f: Figures, zh: bool) -> list[str]:
    """A high percentage with its number and time, then each step or spike with its levels and time."""
    label = _label(f.metric, zh)
    label = label[:1].upper() + label[1:]
    out = []
    if f.unit == "%" and f.max >= _HIGH_PERCENT:
        peak, p95 = _value(f.max, f.unit), _value(f.p95, f.unit)
        if zh:
            when = f"（{_clock(f.max_time)}）" if f.max_time else ""
            out.append(f"{label} 偏高：峰值 {peak}{when}，p95 {p95}")
        else:
            when = f" at {_clock(f.max_time)}" if f.max_time else ""
            out.append(f"{label} ran high: peaked at {peak}{when} (p95 {p95})")
    for change in f.changes:
        before, after = _value(float(change["before"]), f.unit), _value(float(change["after"]), f.unit)
        when = _clock(_parse(str(change.get("time") or "")))
        if zh:
            kind = "尖峰" if change.get("kind") == "spike" else "阶跃"
            out.append(f"{label} {kind} {before} → {after}（{when}）")
        else:
            out.append(f"{label} {change.get('kind', 'change')} {before} → {after} at {when}")
    return out


def _trend(direction: str, zh: bool) -> str:
    return _TRENDS.get(direction, direction) if zh else direction


def _value(value: float, unit: str) -> str:
    """``58.8%``, ``27.6 MB/s``, ``234``: the unit's way of writing a number."""
    if not math.isfinite(value):
        return "?"
    if unit == "%":
        return f"{value:.1f}%"
    if unit in ("B", "B/s"):
        return _scaled(value, ("B", "kB", "MB", "GB", "TB"), 1000) + unit.removeprefix("B")
    if unit == "bit/s":
        return _scaled(value, ("bit/s", "kbit/s", "Mbit/s", "Gbit/s"), 1000)
    if unit == "count":
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def _scaled(value: float, units: Sequence[str], base: int) -> str:
    size = 0
    while abs(value) >= base and size < len(units) - 1:
        value /= base
        size += 1
    return f"{value:.1f} {units[size]}" if size else f"{value:.0f} {units[0]}"


def _parse(iso: str) -> float:
    try:
        return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def _clock(ts: float) -> str:
    """``03:12 UTC``: the hour and minute (the window is recent; the date would be noise)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M UTC") if ts else "?"
