"""Who may ask the bot: the gateway's access hook, and the policy applied to a message.

A hook looks at an inbound message and either allows it (``None``) or refuses
it with a reason in plain words, which the gateway shows to the asker. The
default allows everyone; deployments plug in their own (an LDAP group lookup)
without touching the gateway. After the hook, the gateway always applies the
configured policy (:mod:`botgateway.access.policy`) through :func:`decide_message`,
and :func:`with_decision` puts the resulting grant on the turn's tool context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from botgateway.access.policy import Decision, Place, decide
from botgateway.config.access import AccessConfig
from botgateway.grant import NO_LIMITS, Limits
from botgateway.principal import principal_id

if TYPE_CHECKING:
    from botgateway.messages import InboundMessage

__all__ = ["AccessHook", "allow_all", "allow_users", "decide_message", "place_of", "with_decision"]


class AccessHook(Protocol):
    """Decides whether a message may start a turn."""

    def __call__(self, message: InboundMessage) -> Awaitable[str | None]:
        """``None`` to allow, or the refusal shown to the asker ("this channel is not enabled")."""
        ...


async def allow_all(message: InboundMessage) -> str | None:
    """The default hook: everyone may ask."""
    return None


def allow_users(
    user_ids: Iterable[str], *, reason: str = "you are not on this bot's list of users; ask an admin to add you"
) -> Callable[[InboundMessage], Awaitable[str | None]]:
    """A hook that allows only the listed platform user ids (and refuses others with ``reason``)."""
    allowed = frozenset(user_ids)

    async def hook(message: InboundMessage) -> str | None:
        return None if message.ctx.user_id in allowed else reason

    return hook


def place_of(message: InboundMessage) -> Place:
    """Where ``message`` was asked: ``slack:C0OPS`` (``local:…`` for the terminal), and whether 1:1."""
    return Place(channel=principal_id(message.platform, message.ctx.chat_id), direct=not message.ctx.is_group)


def decide_message(
    policy: AccessConfig, message: InboundMessage, tools: Iterable[str], *, limits: Limits = NO_LIMITS,
    always_approve: Iterable[str] = (),
) -> Decision:
    """The policy's decision for ``message``'s asker where they asked, over the tools that exist now."""
    return decide(policy, message.asker, place_of(message), tools, limits=limits, always_approve=always_approve)


def with_decision(message: InboundMessage, decision: Decision) -> InboundMessage:
    """``message`` with the decision's principal, grant and roles on its tool context (for the loop, the registry, tools)."""
    roles = set(message.ctx.roles) | set(decision.grant.roles if decision.grant else ())
    ctx = dataclasses.replace(message.ctx, principal=decision.principal, grant=decision.grant, roles=frozenset(roles))
    return dataclasses.replace(message, ctx=ctx, principal=decision.principal)
