"""``/whoami``: an asker's own access decision, in their words.

The same facts ``botgateway access explain`` prints as a table, as a short
note for the chat. It is answered in the conversation it was asked in;
private (ephemeral) replies need platform work that comes later.
"""

from __future__ import annotations

from botgateway.access.policy import Decision
from botgateway.grant import Limits, Scope
from botgateway.strings import t

__all__ = ["WHOAMI_WORDS", "describe", "refusal_note", "scope_text"]

WHOAMI_WORDS = ("/whoami", "whoami", "我是谁")
"""Messages answered with :func:`describe` instead of a model turn."""


def scope_text(scope: Scope) -> str:
    """One scope as ``provider=aliyun account=prod tags.env=!prod``."""
    named = (("provider", scope.provider), ("account", scope.account), ("region", scope.region))
    parts = [f"{key}={value}" for key, value in named if value]
    parts += [f"tags.{key}={value}" for key, value in sorted(scope.tags.items())]
    return " ".join(parts) or "*"


def _limits_text(limits: Limits, locale: str) -> str:
    parts = [f"{name}={value}" for name, value in (("turns_per_minute", limits.turns_per_minute),
             ("concurrent_turns", limits.concurrent_turns), ("tokens_per_day", limits.tokens_per_day)) if value]
    return ", ".join(parts) or t(locale, "whoami_no_limit")


def refusal_note(decision: Decision, locale: str) -> str:
    """Why ``decision`` refuses, in the asker's language."""
    return t(locale, f"access_{decision.refusal}", principal=decision.principal.id)


def describe(decision: Decision, locale: str) -> str:
    """The asker's identity, roles, tools offered here, resources, approvals and limits, one line each."""
    principal = decision.principal
    external = t(locale, "whoami_external") if principal.external else ""
    lines = [t(locale, "whoami_header", principal=principal.id, external=external)]
    grant = decision.grant
    if grant is None:
        lines.append(t(locale, "whoami_refused", reason=refusal_note(decision, locale)))
        return "\n".join(lines)
    none = t(locale, "whoami_none")
    lines += [
        t(locale, "whoami_roles", roles=", ".join(grant.roles)),
        t(locale, "whoami_tools", tools=", ".join(sorted(grant.tools)) or none),
        t(locale, "whoami_scopes", scopes="; ".join(scope_text(s) for s in grant.scopes) or t(locale, "whoami_all_resources")),
        t(locale, "whoami_approval", tools=", ".join(sorted(grant.approval)) or none),
        t(locale, "whoami_limits", limits=_limits_text(grant.limits, locale)),
    ]
    if grant.approver:
        lines.append(t(locale, "whoami_approver"))
    return "\n".join(lines)
