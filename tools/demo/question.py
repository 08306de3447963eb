"""Reading a question: what to look up (addresses, instance ids, host names, a list by state) and in which language."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["IPV4", "Lookup", "analyze_question", "is_chinese", "last_user_text", "message_text", "since_last_question"]

IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])")
"""An IPv4 address standing on its own (not part of a longer dotted number)."""

_INSTANCE_ID = re.compile(r"\b(?:i-[0-9a-z]{6,}|ins-[0-9a-z]{6,})\b", re.IGNORECASE)
_HOSTNAME = re.compile(r"\b[a-z][a-z0-9]*(?:[-.][a-z0-9]+)+\b", re.IGNORECASE)
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LIST_WORDS = re.compile(r"\b(list|show all|which servers|what servers|stopped|running)\b|列出|哪些|已停止|停止的|运行中", re.IGNORECASE)
_STATUS_WORDS = {"stopped": "stopped", "已停止": "stopped", "停止的": "stopped", "running": "running", "运行中": "running"}


@dataclass(frozen=True, kw_only=True)
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


def analyze_question(text: str, known_hosts: Iterable[str] = ()) -> Lookup:
    """Find what to look up in ``text``; ``known_hosts`` are names to recognise even without digits or dashes."""
    ips = tuple(dict.fromkeys(IPV4.findall(text)))
    ids = tuple(dict.fromkeys(m.group(0) for m in _INSTANCE_ID.finditer(text)))
    known = {h.lower(): h for h in known_hosts if h}
    hosts: list[str] = []
    for match in _HOSTNAME.finditer(text):
        token = match.group(0).strip(".")
        lowered = token.lower()
        if token in ids or IPV4.fullmatch(token) or lowered in (h.lower() for h in hosts):
            continue
        if lowered in known or (any(c.isdigit() for c in token) and "-" in token):
            hosts.append(known.get(lowered, token))
    # a known host name written without digits or dashes ("bastion")
    for word in re.findall(r"[A-Za-z][\w-]*", text):
        if word.lower() in known and known[word.lower()] not in hosts and word not in ids:
            hosts.append(known[word.lower()])
    status = next((v for k, v in _STATUS_WORDS.items() if re.search(rf"\b{k}\b" if k.isascii() else k, text, re.IGNORECASE)), None)
    return Lookup(ips=ips, instance_ids=ids, hosts=tuple(hosts), list_status=status, wants_list=bool(_LIST_WORDS.search(text)))


def is_chinese(text: str) -> bool:
    """Whether ``text`` is written in Chinese (then the demo answers in Chinese)."""
    return bool(_CJK.search(text))


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text, whether ``content`` is a string or a list of content parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return str(content)


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the newest user message (the question being answered)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def since_last_question(messages: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """The messages after the newest user message: this question's tool calls and results so far."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return messages[last_user + 1 :]
