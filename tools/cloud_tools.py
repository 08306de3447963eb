"""The server-lookup tools the model calls, bound to the configured providers.

Per-provider address lookups (``search_ecs_by_ip``, ``search_cvm_by_ip``,
``search_ec2_by_ip``, ``search_inventory_by_ip``) let the model ask two clouds
at once in one round; ``find_server`` and ``list_servers`` cover every
provider. Only the tools of configured providers exist. They only look
servers up, so each says it is read-only (an alert's investigation may use them).
Each result names the accounts and regions that answered, and when
(:attr:`SearchResult.sources`); a Refresh (``ToolContext.fresh``) asks the
providers again instead of their caches.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, get_args

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from botgateway.grant import Scope
from botgateway.tooling import Tool, ToolContext, ToolError, tool
from tools.providers.base import Provider, ServerQuery, ip_query
from tools.server_record import STATUSES, ProviderFailure, SearchResult, provider_label


def _parse_ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return value
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise PydanticCustomError(
            "ip_address", "'{input}' is not a valid IPv4 or IPv6 address (for example 10.0.1.100)", {"input": str(value)}
        ) from None


class IpAddress:
    """An IP address argument: a plain string in the schema, a clear message when malformed.

    A class rather than ``Annotated[...]`` because ``@tool`` reads hints without extras.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(_parse_ip)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"type": "string"}


Status = Literal["running", "stopped", "starting", "stopping", "pending", "rebooting", "terminated", "expired"]
assert set(get_args(Status)) == set(STATUSES)

IP_TOOLS: Mapping[str, tuple[str, str]] = {
    "inventory": ("search_inventory_by_ip", "on-prem hosts in the static inventory"),
    "aliyun": ("search_ecs_by_ip", "Alibaba Cloud ECS instances (private, public and elastic IPs)"),
    "tencent": ("search_cvm_by_ip", "Tencent Cloud CVM instances (private and public IPs)"),
    "aws": ("search_ec2_by_ip", "AWS EC2 instances (private, public and secondary interface IPs)"),
}
"""Per provider: the name of its address lookup tool and what it searches."""

MAX_LIMIT = 200
"""Most servers ``list_servers`` returns in one call."""

_LOOKS_LIKE_IP = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){2,4}|[0-9a-fA-F]{0,4}(:[0-9a-fA-F]{0,4}){2,8}")
"""Text the user meant as an address (so a typo gets an address error, not a name search)."""


def _scopes(ctx: ToolContext) -> tuple[Scope, ...]:
    """The asker's resource scopes; none (unrestricted) outside the gateway."""
    return ctx.grant.scopes if ctx.grant is not None else ()


async def _search(
    providers: Sequence[Provider],
    query: ServerQuery,
    scopes: Sequence[Scope] = (),
    *,
    limit: int | None = None,
    fresh: bool = False,
) -> SearchResult:
    """Ask ``providers`` concurrently, within ``scopes`` (``fresh``: not their caches); a provider bug is reported
    like a provider failure."""

    async def one(provider: Provider) -> SearchResult:
        try:
            return await provider.search(query, scopes, fresh=fresh)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"internal error ({type(exc).__name__})"
            return SearchResult(
                query.describe(), failures=(ProviderFailure(provider.name, reason),), searched=(provider.name,), scoped=bool(scopes)
            )

    parts = await asyncio.gather(*(one(p) for p in providers))
    merged = SearchResult.merge(query.describe(), parts, limit=limit if limit is not None else query.limit)
    return _scoped(merged, scopes)


def _scoped(result: SearchResult, scopes: Sequence[Scope]) -> SearchResult:
    """``result`` marked as narrowed by ``scopes`` (even when no provider was asked)."""
    return replace(result, scoped=True) if scopes and not result.scoped else result


