"""Label matchers as Alertmanager writes them: ``critical``, ``=critical``, ``!=critical``, ``=~crit.*|warn``, ``!~…``.

A plain value means equality. Regexes are anchored at both ends as
Alertmanager's are, and a missing label reads as the empty string, so
``{team: ""}`` matches alerts without a ``team`` label, as in Alertmanager.
It lives apart from :mod:`botgateway.alerts` because the config validates
alert routes with it, and the alert desk reads the config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

__all__ = ["MatchOp", "Matcher", "parse_matchers"]

MatchOp: TypeAlias = Literal["=", "!=", "=~", "!~"]
"""Equality, inequality, regex match, regex non-match."""

_PREFIXES: tuple[MatchOp, ...] = ("=~", "!~", "!=", "=")
"""Checked in this order: ``=~`` starts with ``=`` too."""


@dataclass(frozen=True)
class Matcher:
    """One label condition."""

    label: str
    """The label's name."""
    op: MatchOp
    """How the value is compared."""
    value: str
    """The value, or the regex for ``=~`` and ``!~``."""
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    """The compiled, anchored regex of ``=~`` and ``!~``; compiled once, when the matcher is made."""

    def __post_init__(self) -> None:
        if self.op in ("=~", "!~"):
            # Anchored at both ends, as Alertmanager anchors its (RE2) regexes; re.error for a bad one.
            object.__setattr__(self, "_regex", re.compile(f"(?:{self.value})\\Z"))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this condition; an absent label is the empty string."""
        actual = labels.get(self.label, "")
        if self._regex is not None:
            found = self._regex.match(actual) is not None
            return found if self.op == "=~" else not found
        return (actual == self.value) if self.op == "=" else (actual != self.value)

    def __str__(self) -> str:
        return f'{self.label}{self.op}"{self.value}"'


def parse_matchers(match: Mapping[str, str]) -> tuple[Matcher, ...]:
    """The conditions of a ``match`` mapping (label → value form); a :class:`ValueError` names a bad regex or label."""
    matchers = []
    for label, text in match.items():
        if not label.strip():
            raise ValueError("a label name in match is empty")
        op: MatchOp = "="
        value = text
        for prefix in _PREFIXES:
            if text.startswith(prefix):
                op, value = prefix, text[len(prefix):]
                break
        try:
            matchers.append(Matcher(label=label, op=op, value=value))
        except re.error as exc:
            raise ValueError(f"{label}: {value!r} is not a valid regular expression ({exc})") from None
    return tuple(matchers)
