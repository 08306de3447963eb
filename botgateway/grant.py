"""What one asker may do in one place: the tools offered, resource scopes, approvals and limits.

The access policy (:mod:`botgateway.access.policy`) decides a :class:`Grant` per
principal and channel; the gateway puts it on the turn's
:class:`~botgateway.tooling.ToolContext`, so the loop offers the model only
:attr:`Grant.tools`, the registry refuses any other call, and the lookup tools
narrow what they search to :attr:`Grant.scopes`. It is plain data with no
imports from the rest of the core, so every layer may hold one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["NO_LIMITS", "Grant", "Limits", "Scope"]


@dataclass(frozen=True, kw_only=True)
class Scope:
    """One slice of resources a role may see; empty fields match anything."""

    provider: str = ""
    """Inventory provider (``aliyun``, ``tencent``, ``aws``, ``inventory``); empty: any."""
    account: str = ""
    """Account label as configured under the provider (``prod``); empty: any."""
    region: str = ""
    """Region (``cn-hangzhou``); empty: any."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Required tag values; a value starting with ``!`` means "anything but" (``env: "!prod"``)."""
    metric_matchers: tuple[str, ...] = ()
    """PromQL label matchers (``env!="prod"``) the metric tools add to every selector of a query; they narrow
    metric queries only (the fields above narrow the inventory)."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one asker may use; 0 is no limit (as in the ``limits:`` section). Kept by
    :mod:`botgateway.access.asker_limits`, not here."""

    turns_per_minute: int = 0
    """Questions started per UTC minute."""
    concurrent_turns: int = 0
    """Questions in progress at once (running or waiting), over all replicas."""
    tokens_per_day: int = 0
    """Model tokens (prompt + completion) per UTC day."""


NO_LIMITS = Limits()
"""No limit at all."""


@dataclass(frozen=True, kw_only=True)
class Grant:
    """The outcome of an allowed access decision."""

    roles: tuple[str, ...]
    """The roles that matched, in policy order (``("oncall",)``)."""
    tools: frozenset[str]
    """Names of the tools offered here: role patterns ∩ the channel's guardrail ∩ the tools that exist."""
    scopes: tuple[Scope, ...] = ()
    """Resources the tools may touch: the union of the roles' scopes; empty means unrestricted."""
    approval: frozenset[str] = frozenset()
    """Offered tools whose calls wait for an approver's decision before they run (:mod:`botgateway.approvals.gate`)."""
    approver: bool = False
    """Whether the asker may approve others' calls (a role with ``approve: true``)."""
    limits: Limits = NO_LIMITS
    """The asker's limits."""

    def offers(self, tool_name: str) -> bool:
        """Whether the tool called ``tool_name`` may be offered and run."""
        return tool_name in self.tools
