"""What the demo says about the estate, in English or Chinese: the thought before its calls, the answer after them.

Each answer states the facts the tool data holds (kind, name, id, where, state,
the matched address; who, what, when and from where; each open group and
what uses it; names and states) and names the sources that could not be
reached. A trace's answer is :mod:`tools.demo.estate_trace_answer`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.demo.estate_findings import Changed, EstateFindings, Found, Traced
from tools.demo.estate_questions import EstateAsk
from tools.demo.estate_trace_answer import trace_lines
from tools.demo.estate_words import detail_facts, kind_word, listener_text, name_and_id, place, resource_line
from tools.demo.planning import PlannedCall
from tools.estate.reach import world_open_rules
from tools.estate.resource import Change, Resource

__all__ = ["compose_estate_answer", "estate_results_thought", "estate_thought"]

_PAST = {"stop": ("stopped", "停止"), "start": ("started", "启动"), "reboot": ("rebooted", "重启"),
         "delete": ("deleted", "删除"), "create": ("created", "创建")}  # fmt: skip


def estate_thought(ask: EstateAsk, calls: Sequence[PlannedCall], zh: bool) -> str:
    """A short, plausible reasoning for the round that calls the estate tools."""
    tool = ", ".join(dict.fromkeys(name for name, _ in calls))
    subject, kind = ask.subject, kind_word(ask.kind, zh, plural=True) if ask.kind else ""
    port_en = f" on port {ask.port}" if ask.port else ""
    port_zh = f"{ask.port} 端口" if ask.port else ""
    if zh:
        what = {
            "find": f"{subject} 是什么", "trace": f"{subject} 后面的链路" + (f"以及{port_zh}能否从公网访问" if port_zh else ""),
            "changes": f"谁改动了 {subject}", "exposed": f"哪些安全组对公网开放{port_zh}", "list": f"{kind}列表",
            "investigate": f"告警涉及的 {'、'.join(ask.subjects)} 是什么、最近谁改动过",
        }[ask.shape]
        return f"用户问的是{what}。我不应该猜测，先用 {tool} 查一下，再根据返回的数据回答。"
    what = {
        "find": f"what {subject} is" + (f" (a {kind_word(ask.kind, zh)})" if ask.kind else ""),
        "trace": f"what's behind {subject}"
        + (f" and whether port {ask.port} is reachable from the internet" if ask.port else ""),
        "changes": f"who changed {subject}", "exposed": f"which security groups are open to the internet{port_en}",
        "list": f"the {kind}",
        "investigate": f"what the alert's {', '.join(ask.subjects)} {'is' if len(ask.subjects) == 1 else 'are'} "
        "and who changed them lately",
    }[ask.shape]
    return f"The question asks {what}. I shouldn't guess; I'll check with {tool} and answer from the data it returns."


def estate_results_thought(zh: bool) -> str:
    """The reasoning before answering from the estate tools' results."""
    if zh:
        return "工具已经返回结果，我根据数据回答：是什么、在哪里、状态如何，以及哪里有断点或暴露。"
    return ("The tools came back. I'll answer from their data: what it is, where it lives, its state, "
            "and anything broken or exposed.")


