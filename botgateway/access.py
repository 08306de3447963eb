"""Who may ask the bot: the gateway's access hook.

A hook looks at an inbound message and either allows it (``None``) or refuses
it with a reason in plain words, which the gateway shows to the asker. The
default allows everyone; deployments plug in their own (a channel allow-list,
an LDAP group lookup) without touching the gateway.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from botgateway.messages import InboundMessage

__all__ = ["AccessHook", "allow_all", "allow_users"]


class AccessHook(Protocol):
    """Decides whether a message may start a turn."""

    def __call__(self, message: InboundMessage) -> Awaitable[str | None]:
        """``None`` to allow, or the refusal shown to the asker ("this channel is not enabled")."""
        ...


async def allow_all(message: InboundMessage) -> str | None:
    """The default hook: everyone may ask."""
    return None


def allow_users(user_ids: Iterable[str], *, reason: str = "you are not on this bot's list of users; ask an admin to add you") -> Callable[[InboundMessage], Awaitable[str | None]]:
    """A hook that allows only the listed platform user ids (and refuses others with ``reason``)."""
    allowed = frozenset(user_ids)

    async def hook(message: InboundMessage) -> str | None:
        return None if message.ctx.user_id in allowed else reason

    return hook
