"""Reading an estate question: its shape (find, trace, changes, exposure, list), its subject, kind, port and window.

The demo's server questions ("which server is 10.0.1.100?") are read by
:mod:`tools.demo.question`; this module reads the wider questions an on-call
engineer asks about the rest of the estate, in English or Chinese:

- *what is 10.0.3.7?* / *10.0.3.7 是什么？* → find what owns it;
- *what's behind api.example.com?*, *why is the checkout deployment degraded?*,
  *is port 443 of api.example.com reachable from the internet?* → trace the path;
- *who stopped prod-db-03?* / *谁停了 prod-db-03？* → the audit trail;
- *which security group opens 22 to the world?* → the groups open to the internet;
- *list the load balancers*, *which buckets are public?* → a list of one kind;
- *where is the orders Redis?* → find a name fragment within one kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from botgateway.strings import STRINGS
from tools.demo.question import IPV4

__all__ = ["EstateAsk", "Shape", "read_estate_question"]

Shape = Literal["find", "trace", "changes", "exposed", "list", "investigate"]
"""What the question asks of the estate."""

_DNS = re.compile(r"\b(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z][a-z0-9-]*[a-z]\b", re.IGNORECASE)
_NAMED = re.compile(r"\b[a-z][a-z0-9]*(?:[-_/][a-z0-9]+)+\b", re.IGNORECASE)
_INSTANCE_ID = re.compile(r"^(?:i|ins)-[0-9a-z]{6,}$", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")

# Which kind a question names: the first pattern that matches wins, so "RDS instance" is a database, not a server.
_KIND_WORDS: tuple[tuple[str, str], ...] = (
    ("security_group", r"security[- ]?groups?|\bsgs?\b|安全组"),
    ("load_balancer", r"load[- ]?balanc\w*|\b(?:slb|clb|elb|alb|nlb|lbs?)\b|负载均衡"),
    ("nat_gateway", r"\bnat(?:[- ]?gateways?)?\b|nat ?网关"),
    ("ip", r"elastic ips?|\beips?\b|弹性(?:公网)? ?ip"),
    ("dns_record", r"\bdns(?: records?)?\b|解析记录|域名记录|dns ?记录"),
    ("bucket", r"\bbuckets?\b|\boss\b|\bs3\b|\bcos\b|存储桶|桶"),
    ("cache", r"\bredis\b|\bcaches?\b|\bmemcached?\b|\btair\b|\belasticache\b|缓存"),
    ("database", r"\bdatabases?\b|\bdbs?\b|\brds\b|\bmysql\b|\bpostgres(?:ql)?\b|\bcdb\b|数据库"),
    ("workload", r"\bdeployments?\b|\bstatefulsets?\b|\bdaemonsets?\b|\bworkloads?\b|部署|工作负载"),
    ("pod", r"\bpods?\b|容器组"),
    ("k8s_service", r"\b(?:kubernetes|k8s) services?\b"),
    ("ingress", r"\bingress(?:es)?\b"),
    ("k8s_node", r"\bnodes?\b|节点"),
    ("server", r"\bservers?\b|\bhosts?\b|\bmachines?\b|\binstances?\b|\bvms?\b|\becs\b|\bcvm\b|\bec2\b|服务器|主机|机器"),
)
_CHANGES = re.compile(
    r"\bwho\b.*?\b(?:stop|start|reboot|restart|delet|remov|modif|chang|creat|terminat|updat|scal|touch|open|edit|resiz"
    r"|releas)\w*"
    r"|\bwhat changed\b|\bchanges? (?:to|on|of)\b|\bchange (?:log|history)\b|\baudit\b"
    r"|谁.{0,6}(?:停|关|启|删|改|动|创建|修改|变更|释放|更新|开)|变更|改动|操作记录|审计",
    re.IGNORECASE,
)
_VERBS: tuple[tuple[str, str], ...] = (
    ("reboot", r"\b(?:reboot|restart)\w*|重启"),
    ("stop", r"\bstop\w*|\bshut\w* down\b|停|关"),
    ("start", r"\bstart\w*|启动|开机"),
    ("delete", r"\b(?:delet|remov|terminat|releas)\w*|删|释放"),
    ("create", r"\bcreat\w*|创建"),
)
_TRACE = re.compile(
    r"\bbehind\b|\breachab\w*|\breach\b|\baccessible\b|\btrace\b|\bpath\b|\bwhy\b|\bdown\b|\bdegraded\b|\bunhealthy\b"
    r"|\bbroken\b|\bfailing\b|\bnot working\b|\bserves?\b|\bin front of\b"
    r"|后面|背后|后端|为什么|访问|可达|连不上|打不开|挂了|降级|不健康|链路|追踪",
    re.IGNORECASE,
)
_EXPOSED = re.compile(
    r"\b(?:open|opens|opened|exposed?|exposes|allows?)\b.*\b(?:world|internet|anyone|everyone|0\.0\.0\.0(?:/0)?)"
    r"|open to the (?:world|internet)|对公网|公网开放|对外开放|暴露|全网|0\.0\.0\.0",
    re.IGNORECASE,
)
_LIST = re.compile(
    r"\blist\b|\bshow (?:me )?(?:all|the|every)\b|\ball\b|\bwhich\b|\bwhat\b|列出|哪些|所有|有哪些", re.IGNORECASE
)
_PUBLIC = re.compile(r"\bpublic\b|公开|公共读|公网", re.IGNORECASE)
_PORT = re.compile(
    r"\bport\s+(\d{1,5})\b|\b(\d{1,5})\s*(?:号)?端口|端口\s*(\d{1,5})|:(\d{1,5})\b"
    r"|\b(?:opens?|allows?|exposes?)\s+(\d{1,5})\b|\b(\d{1,5})\s+(?:to|open)\b",
    re.IGNORECASE,
)
_NAMED_PORTS = {"ssh": 22, "rdp": 3389, "https": 443, "http": 80, "mysql": 3306, "redis": 6379}
_STATES = {"stopped": "stopped", "已停止": "stopped", "停止的": "stopped", "running": "running", "运行中": "running"}
_WINDOWS: tuple[tuple[str, str], ...] = (
    (r"\btoday\b|今天", "24h"),
    (r"\byesterday\b|昨天", "48h"),
    (r"\b(?:this|last|past) week\b|本周|上周|这周|最近一周", "7d"),
    (r"\b(?:this|last|past) month\b|本月|上个月|最近一个月", "30d"),
)
_LAST_N = re.compile(r"\b(?:last|past)\s+(\d{1,3})\s*(hour|day|week)s?\b|最近\s*(\d{1,3})\s*(小时|天|周)", re.IGNORECASE)
_UNIT = {"hour": "h", "day": "d", "week": "w", "小时": "h", "天": "d", "周": "w"}

WIDEST_WINDOW = "90d"
"""The window of a "who did X?" question that names none: the last time it happened, as far back as the trails go."""

_STOP = frozenset(
    "what whats is are was were the a an of to from on in at for which who whom where why how behind reachable reach "
    "internet world port ports list show me all my our and or does do did it its there any this that can be open opens "
    "opened public private down degraded unhealthy broken failing working not serves serve front tell about find "
    "look up "
    "lookup please trace path stopped stop started start changed change rebooted restarted deleted modified created "
    "when s us we you i exposed expose allow allows anyone everyone ssh rdp https http kubernetes k8s so many much "
    "ready replicas ip ips address addresses attached unattached anything nothing used unused free protects protect "
    "has have running".split()
)


@dataclass(frozen=True, kw_only=True)
class EstateAsk:
    """What an estate question asks."""

    shape: Shape
    """Find, trace, changes, exposure or list."""
    subject: str = ""
    """The IP, DNS name, id, name or name fragment asked about; empty for exposure and lists."""
    kind: str = ""
    """The resource kind the question names (``cache`` for "Redis"), when it names one."""
    port: int | None = None
    """The port the question names ("22", "port 443", "SSH")."""
    since: str = ""
    """How far back a changes question looks (``24h``, ``7d``, ``90d``)."""
    verb: str = ""
    """The action a changes question asks about (``stop``, ``reboot``…); empty for any change."""
    state: str = ""
    """``running``/``stopped`` when a list asks for one state."""
    public: bool = False
    """The question asks which are public (buckets)."""
    fragment: bool = False
    """The subject is a bare word beside a kind ("orders" in "the orders Redis"), not an address, id or name."""
    server_asked: bool = False
    """It asks to find or list servers (by the word, an instance id or a known host): the server tools answer it."""
    subjects: tuple[str, ...] = ()
    """An alert investigation's hosts and resources, in the order the alert names them."""