def compose_estate_answer(ask: EstateAsk | None, findings: EstateFindings, zh: bool) -> str:
    """A Markdown answer from the estate findings, the way a careful model writes it."""
    shape, subject = (ask.shape, ask.subject) if ask is not None else ("find", "")
    lines: list[str] = []
    for result in findings.results:
        if lines:
            lines.append("")
        if isinstance(result, Traced):
            lines += trace_lines(result, zh)
        elif isinstance(result, Changed):
            lines += _changes_lines(result, ask.verb if ask is not None else "", zh)
        elif shape == "exposed":
            lines += _exposed_lines(result, ask.port if ask is not None else None, zh)
        elif shape == "list":
            lines += _list_lines(result, ask, zh)
        else:
            lines += _find_lines(result.query or subject if shape == "investigate" else subject, result, zh)
    if not findings.results and findings.raw:
        lines += ["工具返回了以下结果：" if zh else "Here is what the lookup returned:", "", "```"]
        lines += [*"\n\n".join(findings.raw).splitlines()[:30], "```"]
    elif not findings.results:
        what = f" **{subject}**" if subject else ""
        lines.append(f"无法查询{what}：所有来源都没有应答。" if zh else f"I couldn't look up{what}: no source answered.")
    if findings.failures:
        warn = "⚠️ 部分来源无法访问，结果可能不完整：" if zh else "⚠️ Some sources could not be reached, so this may be incomplete:"
        lines += ["", warn]
        lines += [f"- {failure}" for failure in findings.failures]
    cut = [c for r in findings.results if isinstance(r, Found) for c in r.cut]
    if cut:
        said = "部分列表达到上限被截断：" if zh else "Some listings were cut at their bound (more exist): "
        lines += ["", said + "; ".join(cut)]
    return "\n".join(lines).strip()


def _find_lines(subject: str, found: Found, zh: bool) -> list[str]:
    if not found.resources:
        who = ("你有权查看的" if zh else " that you may see") if found.scoped else ""
        if zh:
            return [f"没有找到{who}与 **{subject}** 匹配的资源。", "", "请确认地址或名称，或者让我列出某类资源（例如 *列出负载均衡*）。"]
        return [f"I couldn't find anything{who} matching **{subject}**.", "",
                "Check the address or name, or ask me to list a kind (*list the load balancers*)."]
    first = found.resources[0]
    if len(found.resources) == 1 or _exact(subject, first):
        lines = _one_resource(subject, first, found.why[0] if found.why else "", zh)
        if len(found.resources) > 1:
            lines += ["", "相关资源：" if zh else "Related:"]
            pairs = zip(found.resources[1:], found.why[1:], strict=False)
            lines += [f"- {resource_line(r, zh)} — {why}" for r, why in pairs]
        return lines
    shown = len(found.resources)
    more = (f"（显示前 {shown} 个）" if zh else f" (showing the first {shown})") if shown < found.total else ""
    if zh:
        head = f"找到 {found.total} 个与 **{subject}** 匹配的资源{more}："
    else:
        head = f"I found {found.total} resources matching **{subject}**{more}:"
    matched = "匹配" if zh else "matched"
    pairs = zip(found.resources, found.why, strict=False)
    return [head, "", *(f"- {resource_line(r, zh)} — {matched}: {why}" for r, why in pairs)]


def _one_resource(subject: str, r: Resource, why: str, zh: bool) -> list[str]:
    kind, where = kind_word(r.kind, zh), place(r.provider, r.account, r.region)
    exact = _exact(subject, r)
    if zh:
        head = (f"**{subject}** 是{kind} {name_and_id(r)}，位于 {where}。" if exact
                else f"与 **{subject}** 匹配的{kind}是 {name_and_id(r)}，位于 {where}。")
    else:
        head = (f"**{subject}** is the {kind} {name_and_id(r)}, in {where}." if exact
                else f"The {kind} matching **{subject}** is {name_and_id(r)}, in {where}.")
    rows = [
        ("类型", "Kind", kind), ("状态", "State", r.state), ("匹配", "Matched", why), ("详情", "Details", detail_facts(r, zh)),
        ("私网 IP", "Private IP", ", ".join(r.private_ips)), ("公网 IP", "Public IP", ", ".join(r.public_ips)),
        ("域名", "DNS names", ", ".join(r.dns_names) if r.kind != "dns_record" else ""),
        ("监听", "Listeners", "; ".join(listener_text(li, zh) for li in r.listeners)),
        ("规则", "Rules", "; ".join(rule.render() for rule in r.rules[:8])),
        ("对公网开放", "Open to the internet", "; ".join(rule.render() for rule in world_open_rules(r))),
        ("安全组", "Security groups", ", ".join(link.target for link in r.links_of("security_group"))),
        ("绑定到", "Attached to", ", ".join(link.target for link in r.links_of("attached_to"))),
        ("所在节点", "Runs on", ", ".join(link.target for link in r.links_of("runs_on"))),
        ("负责人", "Owner", r.owner), ("标签", "Tags", ", ".join(f"{k}={v}" if v else k for k, v in sorted(r.tags.items()))),
    ]  # fmt: skip
    return [head, "", *(f"- **{zh_label if zh else en_label}:** {value}" for zh_label, en_label, value in rows
                        if value)]


