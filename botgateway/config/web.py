"""The ``web:`` section: the HTTP API (``/v1/…``) and the web console on the gateway's HTTP server.

Both are served only while the HTTP server runs (``http.enabled``, or
``metrics.enabled``, or ``alerts.enabled``). The default ``http.host`` is the
loopback address; serving on any other address needs a way in, an API key or
the admin password, or the section must be ``enabled: false``
(:func:`web_bind_problems`, checked with the rest of the file).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Protocol

from pydantic import Field, SecretStr, field_validator

from botgateway.config.section import Section
from botgateway.password_hash import is_password_hash

__all__ = ["ApiKeyConfig", "WebConfig", "http_served", "web_bind_problems", "web_served"]

_KEY_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
"""An API key's name: the user part of its principal (``api:<name>``) and the prefix of its conversations."""
MIN_KEY_CHARS = 16
"""Shortest API key accepted: a key is a password a program sends with each request."""


class ApiKeyConfig(Section):
    """One API key: a program's way in, as the principal ``api:<name>``."""

    name: str
    """The key's name: its principal is ``api:<name>`` (an access role lists that in ``members``)."""
    key: SecretStr
    """The secret the client sends as ``Authorization: Bearer <key>`` (at least 16 characters; e.g. from
    ``${BOTGATEWAY_API_KEY}``)."""

    @field_validator("name")
    @classmethod
    def _a_plain_name(cls, value: str) -> str:
        if not _KEY_NAME.match(value):
            raise ValueError(f"API key name {value!r} must be 1-64 letters, digits, '_', '.' or '-'")
        return value

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < MIN_KEY_CHARS:
            # The key itself is never repeated in the message.
            raise ValueError(f"an API key must be at least {MIN_KEY_CHARS} characters long "
                             "(e.g. `openssl rand -hex 24`)")
        return value


class WebConfig(Section):
    """The HTTP API and the web console, on the gateway's HTTP server."""

    enabled: bool = True
    """Serve ``/v1/…`` (the API) and ``/`` (the console) while the HTTP server runs."""
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    """Keys programs authenticate with; each is the principal ``api:<name>`` of the access policy."""
    admin_password_hash: str = ""
    """The console's admin password, as ``botgateway web hash-password`` prints it; empty: no password login."""
    cors_origins: list[str] = Field(default_factory=list)
    """Origins (``https://ops.example.com``) whose browser pages may call the API; empty: CORS off."""
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=1 << 20)
    """Largest request body of an API call (413 past it); a question is far smaller."""
    max_pending_events: int = Field(4096, ge=16)
    """Events one stream may have waiting for a slow client; past it the client is disconnected and its turn
    stopped, as when it closes the connection."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Reverse proxies (addresses or CIDR networks, ``127.0.0.1``, ``10.0.0.0/8``) whose ``X-Forwarded-For`` names
    the client: a connection from one counts as the last address of the header that is no trusted proxy (the
    console's failed logins and the API's wrong keys are counted per client). Empty: the connection's own address, whatever it sends."""
    keepalive_s: float = Field(15.0, gt=0, le=300)
    """Seconds of silence after which an event stream sends a comment (``: ping``), so that proxies and load
    balancers do not close it while a tool runs."""

    @field_validator("api_keys")
    @classmethod
    def _unique_names(cls, keys: list[ApiKeyConfig]) -> list[ApiKeyConfig]:
        names = [key.name for key in keys]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"API key names must be unique; {', '.join(twice)} is used more than once")
        return keys

    @field_validator("admin_password_hash")
    @classmethod
    def _a_hash(cls, value: str) -> str:
        if value and not is_password_hash(value):
            # Most likely the password itself was pasted: it is never repeated in the message.
            raise ValueError("admin_password_hash must be the hash 'botgateway web hash-password' prints "
                             "(scrypt$<salt>$<hash>), not the password itself")
        return value.strip()

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy.strip(), strict=False)
            except ValueError:
                raise ValueError(f"trusted proxy {proxy!r} must be an IP address or a CIDR network like "
                                 "'10.0.0.0/8'") from None
        return [proxy.strip() for proxy in proxies]

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ValueError(f"CORS origin {origin!r} must be a scheme and host like 'https://ops.example.com' "
                                 "(no path), or '*'")
        return origins


class _Switched(Protocol):
    """A section that can be turned on (read only: the config's sections are frozen)."""

    @property
    def enabled(self) -> bool: ...


class _Listener(_Switched, Protocol):
    """The HTTP server's section: whether it runs, and where it listens."""

    @property
    def host(self) -> str: ...


class _Served(Protocol):
    """The parts of the whole config the rules below read (the config schema imports this module)."""

    @property
    def web(self) -> WebConfig: ...

    @property
    def http(self) -> _Listener: ...

    @property
    def metrics(self) -> _Switched: ...

    @property
    def alerts(self) -> _Switched: ...


def http_served(config: _Served) -> bool:
    """Whether the gateway's HTTP server runs: probes, metrics or the alert receiver ask for it."""
    return bool(config.http.enabled or config.metrics.enabled or config.alerts.enabled)


def web_served(config: _Served) -> bool:
    """Whether the API and the console are served (``web.enabled`` on a running HTTP server)."""
    return config.web.enabled and http_served(config)


def _loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def web_bind_problems(config: _Served) -> list[tuple[tuple[str, ...], str, Any]]:
    """``(location, message, value)`` of each problem: the API served beyond this host with no way to authenticate."""
    web = config.web
    if not web_served(config) or _loopback(config.http.host) or web.api_keys or web.admin_password_hash:
        return []
    message = (f"the HTTP server listens on {config.http.host}, beyond this host, and would serve the API and the "
               "console to anyone who reaches it; set web.api_keys or web.admin_password_hash "
               "(botgateway web hash-password), or set web.enabled: false (or http.host: 127.0.0.1)")
    return [(("web", "enabled"), message, web.enabled)]
