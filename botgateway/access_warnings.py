"""Warnings ``check-config`` gives about the access policy: a chat platform open to everyone.

An ops bot wired to cloud accounts should answer only the people and channels
meant to use it. When anyone of the organisation could ask it, in any channel it
is invited to, the policy is legal but worth a second look, so ``check-config``
says so (without failing).
"""

from __future__ import annotations

from botgateway.config import Config
from botgateway.policy import Place, decide, effective_policy
from botgateway.principal import Principal

__all__ = ["CHAT_PLATFORMS", "open_platform_warnings"]

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
