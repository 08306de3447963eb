"""What the demo says, in English or Chinese: the thought of each round, the answer from the findings, the help text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.demo.findings import Findings, HostFacts
from tools.demo.planning import PlannedCall, find_tool
from tools.demo.question import Lookup, analyze_question

__all__ = ["compose_answer", "compose_help", "compose_thought", "help_thought", "results_thought", "widen_thought"]


def compose_thought(lookup: Lookup, calls: Sequence[PlannedCall], zh: bool) -> str:
    """A short, plausible reasoning for round one."""
    names = ", ".join(dict.fromkeys(name for name, _ in calls))
    if lookup.ips:
        what = f"IP address {lookup.ips[0]}" if not zh else f"IP 地址 {lookup.ips[0]}"
    elif lookup.instance_ids:
        what = f"instance id {lookup.instance_ids[0]}" if not zh else f"实例 ID {lookup.instance_ids[0]}"
    elif lookup.hosts:
        what = f"host name {lookup.hosts[0]}" if not zh else f"主机名 {lookup.hosts[0]}"
    else:
        what = "a list of servers" if not zh else "服务器列表"
    if zh:
        parallel = "，并行查询各个云厂商" if len(calls) > 1 else ""
        return f"用户问的是{what}。我不应该猜测，先用 {names} 查一下{parallel}，再根据结果回答。"
    parallel = " in parallel across the configured providers" if len(calls) > 1 else ""
    return f"The question is about {what}. I shouldn't guess; I'll look it up with {names}{parallel} and answer from what the tools return."


def widen_thought(zh: bool) -> str:
    """The reasoning before widening a search that found nothing to ``find_server``."""
    if zh:
        return "按 IP 没查到，我再用 find_server 在所有来源（包括静态清单）里找一下。"
    return ("The per-provider lookups found nothing; I'll widen the search with find_server, "
            "which covers every source including the static inventory.")


def results_thought(zh: bool) -> str:
    """The reasoning before answering from the tool results."""
    if zh:
        return "工具已经返回结果，我来整理主机名、IP、状态和配置。"
    return "The lookup came back. I'll summarize the host, its addresses, status and spec."


def help_thought(zh: bool) -> str:
    """The reasoning when there is nothing to look up."""
    return "用户没有给出要查的主机，我先介绍一下能做什么。" if zh else "No host to look up here; I'll explain what I can do."


def compose_answer(question: str, findings: Findings, zh: bool) -> str:
    """A Markdown answer from the findings, the way a careful model writes it."""
    lookup = analyze_question(question)
    subject = lookup.queries[0] if lookup.queries else ""
    if len(findings.hosts) == 1:
        lines = _one_host(subject, findings.hosts[0], zh)
    elif findings.hosts:
        lines = _many_hosts(subject, findings.hosts, zh)
    elif findings.raw:
        lines = ["工具返回了以下结果：" if zh else "Here is what the lookup returned:", "", "```"]
        lines.extend("\n\n".join(findings.raw).splitlines()[:30])
        lines.append("```")
    else:
        lines = _nothing_found(subject, findings.not_found, zh)
    if findings.failures:
        lines.append("")
        lines.append("⚠️ 部分来源查询失败，结果可能不完整：" if zh else "⚠️ Some sources could not be searched, so this may be incomplete:")
        lines.extend(f"- {f}" for f in findings.failures)
    return "\n".join(lines).strip()


def _one_host(subject: str, h: HostFacts, zh: bool) -> list[str]:
    ident = f" (`{h.instance_id}`)" if h.instance_id else ""
    if zh:
        head = (f"**{subject or h.name}** 是 **{h.name}**{ident}，位于 {h.where}。" if subject
                else f"找到 **{h.name}**{ident}，位于 {h.where}。")
    else:
        head = (f"**{subject}** is **{h.name}**{ident}, in {h.where}." if subject and subject != h.name
                else f"**{h.name}**{ident} is in {h.where}.")
    return [head, "", *_fact_bullets(h, zh)]


def _many_hosts(subject: str, hosts: Sequence[HostFacts], zh: bool) -> list[str]:
    head = f"找到 {len(hosts)} 台服务器：" if zh else f"I found {len(hosts)} servers" + (f" matching **{subject}**:" if subject else ":")
    lines = [head, ""]
    for h in hosts:
        bits = [b for b in (h.status, h.private_ips or h.public_ips, h.spec) if b]
        ident = f" (`{h.instance_id}`)" if h.instance_id else ""
        lines.append(f"- **{h.name}**{ident} · " + " · ".join(bits) + (f" — {h.where}" if h.where else ""))
    return lines


def _nothing_found(subject: str, not_found: Sequence[str], zh: bool) -> list[str]:
    where = "; ".join(not_found)
    if zh:
        return [
            f"没有找到 **{subject}** 对应的服务器" + (f"（{where}）。" if where else "。"),
            "",
            "请确认地址或名称是否正确，或者让我列出所有服务器。",
        ]
    return [
        f"I couldn't find any server matching **{subject}**" + (f" ({where})." if where else "."),
        "",
        "Check the address or name, or ask me to list the servers.",
    ]


def _fact_bullets(h: HostFacts, zh: bool) -> list[str]:
    labels = (
        ("状态", "Status", h.status),
        ("私网 IP", "Private IP", h.private_ips),
        ("公网 IP", "Public IP", h.public_ips),
        ("配置", "Spec", h.spec),
        ("网络", "Network", h.vpc),
        ("标签", "Tags", h.tags),
        ("创建时间", "Created", h.created),
        ("到期时间", "Expires", h.expires),
    )
    return [f"- **{zh_label if zh else en_label}:** {value}" for zh_label, en_label, value in labels if value]


def compose_help(tools: Mapping[str, Any], zh: bool) -> str:
    """What the demo can do, given the tools it is offered."""
    names = ", ".join(f"`{name}`" for name in tools) or ("（没有配置工具）" if zh else "(no tools configured)")
    estate = _estate_examples(tools, zh)
    if zh:
        return (
            "我是 **botgateway 演示模型**，离线运行，用来展示卡片的效果。\n\n"
            "我可以按 IP、实例 ID 或主机名查找服务器，例如：\n"
            "- *10.0.1.100 是哪台服务器？*\n"
            "- *i-bp1abc 的配置是什么？*\n"
            "- *列出已停止的服务器*\n\n"
            f"{estate}可用工具：{names}。\n\n"
            "在 `config.yaml` 里配置 `llm.api_key`（或环境变量）即可换成真正的大模型。"
        )
    return (
        "I'm the **botgateway demo model**: an offline stand-in that shows how the card works.\n\n"
        "I can look servers up by IP, instance id or host name. Try:\n"
        "- *Which server is 10.0.1.100?*\n"
        "- *What is the spec of i-bp1abc?*\n"
        "- *List the stopped servers*\n\n"
        f"{estate}Tools I can use: {names}.\n\n"
        "Set `llm.api_key` in `config.yaml` (or its environment variable) to use a real model."
    )


def _estate_examples(tools: Mapping[str, Any], zh: bool) -> str:
    """Estate questions to try, for the estate tools offered (empty when none is)."""
    examples = (
        ("find_resource", "*10.0.3.7 是什么？*", "*What is 10.0.3.7?*"),
        ("trace", "*api.example.com 后面是什么？*", "*What's behind api.example.com?*"),
        ("resource_changes", "*谁停了 prod-db-03？*", "*Who stopped prod-db-03?*"),
        ("exposed_ports", "*哪个安全组对公网开放了 22 端口？*", "*Which security group opens 22 to the world?*"),
        ("resource_metrics", "*prod-db-01 怎么样？*", "*How is prod-db-01 doing?*"),
    )
    offered = [zh_text if zh else en_text for name, zh_text, en_text in examples if find_tool(tools, name)]
    if not offered:
        return ""
    head = "也可以问整个资源清单（数据库、负载均衡、安全组、DNS、存储桶、Kubernetes、变更记录）：\n" if zh else (
        "I can also answer about the rest of the estate (databases, load balancers, security groups, DNS, buckets, "
        "Kubernetes, changes):\n")
    return head + "".join(f"- {text}\n" for text in offered) + "\n"
