"""The demo model: an offline stand-in LLM so a new user sees the whole card with no account.

``llm.provider: demo`` (or ``auto`` without a key) starts the scripted
OpenAI-compatible server in-process with :class:`DemoResponder` deciding each
answer. It behaves like a small tool-using model: it streams a short thought,
looks up any IP, instance id or host name in the question with the inventory
tools it is offered (the per-provider IP lookups in parallel when two or more
providers are configured, else ``find_server``), then streams a Markdown answer
composed from the tool results. Anything else gets a short note on what it can
do. It never pretends to be a real model: the card footer labels it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from botgateway.config import Config
    from tools.demo.server import Script

log = structlog.get_logger(__name__)

IP_LOOKUPS = ("search_ecs_by_ip", "search_cvm_by_ip", "search_ec2_by_ip")
"""Per-provider IP lookup tools, in the order the demo prefers them."""

_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])")
_INSTANCE_ID = re.compile(r"\b(?:i-[0-9a-z]{6,}|ins-[0-9a-z]{6,})\b", re.IGNORECASE)
_HOSTNAME = re.compile(r"\b[a-z][a-z0-9]*(?:[-.][a-z0-9]+)+\b", re.IGNORECASE)
_BY_IP = re.compile(r"(?:^|_)search_\w+_by_ip$")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LIST_WORDS = re.compile(r"\b(list|show all|which servers|what servers|stopped|running)\b|列出|哪些|已停止|停止的|运行中", re.IGNORECASE)
_STATUS_WORDS = {"stopped": "stopped", "已停止": "stopped", "停止的": "stopped", "running": "running", "运行中": "running"}

CHARS_PER_CHUNK = 4
"""Characters per streamed chunk: small enough that the card visibly types."""
CHUNK_DELAY_S = 0.03
"""Pause between chunks (~130 characters a second, a brisk real model)."""


@dataclass(frozen=True)
class Lookup:
    """What the demo decided to look up in a question."""

    ips: tuple[str, ...] = ()
    """IPv4 addresses in the question."""
    instance_ids: tuple[str, ...] = ()
    """Instance ids (``i-…``, ``ins-…``)."""
    hosts: tuple[str, ...] = ()
    """Host names (known ones, or name-like tokens with a digit)."""
    list_status: str | None = None
    """``running``/``stopped`` when the question asks for a list by state."""
    wants_list: bool = False
    """The question asks for a list of servers."""

    @property
    def queries(self) -> tuple[str, ...]:
        """Everything to look up, in question order by kind."""
        return self.ips + self.instance_ids + self.hosts


@dataclass(frozen=True)
class HostFacts:
    """One server as read back from a tool result line."""

    name: str
    """Host name."""
    instance_id: str = ""
    """Instance id, when different from the name."""
    where: str = ""
    """Provider and region/zone."""
    status: str = ""
    """running, stopped…"""
    spec: str = ""
    """Type, CPU/memory, OS."""
    private_ips: str = ""
    """Private addresses."""
    public_ips: str = ""
    """Public addresses."""
    vpc: str = ""
    """Network."""
    tags: str = ""
    """Tags."""
    extra: tuple[str, ...] = ()
    """Other fields (created, expires)."""


@dataclass
class ToolResults:
    """The tool messages of the current question, read back."""

    hosts: list[HostFacts] = field(default_factory=list)
    """Every server found, deduplicated by name and id."""
    not_found: list[str] = field(default_factory=list)
    """Lookups that found nothing ("ip 10.0.1.100 (searched: AWS)")."""
    failures: list[str] = field(default_factory=list)
    """Tools or providers that failed, in their own words."""
    raw: list[str] = field(default_factory=list)
    """Results the demo could not read as server lines (quoted as they are)."""


def analyze_question(text: str, known_hosts: Iterable[str] = ()) -> Lookup:
    """Find what to look up in ``text``."""
    ips = tuple(dict.fromkeys(_IPV4.findall(text)))
    ids = tuple(dict.fromkeys(m.group(0) for m in _INSTANCE_ID.finditer(text)))
    known = {h.lower(): h for h in known_hosts if h}
    hosts: list[str] = []
    for match in _HOSTNAME.finditer(text):
        token = match.group(0).strip(".")
        lowered = token.lower()
        if token in ids or _IPV4.fullmatch(token) or lowered in (h.lower() for h in hosts):
            continue
        if lowered in known or (any(c.isdigit() for c in token) and "-" in token):
            hosts.append(known.get(lowered, token))
    # a known host name written without digits or dashes ("bastion")
    for word in re.findall(r"[A-Za-z][\w-]*", text):
        if word.lower() in known and known[word.lower()] not in hosts and word not in ids:
            hosts.append(known[word.lower()])
    status = next((v for k, v in _STATUS_WORDS.items() if re.search(rf"\b{k}\b" if k.isascii() else k, text, re.IGNORECASE)), None)
    return Lookup(ips, ids, tuple(hosts), status, bool(_LIST_WORDS.search(text)))


def load_known_hosts(path: str | Path) -> list[str]:
    """Host names in an inventory file (YAML or CSV), read generically; empty when unreadable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    names: list[str] = []
    if path.suffix.lower() == ".csv":
        import csv
        import io

        for row in csv.DictReader(io.StringIO(text)):
            for key in ("name", "hostname", "host"):
                if row.get(key):
                    names.append(row[key].strip())
        return names
    try:
        import yaml

        data = yaml.safe_load(text)
    except Exception:
        return []

    def walk(node: Any, in_list: bool) -> None:
        # host entries are list items; a top-level ``name:`` labels the inventory itself
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in ("name", "hostname", "host") and isinstance(value, str):
                    if in_list:
                        names.append(value.strip())
                else:
                    walk(value, False)
        elif isinstance(node, list):
            for item in node:
                walk(item, True)

    walk(data, False)
    return names


