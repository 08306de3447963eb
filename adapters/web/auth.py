"""Who calls the API: an API key (``Authorization: Bearer <key>``) or the console's session, else 401.

Each configured key is the principal ``api:<name>`` of the access policy. A
presented key is compared with every configured key in constant time (no early
exit), so the timing of a refusal tells nothing about how close a guess was.
Keys never reach a log or an answer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from botgateway.config.web import ApiKeyConfig
from botgateway.principal import Principal

__all__ = ["API_PLATFORM", "ApiKeys", "SessionCheck", "auth_middleware", "principal_of"]

API_PLATFORM = "api"
"""The platform of an API key's principal (``api:<name>``)."""

_REQUEST_PRINCIPAL = "botgateway.principal"
"""Where the middleware puts the caller's :class:`Principal` on the request."""

SessionCheck = Callable[[web.Request], Awaitable[Principal | None]]
"""The console's session check (:func:`adapters.web.session.session_principal`)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiKeys:
    """The configured keys, looked up in constant time."""

    def __init__(self, keys: Sequence[ApiKeyConfig]) -> None:
        self._keys = [(key.name, key.key.get_secret_value().encode()) for key in keys]

    @property
    def configured(self) -> bool:
        """Whether any key is configured."""
        return bool(self._keys)

    def fingerprint(self, principal_id: str) -> str | None:
        """The SHA-256 (hex) of the key configured now for ``principal_id`` (``api:<name>``), or None: what a console
        session opened with the key keeps, so that it ends once the key is removed or changed."""
        platform, _, name = principal_id.partition(":")
        if platform != API_PLATFORM:
            return None
        key = next((key for key_name, key in self._keys if key_name == name), None)
        return None if key is None else hashlib.sha256(key).hexdigest()

    def principal(self, presented: str) -> Principal | None:
        """The principal of the key ``presented``, or None when it is no configured key."""
        given = presented.encode("utf-8", "replace")
        found: str | None = None
        for name, key in self._keys:  # every key is compared: no early exit
            if hmac.compare_digest(given, key) and found is None:
                found = name
        return None if found is None else Principal.of(API_PLATFORM, found, name=found)


def principal_of(request: web.Request) -> Principal:
    """The authenticated caller of ``request`` (set by :func:`auth_middleware`)."""
    principal = request.get(_REQUEST_PRINCIPAL)
    if not isinstance(principal, Principal):
        raise web.HTTPUnauthorized(text='{"error": "not authenticated"}', content_type="application/json")
    return principal


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _unauthorized(message: str) -> web.Response:
    return web.json_response({"error": message}, status=401, headers={"WWW-Authenticate": 'Bearer realm="botgateway"'})


def auth_middleware(
    keys: ApiKeys, session: SessionCheck
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """A middleware that lets a request through only with a valid key or session; the principal goes on the request."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return await handler(request)  # a CORS preflight carries no credentials
        token = _bearer(request)
        if token is not None:
            principal = keys.principal(token)
            if principal is None:
                return _unauthorized("the API key is not valid; send a key configured under web.api_keys")
        else:
            principal = await session(request)
            if principal is None:
                return _unauthorized("authentication required: send 'Authorization: Bearer <API key>'")
        request[_REQUEST_PRINCIPAL] = principal
        return await handler(request)

    return middleware