def read_estate_question(text: str, known_hosts: Iterable[str] = ()) -> EstateAsk | None:
    """The estate question in ``text``, or ``None`` when it asks nothing of the estate (a greeting, a chat)."""
    subject, rest = _subject(text, known_hosts)
    if _is_alert_investigation(text):
        # The investigation's instructions name every kind and "who changed it": they are not the question's shape.
        # What it asks is what each named host or resource is, and what changed it.
        subjects = _investigated(text) or ((subject,) if subject else ())
        return EstateAsk(shape="investigate", subject=subjects[0], subjects=subjects) if subjects else None
    kind = _kind(rest)
    # a bare word names something only beside a kind ("the orders Redis"); alone it is more likely chat
    fragment = _fragment(rest) if kind and not subject else ""
    target = subject or fragment
    port = _port(rest)
    known = {h.lower() for h in known_hosts}
    named_server = kind == "server" or bool(_INSTANCE_ID.match(subject)) or subject.lower() in known
    if target and _CHANGES.search(text):
        return EstateAsk(shape="changes", subject=target, kind=kind, since=_window(text), verb=_verb(text))
    if target and (_TRACE.search(text) or (_EXPOSED.search(text) and subject)):
        return EstateAsk(shape="trace", subject=target, kind=kind, port=port)
    if not subject and _EXPOSED.search(text) and kind in ("", "security_group", "server"):
        return EstateAsk(shape="exposed", kind="security_group", port=port)
    if kind and not target and (_LIST.search(text) or _PUBLIC.search(text)):
        state = next((v for k, v in _STATES.items() if re.search(_word(k), text, re.IGNORECASE)), "")
        public = kind == "bucket" and bool(_PUBLIC.search(text))
        return EstateAsk(shape="list", kind=kind, state=state, public=public, server_asked=kind == "server")
    if target:
        return EstateAsk(shape="find", subject=target, kind=kind, fragment=not subject, server_asked=named_server)
    return None


