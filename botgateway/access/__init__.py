"""Who may ask, and what: the access hook, the policy and groups, per-asker limits, the audit trail of refusals, ``/whoami``."""

from __future__ import annotations

from botgateway.access.asker_limits import LimitHit, PrincipalLimits, asker_of, limits_from_config
from botgateway.access.audit_trail import write_refusal
from botgateway.access.groups import (
    DINGTALK_DEPT_PREFIX,
    NO_GROUPS,
    SLACK_GROUP_PREFIX,
    CachedLookup,
    GroupLookupFailed,
    GroupResolver,
    NoGroups,
    policy_groups,
    resolve_message,
    resolve_safely,
)
from botgateway.access.hook import AccessHook, allow_all, decide_message, place_of, with_decision
from botgateway.access.policy import LOCAL_ADMIN_ROLE, Decision, Place, decide, decide_as_role, effective_policy
from botgateway.access.warnings import access_warnings
from botgateway.access.whoami import WHOAMI_WORDS, describe, refusal_note, scope_text

__all__ = [
    "DINGTALK_DEPT_PREFIX",
    "LOCAL_ADMIN_ROLE",
    "NO_GROUPS",
    "SLACK_GROUP_PREFIX",
    "WHOAMI_WORDS",
    "AccessHook",
    "CachedLookup",
    "Decision",
    "GroupLookupFailed",
    "GroupResolver",
    "LimitHit",
    "NoGroups",
    "Place",
    "PrincipalLimits",
    "access_warnings",
    "allow_all",
    "asker_of",
    "decide",
    "decide_as_role",
    "decide_message",
    "describe",
    "effective_policy",
    "limits_from_config",
    "place_of",
    "policy_groups",
    "refusal_note",
    "resolve_message",
    "resolve_safely",
    "scope_text",
    "with_decision",
    "write_refusal",
]
