"""Which endpoints answer whom: ``llm.routes`` matched against the asker of the running turn.

A route matches an asker by channel (qualified glob, ``slack:C0SECRET*``) and by
role (any of the access roles the asker holds); a route that names both needs
both. The first route that matches wins; without one, the default chain (the
primary, then ``llm.fallbacks``) answers.

The asker travels with the turn as context (:func:`asking`, entered by the tool
loop for the whole turn, like the log fields of :func:`~botgateway.logs.bind_turn`):
the model is also asked *inside* the turn by the memory, to summarize a long
history, and that summary must go where the turn's rounds go (a sensitive
channel's history stays on its own endpoint), though the memory knows nothing of
askers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fnmatch import fnmatchcase

from botgateway.principal import principal_id
from botgateway.tooling.contract import ToolContext

__all__ = ["Route", "asker_channel", "asker_roles", "asking", "choose_route", "current_asker"]

_ASKER: ContextVar[ToolContext | None] = ContextVar("botgateway_llm_asker", default=None)
"""The asker of the turn running in this context; ``None`` outside a turn."""


@contextmanager
def asking(ctx: ToolContext) -> Iterator[None]:
    """Within the block, the model is asked on behalf of ``ctx``'s asker (for :func:`choose_route`).

    The previous asker comes back by value on exit, not by reset token: the turn's
    generator may be closed from another context.
    """
    previous = _ASKER.get()
    _ASKER.set(ctx)
    try:
        yield
    finally:
        _ASKER.set(previous)


def current_asker() -> ToolContext | None:
    """The asker of the running turn, if any."""
    return _ASKER.get()


def asker_channel(ctx: ToolContext) -> str:
    """The qualified channel the asker asked in (``slack:C0OPS``; the terminal's is ``local:<chat>``)."""
    return principal_id(ctx.platform, ctx.chat_id)


def asker_roles(ctx: ToolContext) -> frozenset[str]:
    """The access roles the asker holds here (those the policy granted, and any the context carries)."""
    granted = ctx.grant.roles if ctx.grant is not None else ()
    return frozenset(ctx.roles) | frozenset(granted)


@dataclass(frozen=True)
class Route:
    """One configured route, ready to match: its conditions and the endpoints it chooses, in order."""

    name: str
    """The route's name, for the log."""
    channels: tuple[str, ...]
    """Qualified channel globs; empty: any channel."""
    roles: frozenset[str]
    """Role names, any of which matches; empty: any role."""
    chain: tuple[str, ...]
    """The keys of the model clients to try, in order: the route's choice, then its fallbacks."""

    def matches(self, channel: str, roles: frozenset[str]) -> bool:
        """Whether an asker in ``channel`` holding ``roles`` takes this route."""
        if self.channels and not any(fnmatchcase(channel, pattern) for pattern in self.channels):
            return False
        return not self.roles or bool(self.roles & roles)


def choose_route(routes: Sequence[Route], ctx: ToolContext | None) -> Route | None:
    """The first of ``routes`` that matches ``ctx``'s asker; ``None`` without an asker or a match."""
    if ctx is None:
        return None
    channel, roles = asker_channel(ctx), asker_roles(ctx)
    return next((route for route in routes if route.matches(channel, roles)), None)