def _exact(subject: str, r: Resource) -> bool:
    """Whether ``subject`` is the resource's own address, id or name (not a fragment of it)."""
    return subject.lower() in {a.lower() for a in (*r.addresses, r.id, r.name)}


def _list_lines(found: Found, ask: EstateAsk | None, zh: bool) -> list[str]:
    kind = ask.kind if ask is not None and ask.kind else (found.resources[0].kind if found.resources else "")
    kinds = kind_word(kind, zh, plural=True)
    state = ask.state if ask is not None else ""
    if not found.resources:
        if zh:
            return [f"没有找到{('状态为 ' + state + ' 的') if state else ''}{kinds}。"]
        return [f"I found no {state + ' ' if state else ''}{kinds}."]
    shown = len(found.resources)
    more = (f"（显示前 {shown} 个）" if zh else f" (showing the first {shown})") if shown < found.total else ""
    in_state = f"{state} " if state else ""
    head = f"共 {found.total} 个{state}{kinds}{more}：" if zh else f"{found.total} {in_state}{kinds}{more}:"
    lines = [head, "", *(f"- {resource_line(r, zh, kind=False)}" for r in found.resources)]
    if ask is not None and ask.public:
        lines = [_public_line(found.resources, kinds, zh), "", *lines]
    return lines


def _public_line(resources: Sequence[Resource], kinds: str, zh: bool) -> str:
    public = [r for r in resources if r.details.get("public") == "yes"]
    unknown = [r for r in resources if not r.details.get("public")]
    names = ", ".join(name_and_id(r) for r in public)
    if zh:
        if public:
            text = f"{len(resources)} 个{kinds}中有 {len(public)} 个是公开的：{names}。"
        else:
            text = f"{len(resources)} 个{kinds}都不是公开的。"
        return text + (f"（{len(unknown)} 个无法判断）" if unknown else "")
    if public:
        text = f"{len(public)} of the {len(resources)} {kinds} {'is' if len(public) == 1 else 'are'} public: {names}."
    else:
        text = f"None of the {len(resources)} {kinds} is public."
    return text + (f" ({len(unknown)} could not be told.)" if unknown else "")


def _exposed_lines(found: Found, port: int | None, zh: bool) -> list[str]:
    groups = [(r, why) for r, why in zip(found.resources, found.why, strict=False)
              if r.kind == "security_group" and world_open_rules(r, port)]
    on_port = (f"的 {port} 端口" if zh else f" on port {port}") if port else ""
    if not groups:
        if zh:
            return [f"没有安全组对整个公网 (0.0.0.0/0) 开放{on_port}。"]
        return [f"No security group lets the whole internet (0.0.0.0/0) in{on_port}."]
    if zh:
        head = f"{len(groups)} 个安全组对整个公网 (0.0.0.0/0) 开放{on_port}："
    else:
        groups_let = "1 security group lets" if len(groups) == 1 else f"{len(groups)} security groups let"
        head = f"{groups_let} the whole internet (0.0.0.0/0) in{on_port}:"
    lines = [head, ""]
    for group, why in groups:
        rules = world_open_rules(group, port)
        text = f"- {name_and_id(group)}, {place(group.provider, group.account, group.region)}: "
        text += ", ".join(f"`{rule.render()}`" for rule in rules)
        notes = [rule.description for rule in rules if rule.description]
        if notes:
            text += f"（{'; '.join(notes)}）" if zh else f" ({'; '.join(notes)})"
        if why and why != "listed":
            text += f" — {why}"
        lines.append(text)
    return lines