def _subject(text: str, known_hosts: Iterable[str]) -> tuple[str, str]:
    """The first IP, DNS name, dashed name or known host in ``text``, and the text without any of them."""
    found: list[tuple[int, str]] = []
    rest = text
    for pattern in (IPV4, _DNS, _NAMED):
        for match in list(pattern.finditer(rest)):
            token = match.group(0)
            if token == "0.0.0.0" or (pattern is _DNS and IPV4.fullmatch(token)) or _is_kind_word(token):
                continue
            found.append((text.find(token), token))
            rest = rest.replace(token, " ", 1)
    known = {h.lower(): h for h in known_hosts if h}
    for word in _WORD.finditer(rest):
        if word.group(0).lower() in known:
            found.append((word.start(), known[word.group(0).lower()]))
    found.sort()
    return (found[0][1] if found else ""), rest


def _investigated(text: str) -> tuple[str, ...]:
    """The hosts and resources on the investigation's "Hosts the alert names: …" line."""
    for strings in STRINGS.values():
        head = strings.get("alert_q_hosts", "").split("{hosts}", 1)[0]
        for line in text.splitlines():
            if head and line.startswith(head):
                names = line[len(head):].rstrip(".。").replace("，", ",").split(",")
                return tuple(n.strip() for n in names if n.strip())
    return ()


def _is_alert_investigation(text: str) -> bool:
    """Whether ``text`` is the question an alert's investigation asks (:mod:`botgateway.alerts.question`)."""
    return any(strings.get("alert_q_data", "\0") in text for strings in STRINGS.values())


def _word(key: str) -> str:
    """A pattern for ``key`` as a whole word (Chinese has no word boundaries)."""
    return rf"\b{key}\b" if key.isascii() else key


def _is_kind_word(token: str) -> bool:
    """"load-balancers" is a kind, "prod-db-03" a name (though it holds "db")."""
    return any(re.fullmatch(pattern, token, re.IGNORECASE) for _, pattern in _KIND_WORDS)


def _kind(text: str) -> str:
    return next((kind for kind, pattern in _KIND_WORDS if re.search(pattern, text, re.IGNORECASE)), "")


def _fragment(text: str) -> str:
    """The first word that is not grammar, a shape word or a kind: "orders" in "where is the orders Redis?"."""
    for _, pattern in _KIND_WORDS:
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    return next((w for w in _WORD.findall(text) if len(w) > 1 and w.lower() not in _STOP), "")


def _port(text: str) -> int | None:
    match = _PORT.search(text)
    if match:
        value = int(next(g for g in match.groups() if g))
        return value if 0 < value < 65536 else None
    named = re.search(r"\b(" + "|".join(_NAMED_PORTS) + r")\b", text, re.IGNORECASE)
    return _NAMED_PORTS[named.group(1).lower()] if named else None


def _verb(text: str) -> str:
    return next((verb for verb, pattern in _VERBS if re.search(pattern, text, re.IGNORECASE)), "")


def _window(text: str) -> str:
    match = _LAST_N.search(text)
    if match:
        number, unit = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        return f"{number}{_UNIT[unit.lower()]}"
    return next((window for pattern, window in _WINDOWS if re.search(pattern, text, re.IGNORECASE)), WIDEST_WINDOW)
