"""Warnings ``check-config`` gives about the access policy: a chat platform open to everyone, approvals nobody gives.

An ops bot wired to cloud accounts should answer only the people and channels
meant to use it. When anyone of the organisation could ask it, in any channel it
is invited to, the policy is legal but worth a second look, so ``check-config``
says so (without failing). So is a policy whose calls wait for an approval that
no role may give: each would wait its timeout and then be denied.
"""

from __future__ import annotations

from botgateway.access.policy import Place, decide, effective_policy
from botgateway.config import Config
from botgateway.principal import Principal

__all__ = ["CHAT_PLATFORMS", "access_warnings", "approval_warnings", "open_platform_warnings"]

CHAT_PLATFORMS = ("slack", "dingtalk")
"""Platforms whose users are other people (the terminal's user holds the config)."""

_PROBE_USER = "~anyone"
"""A user no role can list by id: only a wildcard or the default role lets them in."""
_PROBE_CHANNEL = "~any-channel"
"""A channel no allow-list names."""


def open_platform_warnings(config: Config) -> list[str]:
    """One line per enabled chat platform where anyone of the organisation may ask, in any channel."""
    policy = effective_policy(config.access)
    warnings: list[str] = []
    for platform in CHAT_PLATFORMS:
        if not getattr(config.adapters, platform).active:
            continue
        anyone = Principal.of(platform, _PROBE_USER)
        for place, where in (
            (Place(channel=f"{platform}:{_PROBE_CHANNEL}"), "in any channel it is invited to"),
            (Place(channel=f"{platform}:{_PROBE_CHANNEL}", direct=True), "in a direct chat"),
        ):
            decision = decide(policy, anyone, place, ())
            if decision.grant is not None:
                warnings.append(
                    f"access: anyone in your {platform} organisation may ask the bot, {where} "
                    f"(role {', '.join(decision.grant.roles)}); to narrow it, set access.channels.allow "
                    "(and access.channels.direct_messages), list members per role, or set access.default_role: none"
                )
                break
    return warnings


def approval_warnings(config: Config) -> list[str]:
    """A line when calls need an approval (``access.approvals.tools``) but no role may approve them."""
    access = config.access
    if access is None or not access.approvals.tools or any(role.approve for role in access.roles.values()):
        return []
    return [
        "access: access.approvals.tools lists tools whose calls wait for an approval, but no role has approve: true, "
        f"so nobody can approve them and each is denied after access.approvals.timeout_s ({access.approvals.timeout_s:g} s); "
        "give an approver role approve: true"
    ]


def access_warnings(config: Config) -> list[str]:
    """Every warning about the access policy, in the order ``check-config`` prints them."""
    return open_platform_warnings(config) + approval_warnings(config)
