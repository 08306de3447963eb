"""What the access policy grants a principal at the MCP door: where it asks, the decision, and the tools' context.

The door is one more place under the same policy as every chat: an MCP
client asks in a direct chat of its own, the channel ``mcp:<principal>``
(``mcp:api:ci``, ``mcp:local:alice``), so the roles, scopes, approvals and
limits of its principal apply as they do anywhere, and a guardrail keyed
``mcp:*`` caps what any MCP client is offered. The decision is taken per
request over the tools that exist then (MCP servers the gateway uses add
tools as they come up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from botgateway.access import Decision, Place, decide
from botgateway.config.access import AccessConfig
from botgateway.grant import Grant, Limits
from botgateway.principal import Principal
from botgateway.tooling import ToolContext

__all__ = ["PLATFORM", "DoorGrants", "call_limits", "place_of"]

PLATFORM = "mcp"
"""The platform of the door's audit records and tool contexts."""


def place_of(principal: Principal) -> Place:
    """Where ``principal`` asks through the door: its own direct chat, ``mcp:<principal id>``."""
    return Place(channel=f"{PLATFORM}:{principal.id}", direct=True)


def call_limits(limits: Limits) -> Limits:
    """The limits one tool call counts against: each call is one question of its asker (``turns_per_minute``,
    ``concurrent_turns``); it uses no model tokens, so ``tokens_per_day`` neither counts it nor stops it."""
    return dataclasses.replace(limits, tokens_per_day=0)


class DoorGrants:
    """The policy's decisions for the door's callers.

    Args:
        policy: The access policy in force (:func:`botgateway.access.effective_policy`).
        tool_names: The tools that exist now (read per decision).
        always_approve: The tools that ask for an approval of every call themselves (MCP tools annotated destructive).
        defaults: The ``limits:`` section's values, for what a role leaves unset.
    """

    def __init__(
        self, policy: AccessConfig, *, tool_names: Callable[[], Iterable[str]],
        always_approve: Callable[[], Iterable[str]], defaults: Limits,
    ) -> None:
        self._policy = policy
        self._tool_names = tool_names
        self._always_approve = always_approve
        self._defaults = defaults

    def decide(self, principal: Principal) -> Decision:
        """What ``principal`` may do at the door now."""
        return decide(self._policy, principal, place_of(principal), self._tool_names(), limits=self._defaults,
                      always_approve=self._always_approve())

    @staticmethod
    def context(principal: Principal, grant: Grant) -> ToolContext:
        """The tools' context of one call: who asks, where, and what the grant lets the tools see (their scopes)."""
        place = place_of(principal)
        return ToolContext(
            user_id=principal.user, user_name=principal.name or principal.user, platform=PLATFORM,
            conversation_id=place.channel, chat_id=place.channel, is_group=False, roles=frozenset(grant.roles),
            principal=principal, grant=grant,
        )
