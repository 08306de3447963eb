"""What every server provider offers: the question it answers and the protocol it keeps.

The cloud providers share their fan-out in :mod:`tools.providers.cloud` and
their SDK plumbing in :mod:`tools.providers.sdk`; the static inventory is
:mod:`tools.providers.inventory`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from botgateway.grant import Scope
from tools.server_record import SearchResult, Server

__all__ = ["IPAddress", "Provider", "ServerQuery", "ip_query"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ServerQuery:
    """A normalized question to a provider (also the cache key)."""

    kind: Literal["ip", "id", "list"]
    """Look up by address, by instance id, or list with filters."""
    value: str = ""
    """The address (compressed form) or instance id; empty for ``list``."""
    region: str | None = None
    """Only this region."""
    status: str | None = None
    """Only this normalized status."""
    name: str | None = None
    """Name substring (case-insensitive)."""
    tag: str | None = None
    """``key`` or ``key=value``."""
    limit: int = 50
    """Most servers wanted."""

    def describe(self) -> str:
        """The query in words, for the model."""
        if self.kind == "ip":
            return f"ip {self.value}"
        if self.kind == "id":
            return f"instance id {self.value}"
        filters = [
            f"{k}={v}" for k, v in (("region", self.region), ("status", self.status), ("name", self.name), ("tag", self.tag)) if v
        ]
        return "filters " + ", ".join(filters) if filters else "all instances"

    def accepts(self, server: Server) -> bool:
        """Client-side check of the filters (APIs differ in what they filter themselves)."""
        if self.status and server.status != self.status:
            return False
        if self.name and self.name.lower() not in server.name.lower():
            return False
        if self.tag and not server.matches_tag(self.tag):
            return False
        if self.region and server.region != self.region:
            return False
        return True


def ip_query(ip: IPAddress | str) -> ServerQuery:
    """A by-address query; raises ValueError on a malformed address."""
    return ServerQuery("ip", str(ipaddress.ip_address(str(ip).strip())))


class Provider(Protocol):
    """A source of servers: a cloud (all its accounts and regions) or the static inventory."""

    @property
    def name(self) -> str:
        """Provider key (``aliyun``, ``tencent``, ``aws``, ``inventory``): read only, so a class's constant fits."""
        ...

    def owns_id(self, instance_id: str) -> bool:
        """Whether ``instance_id`` looks like one of this provider's ids."""
        ...

    async def search(self, query: ServerQuery, scopes: Sequence[Scope] = (), *, fresh: bool = False) -> SearchResult:
        """Answer ``query``; failures are reported in the result, never raised.

        The result's ``sources`` name each account and region that answered,
        and when (a cached answer says so). ``fresh`` (a Refresh) bypasses
        every cache: the provider is asked now, and its answer cached anew.

        With ``scopes`` (the asker's, see :mod:`tools.providers.scope`) only the
        accounts and regions they allow are asked, and only servers whose tags
        they allow are returned; the result is then marked ``scoped``. Empty
        ``scopes`` restrict nothing.
        """
        ...

    async def aclose(self) -> None:
        """Release clients and threads."""
        ...
