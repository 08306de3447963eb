"""Which resources an asker's scopes let the lookup tools search and show (pure functions).

A :class:`~botgateway.grant.Scope` names a provider, an account, a region
(each empty for "any") and required tag values (``"!prod"``: anything but
prod). Scopes are a union: a target is allowed when *any* scope allows it.
An empty tuple of scopes restricts nothing.

The fan-out asks :func:`view_of` for every (provider, account, region) it
could search: a target whose view is empty is never called; the others are
searched and each server found is shown only when :func:`shows` its tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from botgateway.grant import Scope

__all__ = [
    "NO_MATCH_YOU_MAY_SEE",
    "UNRESTRICTED",
    "TagRule",
    "View",
    "allowed_targets",
    "allows_target",
    "rule_of",
    "shows",
    "tags_match",
    "view_of",
]

NO_MATCH_YOU_MAY_SEE = "no instance matches that you may see"
"""What a scoped lookup says when nothing it may show matched (whatever exists outside the scope)."""

TagRule = tuple[tuple[str, str], ...]
"""One scope's required tags as sorted ``(key, value)`` pairs; ``()`` requires nothing."""

View = tuple[TagRule, ...]
"""What the asker may see of one target: a server shows when any rule matches; ``()`` is nothing at all."""

UNRESTRICTED: View = ((),)
"""The view of an unrestricted asker: every server, whatever its tags."""


def _same(want: str, have: str) -> bool:
    return not want or want == have


def allows_target(scope: Scope, provider: str, account: str, region: str) -> bool:
    """Whether ``scope`` covers (``provider``, ``account``, ``region``); its empty fields match anything."""
    return _same(scope.provider, provider) and _same(scope.account, account) and _same(scope.region, region)


def rule_of(scope: Scope) -> TagRule:
    """The scope's tag requirements in a hashable, order-free form."""
    return tuple(sorted((str(k), str(v)) for k, v in scope.tags.items()))


def view_of(scopes: Sequence[Scope], provider: str, account: str, region: str) -> View:
    """The tag rules of every scope covering the target; :data:`UNRESTRICTED` when ``scopes`` is empty."""
    if not scopes:
        return UNRESTRICTED
    rules: list[TagRule] = []
    for scope in scopes:
        if allows_target(scope, provider, account, region):
            rule = rule_of(scope)
            if rule == ():
                return UNRESTRICTED  # one scope without tag requirements shows everything there
            if rule not in rules:
                rules.append(rule)
    return tuple(rules)


def allowed_targets(
    scopes: Sequence[Scope], provider: str, targets: Iterable[tuple[str, str]]
) -> list[tuple[str, str, View]]:
    """The (account, region) ``targets`` any scope allows, each with its view, in the given order."""
    out = []
    for account, region in targets:
        view = view_of(scopes, provider, account, region)
        if view:
            out.append((account, region, view))
    return out


def tags_match(rule: TagRule, tags: Mapping[str, str]) -> bool:
    """Whether ``tags`` meet every requirement of ``rule`` (keys and values case-insensitive).

    ``key: value`` needs that value; ``key: "!value"`` needs any other value or no such tag;
    ``key: ""`` needs the tag with any value.
    """
    have = {str(k).lower(): str(v).lower() for k, v in tags.items()}
    for key, want in rule:
        key, want = key.lower(), want.lower()
        if want.startswith("!"):
            if have.get(key) == want[1:]:
                return False
        elif key not in have or (want and have[key] != want):
            return False
    return True


def shows(view: View, tags: Mapping[str, str]) -> bool:
    """Whether a server with ``tags`` on a target with ``view`` may be shown."""
    return any(tags_match(rule, tags) for rule in view)