def _when(iso: str) -> str:
    """``2026-11-30T02:14:09Z`` → ``2026-11-30 02:14:09 UTC``."""
    return iso.replace("T", " ").removesuffix("Z") + " UTC" if iso.endswith("Z") else iso


def _changes_lines(changed: Changed, verb: str, zh: bool) -> list[str]:
    subject, since = changed.subject, _when(changed.since)
    lines: list[str] = []
    if not changed.changes:
        none = f"自 {since} 以来没有 **{subject}** 的变更记录。" if zh else f"No recorded change of **{subject}** since {since}."
        lines.append(none)
    else:
        asked = next((c for c in changed.changes if verb and verb in c.action.lower()), None)
        lines.append(_change_headline(subject, asked or changed.changes[0], verb if asked else "", zh))
    r = changed.resource
    if r is not None:
        lines.append(_resolved_line(subject, r, zh))
    if changed.changes:
        count = len(changed.changes)
        if zh:
            head = f"自 {since} 以来共 {count} 条变更记录（最新在前）："
        else:
            head = f"All {count} recorded changes since {since}, newest first:"
            if count == 1:
                head = f"The one recorded change since {since}:"
        lines += ["", head, *(_change_row(c, zh) for c in changed.changes)]
    return lines


def _resolved_line(subject: str, r: Resource, zh: bool) -> str:
    """What the changed resource is and its state now: "**prod-db-03** is a server in …, now **stopped**."."""
    kind, where = kind_word(r.kind, zh), place(r.provider, r.account, r.region)
    same = subject.lower() in (r.name.lower(), r.id.lower()) and (not r.name or r.name == r.id or subject == r.name)
    if zh:
        text = f"**{subject}** 是{kind}" + ("" if same else f" {name_and_id(r)}") + f"，位于 {where}"
        return text + (f"，当前状态 **{r.state}**。" if r.state else "。")
    text = f"**{subject}** is " + (f"a {kind}" if same else f"the {kind} {name_and_id(r)}") + f" in {where}"
    return text + (f", now **{r.state}**." if r.state else ".")


def _change_headline(subject: str, c: Change, verb: str, zh: bool) -> str:
    who = c.principal or ("未知" if zh else "unknown")
    origin = (f"，来源 IP {c.source_ip}" if zh else f" from {c.source_ip}") if c.source_ip else ""
    failed = ""
    if c.outcome and c.outcome != "success":
        failed = f"（调用失败：{c.outcome}）" if zh else f" (the call failed: {c.outcome})"
    if zh:
        did = f"是 **{who}** {_PAST[verb][1]}了 **{subject}**" if verb in _PAST else f"**{subject}** 最近一次变更由 **{who}** 执行"
        return f"{did}：`{c.action}`，时间 {_when(c.time)}{origin}{failed}。"
    if verb in _PAST:
        did = f"**{who}** {_PAST[verb][0]} **{subject}**"
    else:
        did = f"The latest change to **{subject}** was made by **{who}**"
    return f"{did}: `{c.action}` at {_when(c.time)}{origin}{failed}."


def _change_row(c: Change, zh: bool) -> str:
    who = f"由 **{c.principal or '未知'}** 执行" if zh else f"by **{c.principal or 'unknown'}**"
    row = f"- {_when(c.time)} · `{c.action}` {who}"
    if c.source_ip:
        row += f"，来源 {c.source_ip}" if zh else f" from {c.source_ip}"
    if c.outcome and c.outcome != "success":
        row += f"（失败：{c.outcome}）" if zh else f" (failed: {c.outcome})"
    row += f" · {place(c.provider, c.account, c.region)}"
    return row + (f" — {c.detail}" if c.detail else "")
