"""What the demo says about a traced chain: where it leads, the chain in order, breaks, open ports, the verdict."""

from __future__ import annotations

from tools.demo.estate_findings import Traced, TraceHop
from tools.demo.estate_words import kind_word, name_and_id, resource_line
from tools.estate.resource import kind_label

__all__ = ["MAX_HOPS_SHOWN", "trace_lines"]

MAX_HOPS_SHOWN = 40
"""Hops the answer lists; a longer chain says how many more there are (the card shows the whole walk)."""

_SHOWN_ABOVE = "shown above"


def trace_lines(traced: Traced, zh: bool) -> list[str]:
    """The answer to "what's behind X?", "why is X down?" or "is port N of X reachable?" from one walk."""
    target = traced.target
    if not traced.hops:
        if zh:
            return [f"无法追踪 **{target}**：清单里没有任何资源对应它。"]
        return [f"I couldn't trace **{target}**: nothing in the estate answers to it."]
    lines = [_headline(traced, zh)]
    if traced.reach and traced.port is not None:
        lines += ["", _reach_line(traced.reach, zh)]
    lines += ["", "**链路：**" if zh else "**Path:**", *(_hop_line(hop, zh) for hop in traced.hops[:MAX_HOPS_SHOWN])]
    hidden = len(traced.hops) - MAX_HOPS_SHOWN
    if hidden > 0:
        lines.append(f"- …还有 {hidden} 跳" if zh else f"- … {hidden} more hops")
    opened = [(hop, flag) for hop in traced.hops for flag in hop.flags if flag != _SHOWN_ABOVE]
    if opened:
        lines += ["", "⚠️ **对公网开放：**" if zh else "⚠️ **Open to the internet:**"]
        lines += [f"- {_who(hop)}: {flag}" for hop, flag in opened]
    if traced.reach and traced.port is None:
        lines += ["", _reach_line(traced.reach, zh)]
    return lines


def _headline(traced: Traced, zh: bool) -> str:
    first = traced.hops[0].resource
    entry = next((h.resource for h in traced.hops if h.resource is not None and h.resource.kind != "dns_record"), None)
    leads = ""
    if first is not None and first.kind == "dns_record" and entry is not None:
        kind = kind_word(entry.kind, zh)
        if zh:
            leads = f"**{traced.target}** 指向{kind} {name_and_id(entry)}。"
        else:
            leads = f"**{traced.target}** leads to {kind} {name_and_id(entry)}. "
    problems = "; ".join(traced.problems)
    if zh:
        verdict = f"链路有断点：{problems}。" if problems else "链路上没有发现断点。"
    else:
        verdict = f"The path is broken: {problems}." if problems else "I found no break on the path."
    return leads + verdict


def _reach_line(reach: str, zh: bool) -> str:
    return f"**从公网 (0.0.0.0/0) 访问：** {reach}" if zh else f"**From the internet (0.0.0.0/0):** {reach}"


def _who(hop: TraceHop) -> str:
    return name_and_id(hop.resource) if hop.resource is not None else hop.label


def _hop_line(hop: TraceHop, zh: bool) -> str:
    """One hop as a nested bullet: how it was reached, what it is, and its break or warning."""
    r = hop.resource
    if r is None:
        what = hop.label
    elif r.kind == "dns_record":
        what = f"{kind_word(r.kind, zh)} `{r.name}` {r.details.get('type', '')} → `{r.details.get('value', '')}`"
    else:
        # "security group: web-servers", not "security group: security group web-servers"
        named = hop.via != kind_label(r.kind)
        if _SHOWN_ABOVE in hop.flags:
            above = "见上文" if zh else "shown above"
            what = (f"{kind_word(r.kind, zh)} " if named else "") + f"{name_and_id(r)} ({above})"
        else:
            what = resource_line(r, zh, kind=named)
    text = what if hop.via == "start" else f"{hop.via}: {what}"
    if hop.problem:
        text += f" ✗ **{hop.problem}**"
    if any(flag != _SHOWN_ABOVE for flag in hop.flags):
        text += " ⚠️"
    return "  " * hop.depth + "- " + text
