"""The access policy, evaluated: principal × channel → a :class:`Decision`.

Pure functions over :class:`~botgateway.config.access.AccessConfig`: no I/O, no
clock, so the same decision is made by the gateway for a chat message, by
``botgateway ask --as`` and by ``botgateway access explain``. The order of the
checks is the order a reader of the config expects: the terminal's own user,
users of other organisations, the channel allow-list, then roles (by id, by
group, by platform wildcard, else ``default_role``). Several roles add up:
the union of their tools and scopes, approver if any approves. The channel's
guardrail then caps the tools, and only tools that exist are offered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, TypeAlias

from botgateway.config.access import DEFAULT_ACCESS, DENY, NONE_ROLE, AccessConfig, RoleConfig
from botgateway.grant import NO_LIMITS, Grant, Limits, Scope
from botgateway.principal import Principal

__all__ = ["LOCAL_ADMIN_ROLE", "Decision", "Place", "Refusal", "decide", "decide_as_role", "effective_policy", "matches_tools"]

Refusal: TypeAlias = Literal["external", "channel", "direct_messages", "no_role"]
"""Why a principal is refused; the gateway words it from :mod:`botgateway.strings` (``access_<refusal>``)."""

LOCAL_ADMIN_ROLE = "local-admin"
"""The role name the terminal's own user holds when ``access.local_admin`` is on."""


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where a question was asked."""

    channel: str
    """Qualified channel id: ``slack:C0OPS``, ``dingtalk:cid…``; the terminal's is ``local:<chat>``."""
    direct: bool = False
    """A 1:1 chat with the bot."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What the policy decided for one principal in one place."""

    principal: Principal
    """Who asked."""
    place: Place
    """Where."""
    grant: Grant | None = None
    """What they may do there; ``None`` when refused."""
    refusal: Refusal | None = None
    """Why they are refused; ``None`` when allowed."""

    @property
    def allowed(self) -> bool:
        """Whether the principal may ask here."""
        return self.grant is not None


def effective_policy(access: AccessConfig | None) -> AccessConfig:
    """The configured policy, or the safe default when there is no ``access`` section."""
    return access if access is not None else DEFAULT_ACCESS


def matches_tools(patterns: Sequence[str], name: str) -> bool:
    """Whether ``name`` is matched by a pattern and by no ``!pattern``."""
    positive = any(fnmatchcase(name, p) for p in patterns if not p.startswith("!"))
    return positive and not any(fnmatchcase(name, p[1:]) for p in patterns if p.startswith("!"))


def decide(
    policy: AccessConfig,
    principal: Principal,
    place: Place,
    tools: Iterable[str],
    *,
    limits: Limits = NO_LIMITS,
    always_approve: Iterable[str] = (),
) -> Decision:
    """Decide what ``principal`` may do in ``place``, given the names of the tools that exist.

    ``limits`` are the defaults of the top-level ``limits:`` section; a role's own ``limits`` override them.
    ``always_approve`` names tools whose calls need an approval whatever ``access.approvals`` says
    (MCP tools annotated destructive).
    """
    names = list(tools)
    if policy.local_admin and principal.id.startswith("local:"):
        # The terminal's user holds the config and its keys: refusing them protects nothing.
        grant = Grant(roles=(LOCAL_ADMIN_ROLE,), tools=frozenset(names), approver=True, limits=limits)
        return Decision(principal=principal, place=place, grant=grant)
    refusal = _refusal(policy, principal, place)
    if refusal is not None:
        return Decision(principal=principal, place=place, refusal=refusal)
    roles = _roles(policy, principal)
    if not roles:
        return Decision(principal=principal, place=place, refusal="no_role")
    grant = _grant(policy, roles, place, names, limits)
    extra = grant.tools & frozenset(always_approve)
    if extra:
        grant = dataclasses.replace(grant, approval=grant.approval | extra)
    return Decision(principal=principal, place=place, grant=grant)