def offered_tools(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The request's tools by name → their JSON schema."""
    tools: dict[str, Mapping[str, Any]] = {}
    for spec in body.get("tools") or ():
        function = spec.get("function") or {}
        if function.get("name"):
            tools[function["name"]] = function.get("parameters") or {}
    return tools


def _find_tool(tools: Mapping[str, Any], name: str) -> str | None:
    """``name`` itself, or a namespaced variant (``mcp_ops__find_server``)."""
    if name in tools:
        return name
    return next((t for t in tools if t.endswith(f"_{name}") or t.endswith(f".{name}")), None)


def _first_param(schema: Mapping[str, Any], preferred: Sequence[str]) -> str:
    props = schema.get("properties") or {}
    for name in preferred:
        if name in props:
            return name
    required = schema.get("required") or []
    if required:
        return required[0]
    return next(iter(props), preferred[0])


def plan_tool_calls(lookup: Lookup, tools: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls a careful model would make for ``lookup`` with these ``tools``."""
    calls: list[tuple[str, dict[str, Any]]] = []
    by_ip = [name for want in IP_LOOKUPS if (name := _find_tool(tools, want))]
    by_ip += [name for name in tools if _BY_IP.search(name) and name not in by_ip]
    finder = _find_tool(tools, "find_server")
    lister = _find_tool(tools, "list_servers")
    for ip in lookup.ips:
        if len(by_ip) >= 2 or (by_ip and not finder):
            # two providers configured: ask each in parallel, as a real model would
            for name in by_ip:
                calls.append((name, {_first_param(tools[name], ("ip",)): ip}))
        elif finder:
            calls.append((finder, {_first_param(tools[finder], ("query",)): ip}))
    for query in lookup.instance_ids + lookup.hosts:
        if finder:
            calls.append((finder, {_first_param(tools[finder], ("query",)): query}))
    if not calls and lookup.wants_list and lister:
        args: dict[str, Any] = {}
        props = tools[lister].get("properties") or {}
        if lookup.list_status and "status" in props:
            args["status"] = lookup.list_status
        if "limit" in props:
            args["limit"] = 20
        calls.append((lister, args))
    return calls


def _split_facts(line: str) -> HostFacts | None:
    """Parse one ``- name [id] | where | status | spec | private … | public …`` line."""
    parts = [p.strip() for p in line.lstrip("-• ").split(" | ")]
    if len(parts) < 3:
        return None
    head, where, status, rest = parts[0], parts[1], parts[2], parts[3:]
    match = re.match(r"^(.*?)\s*\[([^\]]+)\]$", head)
    name, instance_id = (match.group(1), match.group(2)) if match else (head, "")
    facts: dict[str, Any] = {"spec": "", "private_ips": "", "public_ips": "", "vpc": "", "tags": ""}
    extra: list[str] = []
    for part in rest:
        for prefix, key in (("private ", "private_ips"), ("public ", "public_ips"), ("vpc ", "vpc"), ("tags ", "tags")):
            if part.startswith(prefix):
                facts[key] = part[len(prefix):]
                break
        else:
            if part.startswith(("created ", "expires ")):
                extra.append(part)
            elif not facts["spec"]:
                facts["spec"] = part
            else:
                extra.append(part)
    facts["tags"] = ", ".join(t.strip() for t in facts["tags"].split(",") if t.strip())
    return HostFacts(name=name, instance_id=instance_id, where=_tidy_where(where), status=status, extra=tuple(extra), **facts)


def _tidy_where(where: str) -> str:
    """``Static inventory account=on-prem idc-shanghai/A03`` → ``Static inventory (on-prem), idc-shanghai/A03``."""
    match = re.match(r"^(.*?)(?: account=(\S+))? (\S+)$", where)
    if not match:
        return where
    label, account, region = match.groups()
    return f"{label}{f' ({account})' if account else ''}, {region}"


def read_tool_results(messages: Sequence[Mapping[str, Any]]) -> ToolResults:
    """Read the tool messages that follow the last user message."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    results = ToolResults()
    seen: set[tuple[str, str]] = set()
    for message in messages[last_user + 1 :]:
        if message.get("role") != "tool":
            continue
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        content = str(content)
        if content.startswith("Error:"):
            results.failures.append(content.removeprefix("Error:").strip())
            continue
        readable = False
        in_failures = False
        for line in content.splitlines():
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("No instance matches"):
                searched = re.search(r"\(searched: ([^)]*)\)", stripped)
                results.not_found.append(f"searched: {searched.group(1)}" if searched else stripped.rstrip("."))
                readable = True
            elif stripped.startswith("Could not search"):
                in_failures = True
                readable = True
            elif stripped.startswith("- ") and in_failures:
                results.failures.append(stripped[2:])
            elif stripped.startswith("- "):
                facts = _split_facts(stripped)
                if facts is not None:
                    readable = True
                    key = (facts.name, facts.instance_id)
                    if key not in seen:
                        seen.add(key)
                        results.hosts.append(facts)
            elif re.match(r"^\d+ instances? match", stripped):
                readable = True
        if not readable:
            results.raw.append(content.strip())
    return results


def _zh(text: str) -> bool:
    return bool(_CJK.search(text))


def compose_thought(lookup: Lookup, calls: Sequence[tuple[str, dict[str, Any]]], zh: bool) -> str:
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


def compose_answer(question: str, results: ToolResults, zh: bool) -> str:
    """A Markdown answer from the tool results, the way a careful model writes it."""
    lines: list[str] = []
    hosts = results.hosts
    lookup = analyze_question(question)
    subject = lookup.queries[0] if lookup.queries else ""
    if len(hosts) == 1:
        h = hosts[0]
        ident = f" (`{h.instance_id}`)" if h.instance_id else ""
        if zh:
            lines.append(f"**{subject or h.name}** 是 **{h.name}**{ident}，位于 {h.where}。" if subject else f"找到 **{h.name}**{ident}，位于 {h.where}。")
        else:
            lines.append(f"**{subject}** is **{h.name}**{ident}, in {h.where}." if subject and subject != h.name else f"**{h.name}**{ident} is in {h.where}.")
        lines.append("")
        lines.extend(_fact_bullets(h, zh))
    elif hosts:
        head = f"找到 {len(hosts)} 台服务器：" if zh else f"I found {len(hosts)} servers" + (f" matching **{subject}**:" if subject else ":")
        lines.append(head)
        lines.append("")
        for h in hosts:
            bits = [b for b in (h.status, h.private_ips or h.public_ips, h.spec) if b]
            ident = f" (`{h.instance_id}`)" if h.instance_id else ""
            lines.append(f"- **{h.name}**{ident} · " + " · ".join(bits) + (f" — {h.where}" if h.where else ""))
    elif results.raw:
        lines.append("工具返回了以下结果：" if zh else "Here is what the lookup returned:")
        lines.append("")
        lines.append("```")
        lines.extend("\n\n".join(results.raw).splitlines()[:30])
        lines.append("```")
    else:
        where = "; ".join(results.not_found)
        if zh:
            lines.append(f"没有找到 **{subject}** 对应的服务器" + (f"（{where}）。" if where else "。"))
            lines.append("")
            lines.append("请确认地址或名称是否正确，或者让我列出所有服务器。")
        else:
            lines.append(f"I couldn't find any server matching **{subject}**" + (f" ({where})." if where else "."))
            lines.append("")
            lines.append("Check the address or name, or ask me to list the servers.")
    if results.failures:
        lines.append("")
        lines.append("⚠️ 部分来源查询失败，结果可能不完整：" if zh else "⚠️ Some sources could not be searched, so this may be incomplete:")
        lines.extend(f"- {f}" for f in results.failures)
    return "\n".join(lines).strip()


def _fact_bullets(h: HostFacts, zh: bool) -> list[str]:
    labels = (
        ("状态", "Status", h.status),
        ("私网 IP", "Private IP", h.private_ips),
        ("公网 IP", "Public IP", h.public_ips),
        ("配置", "Spec", h.spec),
        ("网络", "Network", h.vpc),
        ("标签", "Tags", h.tags),
    )
    out = [f"- **{zh_label if zh else en_label}:** {value}" for zh_label, en_label, value in labels if value]
    for item in h.extra:
        key, _, value = item.partition(" ")
        label = {"created": ("创建时间", "Created"), "expires": ("到期时间", "Expires")}.get(key)
        out.append(f"- **{label[0] if zh else label[1]}:** {value}" if label and value else f"- {item}")
    return out


def compose_help(tools: Mapping[str, Any], zh: bool) -> str:
    """What the demo can do, given the tools it is offered."""
    names = ", ".join(f"`{name}`" for name in tools) or ("（没有配置工具）" if zh else "(no tools configured)")
    if zh:
        return (
            "我是 **botgateway 演示模型**，离线运行，用来展示卡片的效果。\n\n"
            "我可以按 IP、实例 ID 或主机名查找服务器，例如：\n"
            "- *10.0.1.100 是哪台服务器？*\n"
            "- *i-bp1abc 的配置是什么？*\n"
            "- *列出已停止的服务器*\n\n"
            f"可用工具：{names}。\n\n"
            "在 `config.yaml` 里配置 `llm.api_key`（或环境变量）即可换成真正的大模型。"
        )
    return (
        "I'm the **botgateway demo model**: an offline stand-in that shows how the card works.\n\n"
        "I can look servers up by IP, instance id or host name. Try:\n"
        "- *Which server is 10.0.1.100?*\n"
        "- *What is the spec of i-bp1abc?*\n"
        "- *List the stopped servers*\n\n"
        f"Tools I can use: {names}.\n\n"
        "Set `llm.api_key` in `config.yaml` (or its environment variable) to use a real model."
    )


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content") or ""
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            return str(content)
    return ""


def _estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return max(1, len(text) // 4)


def is_summary_request(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True for the history-compression request :mod:`botgateway.memory` sends."""
    from botgateway.memory import SUMMARY_INSTRUCTION

    opening = SUMMARY_INSTRUCTION.split(".", 1)[0]
    return bool(messages) and messages[0].get("role") == "system" and str(messages[0].get("content", "")).startswith(opening)


def compose_summary(messages: Sequence[Mapping[str, Any]]) -> str:
    """A deterministic running summary: the previous one plus the questions asked and hosts named.

    The demo model cannot condense prose, but it keeps what later questions rely on.
    """
    request = str(messages[-1].get("content", "")) if messages else ""
    previous, _, transcript = request.partition("New part of the conversation:")
    previous = previous.removeprefix("Previous summary:").strip()
    lines = [] if previous in ("", "(none)") else [previous]
    found = sorted(set(_IPV4.findall(transcript)))
    if found:
        lines.append("Addresses discussed: " + ", ".join(found))
    questions = [line.removeprefix("User: ").strip() for line in transcript.splitlines() if line.startswith("User: ")]
    if questions:
        lines.append("Questions asked: " + "; ".join(q if len(q) <= 60 else q[:59] + "…" for q in questions[-10:]))
    return "\n".join(lines) or "Nothing to keep from the earlier conversation."


class DemoResponder:
    """Decides the demo model's streamed reply to one chat-completions request."""

    def __init__(
        self,
        *,
        known_hosts: Iterable[str] = (),
        chunk_chars: int = CHARS_PER_CHUNK,
        delay_s: float = CHUNK_DELAY_S,
    ) -> None:
        self.known_hosts = tuple(known_hosts)
        self.chunk_chars = chunk_chars
        self.delay_s = delay_s
        self._call_seq = 0

    def _widen_search(
        self,
        question: str,
        since_question: Sequence[Mapping[str, Any]],
        tools: Mapping[str, Mapping[str, Any]],
        results: ToolResults | None,
    ) -> tuple[str, dict[str, Any]] | None:
        """find_server for the question when the per-provider lookups found nothing and it was not tried yet."""
        if results is None or results.hosts:
            return None
        finder = _find_tool(tools, "find_server")
        lookup = analyze_question(question, self.known_hosts)
        if finder is None or not lookup.queries:
            return None
        called = {
            (call.get("function") or {}).get("name")
            for message in since_question
            for call in message.get("tool_calls") or ()
        }
        if finder in called:
            return None
        return finder, {_first_param(tools[finder], ("query",)): lookup.queries[0]}

    def __call__(self, body: Mapping[str, Any]) -> Script:
        """The script answering ``body`` (an OpenAI chat-completions request)."""
        from tools.demo import server as ss

        messages = body.get("messages") or []
        if is_summary_request(messages):
            return ss.Script(chunks=[ss.role_chunk(), *ss.text_chunks(compose_summary(messages), size=64), ss.finish_chunk("stop")])
        question = _last_user_text(messages)
        zh = _zh(question)
        tools = offered_tools(body)
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        has_results = any(m.get("role") == "tool" for m in messages[last_user + 1 :])
        prompt_tokens = _estimate_tokens(messages) + _estimate_tokens(body.get("tools") or [])

        chunks: list[Any] = [ss.role_chunk()]
        finish = "stop"
        results = read_tool_results(messages) if has_results else None
        widen = self._widen_search(question, messages[last_user + 1 :], tools, results)
        if widen:
            thought = (
                "按 IP 没查到，我再用 find_server 在所有来源（包括静态清单）里找一下。"
                if zh
                else "The per-provider lookups found nothing; I'll widen the search with find_server, which covers every source including the static inventory."
            )
            chunks += ss.reasoning_chunks(thought, size=self.chunk_chars * 2)
            self._call_seq += 1
            chunks += ss.tool_call_chunks([(f"call_demo_{self._call_seq}", widen[0], widen[1])])
            finish = "tool_calls"
            completion = _estimate_tokens(thought) + _estimate_tokens(widen)
        elif results is not None:
            thought = (
                "工具已经返回结果，我来整理主机名、IP、状态和配置。"
                if zh
                else "The lookup came back. I'll summarize the host, its addresses, status and spec."
            )
            answer = compose_answer(question, results, zh)
            chunks += ss.reasoning_chunks(thought, size=self.chunk_chars * 2)
            chunks += ss.text_chunks(answer, size=self.chunk_chars)
            completion = _estimate_tokens(thought + answer)
        else:
            lookup = analyze_question(question, self.known_hosts)
            calls = plan_tool_calls(lookup, tools) if tools else []
            if calls:
                thought = compose_thought(lookup, calls, zh)
                chunks += ss.reasoning_chunks(thought, size=self.chunk_chars * 2)
                planned = []
                for name, args in calls:
                    self._call_seq += 1
                    planned.append((f"call_demo_{self._call_seq}", name, args))
                chunks += ss.tool_call_chunks(planned)
                finish = "tool_calls"
                completion = _estimate_tokens(thought) + _estimate_tokens(planned)
            else:
                thought = "用户没有给出要查的主机，我先介绍一下能做什么。" if zh else "No host to look up here; I'll explain what I can do."
                answer = compose_help(tools, zh)
                chunks += ss.reasoning_chunks(thought, size=self.chunk_chars * 2)
                chunks += ss.text_chunks(answer, size=self.chunk_chars)
                completion = _estimate_tokens(thought + answer)
        chunks.append(ss.finish_chunk(finish))
        chunks.append(ss.usage_chunk(prompt_tokens, completion))
        return ss.Script(chunks=chunks, delay_s=self.delay_s)


async def start_demo_model(stack: AsyncExitStack, config: Config | None = None) -> str:
    """Start the demo model server in-process; returns its base URL. Stopped when ``stack`` closes."""
    from botgateway.config import InventoryConfig
    from tools.demo.server import ScriptedLLMServer

    inventory = config.tools.inventory if config is not None else InventoryConfig()
    known = load_known_hosts(inventory.path) if inventory.enabled else []
    server = ScriptedLLMServer(responder=DemoResponder(known_hosts=known), model="botgateway-demo")
    base_url = await server.start()
    stack.push_async_callback(server.stop)
    log.info("demo.started", base_url=base_url, known_hosts=len(known))
    return base_url
