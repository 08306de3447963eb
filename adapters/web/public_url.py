"""The gateway's address as a client reached it: where a link in an answer must point (``https://ops.example.com``).

The scheme is the request's own, or the ``X-Forwarded-Proto`` a TLS-ending
proxy sets (the rule the console's ``Secure`` cookie follows). The host is the
request's ``Host``, or the ``X-Forwarded-Host`` of a trusted proxy
(``web.trusted_proxies``): a header that changes where a link points is
believed from a trusted proxy only. A host that is no plain host name or
address is not used.
"""

from __future__ import annotations

import re

from aiohttp import web

from adapters.web.client_addr import TrustedProxies

__all__ = ["public_origin"]

_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$")
"""A host name or address, with an optional port: nothing that could carry a path, credentials or markup."""


def _first(request: web.Request, header: str) -> str:
    return request.headers.get(header, "").split(",")[0].strip()


def public_origin(request: web.Request, proxies: TrustedProxies) -> str:
    """``scheme://host[:port]`` of the gateway as ``request``'s client reached it."""
    forwarded = _first(request, "X-Forwarded-Proto").lower()
    scheme = forwarded if forwarded in ("http", "https") else ("https" if request.secure else "http")
    host = ""
    if proxies.trusts(request.remote or ""):
        host = _first(request, "X-Forwarded-Host")
    if not _HOST.match(host):
        host = request.host
    if not _HOST.match(host):
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        address, port = (sockname[0], sockname[1]) if isinstance(sockname, tuple) and len(sockname) >= 2 else (
            "127.0.0.1", 80)
        host = f"[{address}]:{port}" if ":" in str(address) else f"{address}:{port}"
    return f"{scheme}://{host}"
