"""How resources and changes read: one compact line each for the model, a few words for the card.

The model reads these lines, never the SDK records; the structured
:class:`~tools.estate.resource.Resource` travels beside them as tool data.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.estate.fanout import EstateView
from tools.estate.reach import world_open_rules
from tools.estate.resource import Listener, Resource, kind_label, kinds_label
from tools.server_record import provider_label

__all__ = ["MAX_LINE", "count_words", "describe_failures", "names", "render_brief", "render_resource", "where"]

MAX_LINE = 400
"""Longest line one resource renders to (a group with hundreds of rules is summarized)."""


def where(resource: Resource) -> str:
    """``Alibaba Cloud prod/cn-hangzhou``."""
    place = "/".join(p for p in (resource.account, resource.region) if p)
    return f"{provider_label(resource.provider)} {place}".strip()


def render_resource(resource: Resource) -> str:
    """One line: kind first, then name and id, where, state, addresses and what matters for the kind."""
    parts = [f"{kind_label(resource.kind)} {resource.title}", where(resource)]
    if resource.state:
        parts.append(resource.state)
    facts = _facts(resource)
    if facts:
        parts.append(facts)
    addresses = ", ".join(resource.private_ips + resource.public_ips + tuple(
        n for n in resource.dns_names if resource.kind != "dns_record"))
    if addresses:
        parts.append(addresses)
    if resource.listeners:
        parts.append("listeners " + "; ".join(_listener(li) for li in resource.listeners[:8]))
    if resource.rules:
        parts.append(_rules(resource))
    groups = [link.target for link in resource.links_of("security_group")]
    if groups:
        parts.append("security groups " + ",".join(groups[:6]))
    for rel, word in (("attached_to", "attached to"), ("runs_on", "on node"), ("routes_to", "routes to"), ("member_of", "of")):
        targets = [link.target + (f":{link.port}" if link.port else "") for link in resource.links_of(rel)]
        if targets:
            parts.append(f"{word} {','.join(targets[:6])}")
    if resource.owner:
        parts.append(f"owner {resource.owner}")
    if resource.tags:
        parts.append("tags " + ",".join(f"{k}={v}" if v else k for k, v in sorted(resource.tags.items())[:10]))
    line = " | ".join(parts)
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def render_brief(resource: Resource) -> str:
    """A hop of a chain: kind and name, where, state, the facts of its kind and its first addresses."""
    parts = [f"{kind_label(resource.kind)} {resource.title}", where(resource)]
    if resource.state:
        parts.append(resource.state)
    facts = _facts(resource)
    if facts and resource.kind != "dns_record":
        parts.append(facts)
    addresses = (resource.private_ips + resource.public_ips)[:3]
    if addresses:
        parts.append(", ".join(addresses))
    if resource.kind == "security_group":
        parts.append(_rules(resource))
    return " | ".join(parts)


def _facts(resource: Resource) -> str:
    d = resource.details
    if resource.kind == "dns_record":
        return f"{d.get('type', '?')} → {d.get('value', '?')}" + (f" ttl {d['ttl']}" if d.get("ttl") else "")
    if resource.kind == "bucket":
        return ("PUBLIC" if d.get("public") == "yes" else "private") + (f" acl {d['acl']}" if d.get("acl") else "")
    keys = ("engine", "version", "class", "type", "scheme", "port", "replicas", "restarts", "reason", "node", "vpc")
    return " ".join(f"{k} {d[k]}" if k not in ("engine", "version") else d[k] for k in keys if d.get(k))


def _listener(listener: Listener) -> str:
    text = f"{listener.protocol}:{listener.port}"
    if listener.backends:
        bad = sum(1 for b in listener.backends if b.health == "unhealthy")
        text += f" → {len(listener.backends)} backend{'s' if len(listener.backends) != 1 else ''}"
        text += f" ({bad} unhealthy)" if bad else ""
    return text


def _rules(group: Resource) -> str:
    inbound = [r for r in group.rules if r.direction == "ingress"]
    text = f"{len(inbound)} inbound rule{'s' if len(inbound) != 1 else ''}"
    world = world_open_rules(group)
    if world:
        text += "; OPEN TO THE INTERNET: " + ", ".join(r.render() for r in world[:6])
    shown = [r.render() for r in inbound if r not in world][:6]
    if shown:
        text += "; " + ", ".join(shown)
    return text


def describe_failures(view: EstateView) -> list[str]:
    """The lines saying what could not be read (and that listings were cut)."""
    lines = []
    if view.failures:
        lines.append("Not reached (results may be incomplete):")
        lines.extend(f"- {f.describe()}" for f in view.failures)
    if view.cut:
        lines.append("Listing cut at its bound (more exist): " + "; ".join(view.cut))
    return lines


def count_words(n: int, kind: str) -> str:
    """"1 database", "3 load balancers"."""
    return f"{n} {kind_label(kind) if n == 1 else kinds_label(kind)}"


def names(resources: Sequence[Resource], most: int = 3) -> str:
    """The first few names, for a card line."""
    return ", ".join(r.name or r.id for r in resources[:most])