def decide_as_role(
    policy: AccessConfig,
    principal: Principal,
    place: Place,
    tools: Iterable[str],
    role: str,
    *,
    limits: Limits = NO_LIMITS,
    always_approve: Iterable[str] = (),
) -> Decision:
    """What ``principal`` may do in ``place`` holding exactly ``role``: a turn nobody typed (an alert's
    investigation, a scheduled report) runs as the role its configuration names, never as the default role.

    The channel allow-list and the channel's guardrail still apply; a role the policy does not define grants nothing.
    """
    refusal = _refusal(policy, principal, place)
    if refusal is not None:
        return Decision(principal=principal, place=place, refusal=refusal)
    if role not in policy.roles:
        return Decision(principal=principal, place=place, refusal="no_role")
    grant = _grant(policy, [role], place, list(tools), limits)
    extra = grant.tools & frozenset(always_approve)
    if extra:
        grant = dataclasses.replace(grant, approval=grant.approval | extra)
    return Decision(principal=principal, place=place, grant=grant)


def _refusal(policy: AccessConfig, principal: Principal, place: Place) -> Refusal | None:
    if principal.external and policy.external_users == DENY:
        return "external"
    if place.direct:
        return None if policy.channels.direct_messages else "direct_messages"
    allow = policy.channels.allow
    if allow and not any(fnmatchcase(place.channel, pattern) for pattern in allow):
        return "channel"
    return None


def _is_member(role: RoleConfig, principal: Principal) -> bool:
    ids = {principal.id, *principal.groups}
    return any(fnmatchcase(i, member) for member in role.members for i in ids)


def _roles(policy: AccessConfig, principal: Principal) -> list[str]:
    """The names of the roles ``principal`` holds; externals hold only ``external_users`` plus explicit ids."""
    if principal.external:
        # A platform wildcard (slack:*) means "our people": it never reaches into other organisations.
        named = [n for n, r in policy.roles.items() if any(m in (principal.id, *principal.groups) for m in r.members)]
        return list(dict.fromkeys([policy.external_users, *named]))
    matched = [name for name, role in policy.roles.items() if _is_member(role, principal)]
    if matched:
        return matched
    return [] if policy.default_role == NONE_ROLE else [policy.default_role]


def _grant(policy: AccessConfig, roles: list[str], place: Place, names: list[str], defaults: Limits) -> Grant:
    held = [policy.roles[name] for name in roles]
    guardrails = [g.tools for key, g in policy.guardrails.items() if fnmatchcase(place.channel, key)]
    offered = frozenset(
        n for n in names
        if any(matches_tools(r.tools, n) for r in held) and all(matches_tools(g, n) for g in guardrails)
    )
    # An unscoped role sees everything, so it makes the union unrestricted.
    scopes: tuple[Scope, ...] = ()
    if all(r.scopes for r in held):
        scopes = tuple(Scope(provider=s.provider, account=s.account, region=s.region, tags=dict(s.tags),
                             metric_matchers=tuple(s.metric_matchers)) for r in held for s in r.scopes)
    return Grant(
        roles=tuple(roles),
        tools=offered,
        scopes=scopes,
        approval=frozenset(n for n in offered if matches_tools(policy.approvals.tools, n)),
        approver=any(r.approve for r in held),
        limits=_limits(held, defaults),
    )


def _limits(held: list[RoleConfig], defaults: Limits) -> Limits:
    """Each limit of the most generous role (0, no limit, beats any number); unset role limits inherit ``defaults``."""

    def most(field: str) -> int:
        values = [getattr(r.limits, field) for r in held]
        values = [getattr(defaults, field) if v is None else v for v in values]
        return 0 if 0 in values else max(values)

    return Limits(turns_per_minute=most("turns_per_minute"), concurrent_turns=most("concurrent_turns"),
                  tokens_per_day=most("tokens_per_day"))
