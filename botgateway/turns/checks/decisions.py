"""The configured access policy's decisions over the tools that exist now, for the checks that need one."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from botgateway.access import Decision, decide_as_role, decide_message, place_of
from botgateway.config import AccessConfig
from botgateway.grant import Limits
from botgateway.messages import InboundMessage

__all__ = ["Decisions"]


class Decisions:
    """The policy's decision for a message's asker, or for a turn nobody typed as a role.

    Args:
        policy: The access policy in force (:func:`botgateway.access.effective_policy`).
        tool_names: The tools that exist now (read per decision: MCP servers add tools as they come up).
        always_approve: The tools that ask for an approval of every call themselves.
        limits: The ``limits:`` section's values, for what a role leaves unset.
    """

    def __init__(
        self, policy: AccessConfig, *, tool_names: Callable[[], Iterable[str]],
        always_approve: Callable[[], Iterable[str]], limits: Limits,
    ) -> None:
        self._policy = policy
        self._tool_names = tool_names
        self._always_approve = always_approve
        self._limits = limits

    def for_message(self, msg: InboundMessage) -> Decision:
        """What ``msg``'s asker may do where they asked."""
        return decide_message(self._policy, msg, self._tool_names(), limits=self._limits,
                              always_approve=self._always_approve())

    def as_role(self, msg: InboundMessage, role: str, tools: frozenset[str] | None) -> Decision:
        """What ``msg``'s principal may do where it is posted holding exactly ``role``, over ``tools`` when given."""
        names = [n for n in self._tool_names() if tools is None or n in tools]
        return decide_as_role(self._policy, msg.asker, place_of(msg), names, role, limits=self._limits,
                              always_approve=self._always_approve())