def ip_lookup_tool(provider: Provider, *, timeout_s: float | None) -> Tool:
    """The address lookup tool of one provider."""
    tool_name, what = IP_TOOLS[provider.name]

    async def lookup(ip: IpAddress, ctx: ToolContext) -> SearchResult:
        # ``ip`` is what the validator returns (an ipaddress object); IpAddress only marks the argument's schema.
        return await _search([provider], ip_query(str(ip)), _scopes(ctx), fresh=ctx.fresh)

    lookup.__doc__ = f"""Find {what} that own an IP address, across every configured account and region.

    Args:
        ip: The IPv4 or IPv6 address to look up, e.g. 10.0.1.100.
    """
    return tool(lookup, name=tool_name, timeout_s=timeout_s, read_only=True)


def find_server_tool(providers: Sequence[Provider], *, timeout_s: float | None) -> Tool:
    """``find_server(query)`` across every provider."""
    labels = ", ".join(provider_label(p.name) for p in providers)

    async def find_server(query: str, ctx: ToolContext) -> SearchResult:
        text = query.strip()
        if not text:
            raise ToolError("query is empty; give an IP address, an instance id or part of a host name")
        scopes, fresh = _scopes(ctx), ctx.fresh
        try:
            return await _search(providers, ip_query(text), scopes, fresh=fresh)
        except ValueError:
            if _LOOKS_LIKE_IP.fullmatch(text):
                raise ToolError(f"{text!r} is not a valid IP address; check the digits (each part is 0-255)") from None
        by_id = [p for p in providers if p.owns_id(text)]
        # The id lookup and the name search are independent: ask both at once.
        searches = [_search(by_id, ServerQuery("id", text), scopes, fresh=fresh)] if by_id else []
        searches.append(_search(providers, ServerQuery("list", name=text, limit=50), scopes, fresh=fresh))
        parts = await asyncio.gather(*searches)
        return SearchResult.merge(f"'{text}' (instance id or name)", parts, limit=50)

    find_server.__doc__ = f"""Find servers by IP address, instance id or part of the name, across every provider ({labels}).

    Args:
        query: An IP address (10.0.1.100), an instance id (i-bp1abc..., ins-..., i-0abc...) or a name substring (prod-db).
    """
    return tool(find_server, timeout_s=timeout_s, read_only=True)


def list_servers_tool(providers: Sequence[Provider], *, timeout_s: float | None) -> Tool:
    """``list_servers(...)`` with filters across every (or one) provider."""
    names = tuple(p.name for p in providers)

    async def list_servers(
        provider: str | None = None,
        region: str | None = None,
        status: Status | None = None,
        name: str | None = None,
        tag: str | None = None,
        limit: int = 20,
        *,
        ctx: ToolContext,
    ) -> SearchResult:
        limit = max(1, min(MAX_LIMIT, limit))
        chosen = [p for p in providers if provider is None or p.name == provider]
        query = ServerQuery(
            "list",
            region=(region or "").strip() or None,
            status=status,
            name=(name or "").strip() or None,
            tag=(tag or "").strip() or None,
            limit=limit,
        )
        return await _search(chosen, query, _scopes(ctx), limit=limit, fresh=ctx.fresh)

    # The provider enum is only known now; pydantic reads the real object, not a string.
    list_servers.__annotations__["provider"] = Literal[names] | None
    list_servers.__doc__ = f"""List servers, optionally filtered; filters combine (AND).

    Args:
        provider: Only this provider ({", ".join(names)}).
        region: Only this region or data centre (cn-hangzhou, ap-guangzhou, us-east-1, idc-shanghai).
        status: Only servers in this state.
        name: Only names containing this text (case-insensitive).
        tag: Only servers with this tag, as key=value or just key (env=prod, role).
        limit: Most servers to return (1-200, default 20).
    """
    return tool(list_servers, timeout_s=timeout_s, read_only=True)


def build_cloud_tools(providers: Sequence[Provider], *, timeout_s: float | None) -> tuple[list[Tool], list[str]]:
    """Every lookup tool for ``providers``: (all tools, the per-provider IP lookup tool names)."""
    lookups = [ip_lookup_tool(p, timeout_s=timeout_s) for p in providers if p.name in IP_TOOLS]
    tools: list[Tool] = [*lookups]
    if providers:
        tools += [find_server_tool(providers, timeout_s=timeout_s), list_servers_tool(providers, timeout_s=timeout_s)]
    return tools, [t.name for t in lookups]
