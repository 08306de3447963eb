"""The address a request came from, seen through the reverse proxies the config trusts (``web.trusted_proxies``).

Behind a proxy every connection comes from the proxy, so a per-address rule
(the console's failed-login throttle) would count every client as one. A proxy
appends the address it saw to ``X-Forwarded-For``; only a trusted proxy's word
counts: when the peer is trusted, the client is the last hop of the header that
is not itself a trusted proxy (a client can put anything at the front of the
header, but not behind what the trusted proxies appended). An untrusted peer is
the client, whatever it sends.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from aiohttp import web

__all__ = ["TrustedProxies"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS = 32
"""The most ``X-Forwarded-For`` hops read (from the right): no real chain of proxies is longer."""


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class TrustedProxies:
    """The configured proxies (addresses or CIDR networks), and the client address of a request behind them."""

    def __init__(self, networks: Iterable[str] = ()) -> None:
        """``networks``: ``10.0.0.5``, ``10.0.0.0/8``, ``::1`` … (validated by the config)."""
        self._networks: Sequence[Network] = tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks)

    def trusts(self, address: str) -> bool:
        """Whether ``address`` is one of the trusted proxies."""
        parsed = _address(address)
        return parsed is not None and any(parsed in network for network in self._networks)

    def client(self, request: web.Request) -> str:
        """The client address of ``request``: its peer, or, when the peer is a trusted proxy, the last
        ``X-Forwarded-For`` hop that is not (the peer's own address when every hop is trusted or the header is
        missing or malformed)."""
        peer = request.remote or ""
        if not self._networks or not self.trusts(peer):
            return peer
        header = ",".join(request.headers.getall("X-Forwarded-For", []))
        hops = [hop.strip() for hop in header.split(",") if hop.strip()][-MAX_HOPS:]
        for hop in reversed(hops):
            parsed = _address(hop)
            if parsed is None:
                return peer  # a hop a trusted proxy would not write: believe nothing to its left
            if not self.trusts(str(parsed)):
                return str(parsed)
        return peer
