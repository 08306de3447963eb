"""Whether security group rules let traffic in: "is port N reachable from 0.0.0.0/0?", answered from the rules.

Clouds order rules differently. AWS groups only allow, so any matching rule
lets traffic in. Alibaba and Tencent rules carry a priority (lower first;
at the same priority a deny wins) and may deny. Rules without a priority
(0) are unordered allows. A resource in several groups is reachable when any
of its groups lets the traffic in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tools.estate.resource import WORLD, Resource, Rule

__all__ = ["SENSITIVE_PORTS", "Reach", "reach", "world_open_rules"]

SENSITIVE_PORTS = {
    22: "SSH", 23: "Telnet", 445: "SMB", 1433: "SQL Server", 2375: "Docker API", 3306: "MySQL", 3389: "RDP",
    5432: "PostgreSQL", 6379: "Redis", 9200: "Elasticsearch", 11211: "Memcached", 27017: "MongoDB",
}
"""Ports that should never be open to the internet, with what usually listens there."""


@dataclass(frozen=True)
class Reach:
    """The verdict for one port."""

    allowed: bool
    """Whether the traffic gets in."""
    group: str = ""
    """The group whose rule decided (the allowing one, or the first that denies)."""
    rule: Rule | None = None
    """The deciding rule; ``None`` when no rule matched (default deny)."""

    def describe(self, port: int, source: str) -> str:
        """"port 22 is open to 0.0.0.0/0: sg-1 allow tcp 22 from 0.0.0.0/0"."""
        if self.rule is None:
            return f"port {port} is closed to {source}: no rule allows it"
        verdict = "open" if self.allowed else "closed"
        return f"port {port} is {verdict} to {source}: {self.group} {self.rule.render()}"


def _decide(rules: Sequence[Rule], port: int, protocol: str, source: str) -> Rule | None:
    matching = [r for r in rules if r.direction == "ingress" and r.covers(port, protocol) and r.matches_source(source)]
    if not matching:
        return None
    # Lower priority first; at the same priority a deny first; unordered (0) allows come after ordered rules.
    matching.sort(key=lambda r: (r.priority == 0, r.priority, r.action != "deny"))
    return matching[0]


def reach(groups: Iterable[Resource], port: int, *, protocol: str = "tcp", source: str = "0.0.0.0/0") -> Reach:
    """Whether ``source`` reaches ``port`` through any of ``groups`` (security groups)."""
    denied: Reach | None = None
    for group in groups:
        rule = _decide(group.rules, port, protocol, source)
        if rule is None:
            continue
        if rule.action == "allow":
            return Reach(True, group.name or group.id, rule)
        denied = denied or Reach(False, group.name or group.id, rule)
    return denied or Reach(False)


def world_open_rules(group: Resource, port: int | None = None) -> list[Rule]:
    """The group's ingress allow rules open to the whole internet (for ``port`` only, when given)."""
    return [
        r for r in group.rules
        if r.direction == "ingress" and r.open_to_world and (port is None or r.covers(port, r.protocol if r.protocol != "all" else "tcp"))
        and r.source in WORLD
    ]
