"""Wiring the web console onto the gateway's HTTP server: its sessions (from ``web:``) and what its Status page reads.

Called by :func:`botgateway.cli.runtime.build_runtime` with the API, before the
server starts: the console's routes join the API's on the same application, and
the API's authentication finds the console's sessions there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botgateway.config import Config

if TYPE_CHECKING:
    from botgateway.budget import RateBudget
    from botgateway.http import HttpServer, Readiness
    from botgateway.stores.base import Store

__all__ = ["mount_web_console"]


def mount_web_console(
    config: Config, http: HttpServer, store: Store, *, readiness: Readiness | None, budget: RateBudget,
    instance_id: str,
) -> None:
    """Serve the console on ``http`` (before it starts): logins by ``web.admin_password_hash`` or ``web.api_keys``,
    sessions in ``store``, the Status page over ``readiness``, ``budget`` and this process's ``instance_id``."""
    from adapters.web.auth import ApiKeys
    from adapters.web.client_addr import TrustedProxies
    from adapters.web.console_routes import mount_console
    from adapters.web.console_status import StatusParts
    from adapters.web.session import SessionBook

    web = config.web
    book = SessionBook(store, admin_password_hash=web.admin_password_hash, api_keys=ApiKeys(web.api_keys),
                       proxies=TrustedProxies(web.trusted_proxies))
    parts = StatusParts(store=store, readiness=lambda: readiness, budget=lambda: budget,
                        instance_id=lambda: instance_id)
    mount_console(http.app, book, parts)
