"""Read-only tool calls as an alert route's principal, without a model: the role's decision, the registry, the audit.

A follow-up lookup of the alert desk (which host an alert names) calls a
tool itself, yet as the route's investigation would: as ``alerts:<route>``
holding the route's role, where the card is posted. The access policy decides
what that role may use there (the channel's guardrail included) and its
decision travels on the tool context, so the tools apply its resource scopes
and the registry checks it again before running the call, each with its
timeout. Only tools that say they are read-only, and that need no approval, are
called. The calls are written to the audit trail as one record of the route's
principal: ``botgateway audit --user alerts:<route>`` lists them beside the
investigation's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from botgateway.access import Decision, Place, decide_as_role, effective_policy
from botgateway.config import AccessConfig, AlertRouteConfig
from botgateway.principal import principal_id
from botgateway.redaction import RedactSecrets, redact_text
from botgateway.sink import CardTarget
from botgateway.stores.base import AuditRecord, AuditStore
from botgateway.tooling import ToolContext, ToolOutcome
from botgateway.unprompted import gateway_principal

__all__ = ["CALL_TIMEOUT_S", "RouteCall", "RouteTools", "ToolExecutor"]

log = structlog.get_logger(__name__)

CALL_TIMEOUT_S = 10.0
"""Longest one call may take, whatever the tool's own timeout: a lookup is a note on a card, not an answer."""

AUDIT_WRITE_TIMEOUT_S = 5.0
"""Longest wait for the audit record; a slow Store is logged, never waited out."""

_REDACT = RedactSecrets()


class ToolExecutor(Protocol):
    """What the calls need of the tool registry (:class:`~botgateway.tooling.ToolRegistry`)."""

    def read_only_names(self) -> frozenset[str]:
        """Names of the tools that say they only look things up."""
        ...

    def approval_required(self) -> frozenset[str]:
        """Names of the tools that ask for an approval of every call themselves."""
        ...

    async def execute(self, name: str, raw_arguments: str | Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run one call; failures come back as failed outcomes."""
        ...


@dataclass(frozen=True)
class RouteCall:
    """One call to make."""

    name: str
    """The tool."""
    arguments: Mapping[str, Any]
    """Its arguments."""


class RouteTools:
    """Runs read-only calls as a route's principal and audits them (see the module docstring)."""

    def __init__(
        self,
        tools: ToolExecutor,
        *,
        access: AccessConfig | None,
        audit: AuditStore,
        timeout_s: float = CALL_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``access``: the ``access:`` section (its safe default when None); ``timeout_s``: each call's longest."""
        self._tools = tools
        self._policy = effective_policy(access)
        self._audit = audit
        self._timeout_s = timeout_s
        self._clock = clock

    def usable(self, route: AlertRouteConfig, target: CardTarget) -> frozenset[str]:
        """The read-only tools ``route``'s role may call where ``target`` is, without an approval."""
        return _usable(self._decide(route, target))

    async def call(
        self, route: AlertRouteConfig, target: CardTarget, calls: Sequence[RouteCall], *, purpose: str,
        conversation_id: str,
    ) -> list[ToolOutcome]:
        """Run ``calls`` at once as ``route``'s principal where ``target`` is, then write their audit record
        (``purpose``: what it says was asked). One outcome per call, in order; a call the role may not make there is
        not run (its outcome says so, and it is not audited: nothing ran). Never raises except on cancellation."""
        decision = self._decide(route, target)
        usable = _usable(decision)
        ctx = _context(decision, target, conversation_id)
        started = self._clock()
        chosen = [i for i, c in enumerate(calls) if c.name in usable]
        ran = await asyncio.gather(*(self._one(calls[i], ctx) for i in chosen))
        outcomes = [_not_allowed(c) for c in calls]
        for i, outcome in zip(chosen, ran, strict=True):
            outcomes[i] = outcome
        if chosen:
            entries = [_entry(calls[i], outcomes[i], started) for i in chosen]
            await self._record(route, target, decision, conversation_id, purpose, entries, started)
        return outcomes

    def _decide(self, route: AlertRouteConfig, target: CardTarget) -> Decision:
        principal = gateway_principal("alerts", route.name)
        place = Place(channel=principal_id(target.platform, target.chat_id), direct=not target.is_group)
        names = self._tools.read_only_names()
        return decide_as_role(self._policy, principal, place, names, route.role,
                              always_approve=self._tools.approval_required())

    async def _one(self, call: RouteCall, ctx: ToolContext) -> ToolOutcome:
        began = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._tools.execute(call.name, call.arguments, ctx)
        except TimeoutError:
            reason = f"timed out after {self._timeout_s:g} s"
            return ToolOutcome(ok=False, content=f"Error: {reason}", summary=reason, error=reason,
                               duration_s=time.monotonic() - began, arguments=dict(call.arguments), source="gateway")

    async def _record(
        self, route: AlertRouteConfig, target: CardTarget, decision: Decision, conversation_id: str, purpose: str,
        entries: list[dict[str, Any]], started: float,
    ) -> None:
        roles = decision.grant.roles if decision.grant is not None else ()
        ok = all(e.get("ok") for e in entries)
        record = AuditRecord(
            turn_id=f"lookup-{uuid.uuid4().hex[:16]}", platform=target.platform, conversation_id=conversation_id,
            user_id=decision.principal.id, question=redact_text(purpose), outcome="done" if ok else "failed:tool",
            tool_calls=tuple(entries), started_at=started, duration_s=round(self._clock() - started, 3),
            principal=decision.principal.id, team=target.workspace_id, channel=target.chat_id,
            role=",".join(sorted(roles)),
        )
        try:
            async with asyncio.timeout(AUDIT_WRITE_TIMEOUT_S):
                await self._audit.record_audit(record)
        except Exception as exc:  # TimeoutError included: the lookup's result still counts
            log.warning("alerts.lookup_audit_failed", route=route.name, error=type(exc).__name__)


def _usable(decision: Decision) -> frozenset[str]:
    """The tools the decision lets run unattended: those it grants that need no approval."""
    grant = decision.grant
    return frozenset(grant.tools - grant.approval) if grant is not None else frozenset()


def _not_allowed(call: RouteCall) -> ToolOutcome:
    reason = f"not allowed: {call.name!r} is not a read-only tool this route's role may use here"
    return ToolOutcome(ok=False, content=f"Error: {reason}", summary=reason, duration_s=0.0,
                       arguments=dict(call.arguments), error=reason, source="gateway")


def _context(decision: Decision, target: CardTarget, conversation_id: str) -> ToolContext:
    """The tool context of the route's principal where the card is, with the policy's decision on it."""
    principal = decision.principal
    grant = decision.grant
    return ToolContext(
        user_id=principal.id, user_name=principal.name, platform=target.platform, conversation_id=conversation_id,
        chat_id=target.chat_id, is_group=target.is_group, roles=frozenset(grant.roles if grant else ()),
        principal=principal, grant=grant,
    )


def _entry(call: RouteCall, outcome: ToolOutcome, started: float) -> dict[str, Any]:
    """A call as the audit record keeps it (the shape a turn's calls have)."""
    entry: dict[str, Any] = {
        "name": call.name, "arguments": _REDACT.redact(dict(call.arguments)), "started_at": started,
        "ok": outcome.ok, "summary": redact_text(outcome.summary), "duration_s": round(outcome.duration_s, 3),
    }
    if outcome.sources:
        entry["sources"] = [
            {k: v for k, v in dataclasses.asdict(s).items() if v not in ("", 0.0, False)} for s in outcome.sources
        ]
    return entry
