"""The governed tool plane an MCP client reaches: the caller's tools, and each call checked, counted and audited.

The same rules as a chat turn's tool calls, in the same order: the access
policy decides what the caller may use (:mod:`.grants`; a refused principal is
listed nothing and every call is refused with the policy's reason); a tool it
is not offered is refused by the registry, as a model's guessed call is; a call
that needs an approver is refused (:mod:`.approval` says why); each call counts
as one question against its asker's limits (:mod:`botgateway.access.asker_limits`);
the registry runs it with its timeout, size cap and permission hook, and the
tools narrow what they read to the grant's scopes. Every call, refused or run,
is audited (:mod:`.audit`) before it is answered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from adapters.mcp.approval import approval_refusal
from adapters.mcp.audit import CallAudit, DoorCall
from adapters.mcp.grants import DoorGrants, call_limits
from adapters.mcp.listing import listed_tools
from adapters.mcp.results import CallAnswer
from botgateway.access import PrincipalLimits, refusal_note
from botgateway.grant import Grant
from botgateway.principal import Principal
from botgateway.tooling import ToolContext, ToolOutcome, ToolRegistry

__all__ = ["McpDoor"]

_LOCALE = "en"
"""MCP carries no locale: refusals are worded in English."""


class McpDoor:
    """The caller's tools, and its calls run under the access policy.

    Args:
        tools: The live registry (the one the chat's model is offered).
        grants: The policy's decisions for the door's callers.
        limits: The per-asker limits (counted in the Store, shared with every front door and replica).
        audit: Where calls are written down.
    """

    def __init__(self, tools: ToolRegistry, grants: DoorGrants, limits: PrincipalLimits, audit: CallAudit) -> None:
        self._tools = tools
        self._grants = grants
        self._limits = limits
        self._audit = audit

    def tools_for(self, principal: Principal) -> list[types.Tool]:
        """The tools ``principal`` may use now (none when the policy refuses it)."""
        grant = self._grants.decide(principal).grant
        if grant is None:
            return []
        return listed_tools(self._tools, self._grants.context(principal, grant), grant)

    async def call(self, principal: Principal, name: str, arguments: Mapping[str, Any], *, transport: str) -> CallAnswer:
        """Run ``name`` for ``principal`` if the policy, the approvals and the limits let it; audited either way."""
        decision = self._grants.decide(principal)
        grant = decision.grant
        call = DoorCall(call_id=uuid.uuid4().hex, principal=principal, tool=name, arguments=dict(arguments),
                        roles=grant.roles if grant is not None else (), transport=transport, started_at=time.time())
        if grant is None:
            note = f"not allowed: {refusal_note(decision, _LOCALE)}"
            return await self._refused(call, note, f"refused:{decision.refusal}")
        if not grant.offers(name):
            # The registry refuses it in the words a model's guessed call gets (unknown, or not offered here).
            outcome = await self._tools.execute(name, call.arguments, self._context(call, grant))
            return await self._ended(call, outcome, "refused:not_offered")
        if name in grant.approval:
            return await self._refused(call, approval_refusal(name), "refused:approval",
                                       approval="refused: nobody can approve through MCP")
        return await self._counted(call, grant)

    async def _counted(self, call: DoorCall, grant: Grant) -> CallAnswer:
        """Run ``call`` as one question of its asker, unless that asker reached a limit."""
        principal = call.principal.id
        limits = call_limits(grant.limits)
        hit = await self._limits.admit(principal, call.call_id, limits)
        if hit is not None:
            return await self._refused(call, hit.note(_LOCALE, self._limits.clock()), f"limit:{hit.limit}")
        try:
            await self._audit.started(call)
            outcome = await self._tools.execute(call.tool, call.arguments, self._context(call, grant))
        finally:
            if limits.concurrent_turns:
                await self._limits.turn_ended(principal, call.call_id, 0)
        return await self._ended(call, outcome)

    def _context(self, call: DoorCall, grant: Grant) -> ToolContext:
        return self._grants.context(call.principal, grant)

    async def _refused(self, call: DoorCall, reason: str, status: str, *, approval: str = "") -> CallAnswer:
        outcome = self._tools.failure(reason, arguments=call.arguments)
        await self._audit.ended(call, outcome, status, approval=approval)
        return self._answer(call, outcome)

    async def _ended(self, call: DoorCall, outcome: ToolOutcome, status: str = "") -> CallAnswer:
        await self._audit.ended(call, outcome, status or ("done" if outcome.ok else "failed:tool"))
        return self._answer(call, outcome)

    def _answer(self, call: DoorCall, outcome: ToolOutcome) -> CallAnswer:
        text = self._tools.model_text(outcome, tool=call.tool, call_id=call.call_id)
        return CallAnswer(tool=call.tool, call_id=call.call_id, outcome=outcome, text=text)
