"""What a ``find_resource`` query is (an IP, a DNS name, an id, a name fragment) and how well a resource answers it.

A match that *owns* the query (the address is the resource's, the id is its
id, the name is its name) ranks above one that only *refers* to it (a DNS
record pointing at the address, a load balancer sending traffic to it), and
both above a name that merely contains the text. Queries are checked before
anything is asked: an empty, overlong, wildcard or free-text query gets an
error the model can act on.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tools.estate.resource import KINDS, Resource

__all__ = ["MAX_QUERY_CHARS", "Match", "Query", "QueryError", "parse_query", "rank"]

MAX_QUERY_CHARS = 253
"""The longest query: a full DNS name."""

_ALLOWED = re.compile(r"^[\w.:/@-]+$", re.UNICODE)
_DNS_NAME = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$", re.IGNORECASE)
_LOOKS_LIKE_IP = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){2,4}$")


class QueryError(ValueError):
    """The query cannot be looked up; the message says what to give instead."""


@dataclass(frozen=True)
class Query:
    """A checked ``find_resource`` query."""

    text: str
    """As given, stripped."""
    shape: Literal["ip", "dns", "text"]
    """An address, a DNS name, or an id / name fragment."""

    @property
    def folded(self) -> str:
        """Lower case, without a DNS name's trailing dot."""
        return self.text.lower().rstrip(".")


@dataclass(frozen=True)
class Match:
    """One resource that answers a query, and why."""

    resource: Resource
    """The resource."""
    score: int
    """How well: 100 owns the address or id, 90 is named so, 60 refers to it, lower for a fragment of the name."""
    why: str
    """In a few words ("private IP 10.0.3.7", "DNS record pointing to it", "name contains 'orders'")."""


def parse_query(raw: str) -> Query:
    """Check and classify ``raw``; raises :class:`QueryError` with what to give instead."""
    text = (raw or "").strip()
    if not text:
        raise QueryError("query is empty; give an IP address, a DNS name, a resource id or part of a name")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"query is {len(text)} characters long; give one IP, DNS name, id or name (at most {MAX_QUERY_CHARS})")
    if any(c in text for c in "*?%"):
        raise QueryError("wildcards are not supported; give part of the name instead (prod-db finds prod-db-01)")
    if not _ALLOWED.match(text):
        raise QueryError(
            "give one IP address, DNS name, resource id or name fragment, without spaces or punctuation "
            "(for example 10.0.3.7, api.example.com, rm-bp1abc or orders)"
        )
    try:
        return Query(str(ipaddress.ip_address(text)), "ip")
    except ValueError:
        if _LOOKS_LIKE_IP.match(text):
            raise QueryError(f"{text!r} is not a valid IP address; check the digits (each part is 0-255)") from None
    if _DNS_NAME.match(text.rstrip(".")) and not text.replace(".", "").isdigit():
        return Query(text, "dns")
    return Query(text, "text")


def rank(resources: Iterable[Resource], query: Query, *, limit: int = 20) -> tuple[list[Match], int]:
    """The resources that answer ``query``, best first (owners, then by kind order); (shown, total)."""
    matches = [m for r in resources if (m := _match(r, query)) is not None]
    order = {kind: i for i, kind in enumerate(KINDS)}
    matches.sort(key=lambda m: (-m.score, order.get(m.resource.kind, 99), m.resource.name or m.resource.id))
    return matches[:limit], len(matches)


def _match(resource: Resource, query: Query) -> Match | None:
    if query.shape == "ip":
        return _by_address(resource, query.text)
    folded = query.folded
    if query.shape == "dns":
        found = _by_dns(resource, folded)
        if found is not None:
            return found
    return _by_text(resource, folded)


def _by_address(resource: Resource, ip: str) -> Match | None:
    if ip in resource.private_ips:
        return Match(resource, 100, f"private IP {ip}")
    if ip in resource.public_ips:
        return Match(resource, 100, f"public IP {ip}")
    for link in resource.links:
        if link.target == ip:
            return Match(resource, 60, _refers(resource, link.rel))
    for listener in resource.listeners:
        for backend in listener.backends:
            if backend.target == ip:
                return Match(resource, 60, f"sends {listener.protocol}:{listener.port} traffic to it")
    return None


def _by_dns(resource: Resource, name: str) -> Match | None:
    names = [n.lower().rstrip(".") for n in resource.dns_names]
    if name in names:
        what = "the record" if resource.kind == "dns_record" else "DNS name"
        return Match(resource, 100 if resource.kind != "dns_record" else 95, f"{what} {name}")
    for link in resource.links:
        if link.rel == "points_to" and link.target.lower().rstrip(".") == name:
            return Match(resource, 60, "DNS record pointing to it")
    if any(n.startswith("*.") and name.endswith(n[1:]) for n in names):
        return Match(resource, 55, f"wildcard {', '.join(n for n in names if n.startswith('*.'))}")
    return None


def _by_text(resource: Resource, text: str) -> Match | None:
    ident = resource.id.lower()
    if ident == text or ident.rsplit("/", 1)[-1] == text:
        return Match(resource, 100, "id")
    name = resource.name.lower()
    if name == text:
        return Match(resource, 90, "name")
    for link in resource.links:
        if link.target.lower() == text:
            return Match(resource, 60, _refers(resource, link.rel))
    for listener in resource.listeners:
        if any(b.target.lower() == text for b in listener.backends):
            return Match(resource, 60, f"sends {listener.protocol}:{listener.port} traffic to it")
    if name.startswith(text) or ident.startswith(text):
        return Match(resource, 50, f"name starts with {text!r}")
    if text in name or text in ident or any(text in n.lower() for n in resource.dns_names):
        return Match(resource, 40, f"name contains {text!r}")
    for key, value in resource.tags.items():
        if value.lower() == text or key.lower() == text:
            return Match(resource, 30, f"tag {key}={value}" if value else f"tag {key}")
    return None


def _refers(resource: Resource, rel: str) -> str:
    return {
        "points_to": "DNS record pointing to it",
        "attached_to": "attached to it",
        "backend": "sends traffic to it",
        "security_group": "filtered by it",
        "runs_on": "runs on it",
        "routes_to": "routes to it",
        "member_of": "belongs to it",
        "in_vpc": "in it",
        "selects": "selects it",
    }.get(rel, f"linked ({rel})")
