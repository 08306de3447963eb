"""The estate tools the model calls: find, list, trace, exposure and changes, bound to one :class:`Estate`.

Each tool reads the fan-out within the asker's scopes (``ToolContext.grant``)
and, on a Refresh (``ToolContext.fresh``), asks the sources again instead of
their caches. Their docstrings are the model's guidance, kept short: every
round offers every enabled tool, so their schemas count against the prompt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from botgateway.grant import Scope
from botgateway.tooling import Tool, ToolContext, ToolError, tool
from tools.estate.fanout import Estate
from tools.estate.matching import Match, Query, QueryError, parse_query, rank
from tools.estate.reach import world_open_rules
from tools.estate.resource import KINDS, Resource, kinds_label
from tools.estate.source import ChangeQuery
from tools.estate.trace import trace
from tools.toolsets.results import ChangesResult, FindResult, TraceResult

__all__ = ["MAX_SINCE_DAYS", "build_estate_tools", "parse_since"]

MAX_SINCE_DAYS = 90
"""How far back the trails are read (CloudTrail's lookup window)."""

_SINCE = re.compile(r"^(\d{1,4})\s*(m|min|h|d|w)$", re.IGNORECASE)
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _scopes(ctx: ToolContext) -> tuple[Scope, ...]:
    return ctx.grant.scopes if ctx.grant is not None else ()


def _query(text: str) -> Query:
    try:
        return parse_query(text)
    except QueryError as exc:
        raise ToolError(str(exc)) from None


def parse_since(text: str, *, now: float | None = None) -> float:
    """``24h``, ``7d``, ``2w``, ``30m`` or an ISO date/time → Unix time; raises :class:`ToolError` when unreadable."""
    now = time.time() if now is None else now
    value = (text or "7d").strip()
    match = _SINCE.match(value)
    if match:
        since = now - int(match.group(1)) * _UNIT_S[match.group(2).lower()]
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ToolError(f"since {value!r} is not understood; give 24h, 7d, 2w or a date such as 2026-11-30") from None
        since = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    if since > now:
        raise ToolError("since is in the future; give a past time such as 24h or 7d")
    return max(since, now - MAX_SINCE_DAYS * 86400)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_estate_tools(estate: Estate, kinds: Sequence[str], toolsets: Sequence[str], *, timeout_s: float | None) -> list[Tool]:
    """The estate tools for the enabled ``toolsets`` searching ``kinds`` (those some source can list)."""
    searchable = tuple(k for k in KINDS if k in kinds and k in estate.kinds())
    tools: list[Tool] = []
    trails = any(source.targets("") for source in estate.sources)
    if searchable:
        tools += [_find_tool(estate, searchable, timeout_s), _list_tool(estate, searchable, timeout_s)]
    if ("network" in toolsets or "dns" in toolsets or "kubernetes" in toolsets) and searchable:
        tools.append(_trace_tool(estate, searchable, timeout_s))
    if "network" in toolsets and "security_group" in searchable:
        tools.append(_exposed_tool(estate, searchable, timeout_s))
    if "changes" in toolsets and trails:
        tools.append(_changes_tool(estate, searchable, timeout_s))
    return tools


def _kind_enum(kinds: Sequence[str]) -> Any:
    return Literal[tuple(kinds)]


def _find_tool(estate: Estate, kinds: Sequence[str], timeout_s: float | None) -> Tool:
    async def find_resource(query: str, kind: str | None = None, *, ctx: ToolContext) -> FindResult:
        q = _query(query)
        view = await estate.view([kind] if kind else kinds, _scopes(ctx), fresh=ctx.fresh)
        matches, total = rank(view.resources, q)
        return FindResult(repr(q.text), tuple(matches), total, view, ", ".join(kinds_label(k) for k in ([kind] if kind else kinds)))

    find_resource.__annotations__["kind"] = _kind_enum(kinds) | None
    find_resource.__doc__ = """Find what owns an IP, DNS name, id or name across every cloud, account and kind (one call).

    Use first for "what is X?" and "where is the orders Redis?".

    Args:
        query: One IP (10.0.3.7), DNS name (api.example.com), resource id or name fragment (orders).
        kind: Only this kind.
    """
    return tool(find_resource, timeout_s=timeout_s, read_only=True)


def _list_tool(estate: Estate, kinds: Sequence[str], timeout_s: float | None) -> Tool:
    async def list_resources(
        kind: str, provider: str | None = None, region: str | None = None, state: str | None = None,
        tag: str | None = None, limit: int = 30, *, ctx: ToolContext,
    ) -> FindResult:
        view = await estate.view([kind], _scopes(ctx), fresh=ctx.fresh, providers=[provider] if provider else None)
        limit = max(1, min(200, limit))
        chosen = [r for r in view.resources if _accepts(r, region, state, tag)]
        matches = tuple(Match(r, 0, "listed") for r in chosen[:limit])
        filters = ", ".join(f"{k}={v}" for k, v in (("provider", provider), ("region", region), ("state", state), ("tag", tag)) if v)
        what = kinds_label(kind) + (f" with {filters}" if filters else "")
        return FindResult(what, matches, len(chosen), view, kinds_label(kind))

    list_resources.__annotations__["kind"] = _kind_enum(kinds)
    list_resources.__doc__ = """List resources of one kind, optionally filtered (filters combine).

    Args:
        kind: The kind to list.
        provider: aliyun, tencent, aws, kubernetes or inventory.
        region: Region or Kubernetes namespace.
        state: State, e.g. running, stopped, available.
        tag: key=value or key.
        limit: Most to return (1-200).
    """
    return tool(list_resources, timeout_s=timeout_s, read_only=True)


def _accepts(resource: Resource, region: str | None, state: str | None, tag: str | None) -> bool:
    if region and resource.region != region.strip():
        return False
    if state and resource.state != state.strip().lower():
        return False
    if tag:
        key, sep, value = tag.partition("=")
        have = {k.lower(): v.lower() for k, v in resource.tags.items()}
        if key.strip().lower() not in have or (sep and have[key.strip().lower()] != value.strip().lower()):
            return False
    return True


def _trace_tool(estate: Estate, kinds: Sequence[str], timeout_s: float | None) -> Tool:
    async def trace_target(target: str, port: int | None = None, *, ctx: ToolContext) -> TraceResult:
        q = _query(target)
        if port is not None and not 0 < port < 65536:
            raise ToolError(f"port {port} is out of range; give 1-65535")
        view = await estate.view(kinds, _scopes(ctx), fresh=ctx.fresh)
        return TraceResult(q.text, port, trace(q, view.resources, port=port), view)

    trace_target.__doc__ = """Walk DNS → load balancer → listeners → backends → security groups; shows where the path breaks.

    Use for "what's behind X?", "why is X down?", "is port N open to the internet?".

    Args:
        target: A DNS name, IP, or resource id/name.
        port: Check this port's path and reachability from 0.0.0.0/0.
    """
    return tool(trace_target, name="trace", timeout_s=timeout_s, read_only=True)


def _exposed_tool(estate: Estate, kinds: Sequence[str], timeout_s: float | None) -> Tool:
    async def exposed_ports(port: int | None = None, *, ctx: ToolContext) -> FindResult:
        if port is not None and not 0 < port < 65536:
            raise ToolError(f"port {port} is out of range; give 1-65535")
        view = await estate.view(kinds, _scopes(ctx), fresh=ctx.fresh)
        matches: list[Match] = []
        for group in (r for r in view.resources if r.kind == "security_group"):
            rules = world_open_rules(group, port)
            if not rules:
                continue
            users = [r.name or r.id for r in view.resources if any(link.target == group.id for link in r.links_of("security_group"))]
            why = "open: " + ", ".join(rule.render() for rule in rules[:4]) + (f"; used by {', '.join(users[:8])}" if users else "; unused")
            matches.append(Match(group, 100, why))
        what = f"security groups open to 0.0.0.0/0 on port {port}" if port else "security groups open to 0.0.0.0/0"
        return FindResult(what, tuple(matches), len(matches), view, "security groups")

    exposed_ports.__doc__ = """Security groups that let the whole internet (0.0.0.0/0, ::/0) in, and what uses them.

    Args:
        port: Only rules covering this port (22 for SSH).
    """
    return tool(exposed_ports, timeout_s=timeout_s, read_only=True)


def _trails_of(estate: Estate, resource: Resource) -> set[tuple[str, str, str]]:
    """The trails that record ``resource``'s changes: its provider's, in its account and region when they have one.

    A source whose trail is not per account (the inventory's one change log describes a whole cluster) is read whole.
    """
    trails = [t for s in estate.sources if s.name == resource.provider for t in s.targets("")]
    mine = [t for t in trails if t.account == resource.account and (not resource.region or t.region in ("", resource.region))]
    return {(t.provider, t.account, t.region) for t in (mine or trails)}


def _changes_tool(estate: Estate, kinds: Sequence[str], timeout_s: float | None) -> Tool:
    async def resource_changes(resource: str, since: str = "7d", *, ctx: ToolContext) -> ChangesResult:
        q = _query(resource)
        start = parse_since(since)
        scopes = _scopes(ctx)
        resolved: Resource | None = None
        if kinds:
            view = await estate.view(kinds, scopes, fresh=ctx.fresh)
            best, _ = rank(view.resources, q, limit=1)
            if best and best[0].score >= 90:
                resolved = best[0].resource
        if resolved is not None:
            query = ChangeQuery(resource_id=resolved.id, resource_name=resolved.name, since=start)
            where = _trails_of(estate, resolved)
            changes, failures, sources = await estate.changes(query, scopes, where=where)
        else:
            changes, failures, sources = await estate.changes(ChangeQuery(resource_name=q.text, since=start), scopes)
        return ChangesResult(q.text, tuple(changes), _iso(start), tuple(failures), tuple(sources), resolved)

    resource_changes.__doc__ = """Who changed a resource, how and when, from the clouds' audit trails and Kubernetes events.

    Use for "who stopped prod-db-03?".

    Args:
        resource: The resource's name or id.
        since: How far back: 24h, 7d (default), 2w or a date.
    """
    return tool(resource_changes, timeout_s=timeout_s, read_only=True)
