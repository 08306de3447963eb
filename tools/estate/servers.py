"""Servers in the estate: the existing server providers, seen as estate sources of the ``server`` kind.

The server tools (``find_server``, ``list_servers``, the per-cloud IP lookups)
keep their providers; this adapter lists the same providers' servers per
(account, region) so ``find_resource`` and ``trace`` see servers beside every
other kind, with their security groups linked.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.estate.resource import Change, Link, Resource
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, FailureKind, Listing, Prerequisite, SourceError, Target
from tools.providers.base import Provider
from tools.providers.cloud import CloudProvider
from tools.providers.inventory import InventoryProvider
from tools.server_record import ProviderFailure, Server

__all__ = ["ServerSource", "server_resource"]


def server_resource(server: Server) -> Resource:
    """The estate's record of one server."""
    links = tuple(Link(rel="security_group", target=g, kind="security_group") for g in server.security_groups)
    if server.vpc:
        links += (Link(rel="in_vpc", target=server.vpc),)
    details = {k: v for k, v in (("type", server.instance_type), ("zone", server.zone), ("os", server.os),
                                 ("spec", server.spec), ("created", server.created_at), ("expires", server.expires_at)) if v}
    return Resource(
        kind="server", provider=server.provider, account=server.account, region=server.region, id=server.instance_id,
        name=server.name, state=server.status, private_ips=server.private_ips, public_ips=server.public_ips,
        tags=dict(server.tags), owner=server.tags.get("owner", ""), links=links, details=details,
    )


def _failure_kind(reason: str) -> FailureKind:
    text = reason.lower()
    for needle, kind in (("permission", "permission"), ("credentials", "credentials"), ("throttl", "throttled"),
                         ("timed out", "timeout"), ("unreachable", "unreachable")):
        if needle in text:
            return kind  # type: ignore[return-value]
    return "error"


class ServerSource:
    """One server provider (a cloud or the static inventory) as an estate source of servers."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    @property
    def name(self) -> str:
        """The provider's key."""
        return self.provider.name

    def kinds(self) -> frozenset[str]:
        """Servers only."""
        return frozenset({"server"})

    def targets(self, kind: str = "") -> Sequence[Target]:
        """Each configured (account, region) of a cloud; the inventory file as one target. No trail."""
        if kind != "server":
            return []
        if isinstance(self.provider, CloudProvider):
            return [Target(self.name, a.name, r) for a in self.provider.config.accounts for r in a.regions]
        account = self.provider.account if isinstance(self.provider, InventoryProvider) else "default"
        return [Target(self.name, account, "")]

    def api_of(self, kind: str) -> str:
        """The server listing API."""
        return getattr(self.provider, "api", "inventory file")

    async def list(self, target: Target, kind: str) -> Listing:
        """The target's servers."""
        if isinstance(self.provider, CloudProvider):
            # The fan-out keeps this listing for its own TTL (and skips it on a Refresh): the provider's cache would
            # only make a Refresh serve old servers.
            answer = await self.provider.list_region(target.account, target.region, limit=MAX_PER_LISTING, fresh=True)
            if isinstance(answer, ProviderFailure):
                raise SourceError(_failure_kind(answer.reason), answer.reason)
            return Listing(tuple(server_resource(s) for s in answer.servers), answer.more, self.api_of(kind))
        if isinstance(self.provider, InventoryProvider):
            servers = self.provider.servers
            return Listing(tuple(server_resource(s) for s in servers[:MAX_PER_LISTING]), len(servers) > MAX_PER_LISTING,
                           "inventory file")
        raise SourceError("not_found", f"{self.name} cannot list servers")

    async def changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """Servers' changes come from each cloud's estate source, not from here."""
        return []

    def prerequisites(self) -> Sequence[Prerequisite]:
        """Checked by the server catalog when the provider is built."""
        return []

    async def probe(self, target: Target) -> None:
        """List the target's servers."""
        await self.list(target, "server")

    async def start(self) -> None:
        """The provider is started by the catalog."""

    async def aclose(self) -> None:
        """The provider is closed by the catalog."""
