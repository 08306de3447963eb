"""Who calls the API: an API key (``Authorization: Bearer <key>``) or the console's session, else 401.

Each configured key is the principal ``api:<name>`` of the access policy. A
presented key is compared with every configured key in constant time (no early
exit), so the timing of a refusal tells nothing about how close a guess was.
Wrong keys are counted per client address with the console's failed logins
(:mod:`adapters.web.failed_logins`): past the limit every key from that
address, the right one too, is answered 429 with ``Retry-After`` until the
window ends. Keys never reach a log or an answer. A picture's link carries
its own signature instead (:mod:`adapters.web.artifact_links`), made with a
secret derived from the key that asked. Refusals are the API's errors
(:mod:`adapters.web.api_errors`): 401 ``invalid_api_key``, 429
``rate_limit_exceeded``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Awaitable, Callable, Sequence

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from adapters.web.api_errors import RATE_LIMITED, BadRequest, error_response
from adapters.web.client_addr import TrustedProxies
from adapters.web.failed_logins import FailedLogins
from botgateway.config.web import ApiKeyConfig
from botgateway.principal import Principal

__all__ = ["API_PLATFORM", "ApiKeys", "SessionCheck", "auth_middleware", "caller_of", "principal_of"]

log = structlog.get_logger(__name__)

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

    def _key_of(self, principal_id: str) -> bytes | None:
        platform, _, name = principal_id.partition(":")
        if platform != API_PLATFORM:
            return None
        return next((key for key_name, key in self._keys if key_name == name), None)

    def fingerprint(self, principal_id: str) -> str | None:
        """The SHA-256 (hex) of the key configured now for ``principal_id`` (``api:<name>``), or None: what a console
        session opened with the key keeps, so that it ends once the key is removed or changed."""
        key = self._key_of(principal_id)
        return None if key is None else hashlib.sha256(key).hexdigest()

    def derived_secret(self, principal_id: str, purpose: bytes) -> bytes | None:
        """A secret for ``purpose`` derived from the key configured now for ``principal_id``, or None (no such key):
        what signs a link only that key's asker was given, which stops opening once the key is changed or removed.
        The key itself never leaves this object."""
        key = self._key_of(principal_id)
        return None if key is None else hmac.new(key, purpose, hashlib.sha256).digest()

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
    principal = caller_of(request)
    if principal is None:
        raise _unauthorized("not authenticated: send 'Authorization: Bearer <API key>'")
    return principal


def caller_of(request: web.Request) -> Principal | None:
    """The authenticated caller of ``request``, or None: a request of a signed route that came with its signature
    and no credentials (its handler checks the signature)."""
    principal = request.get(_REQUEST_PRINCIPAL)
    return principal if isinstance(principal, Principal) else None


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _unauthorized(message: str) -> BadRequest:
    return BadRequest(message, 401, code="invalid_api_key", headers={"WWW-Authenticate": 'Bearer realm="botgateway"'})


def _throttled(wait_s: float) -> BadRequest:
    # Another try within seconds (the OpenAI SDKs' own retries) would only be refused again: x-should-retry: false.
    return BadRequest(f"too many wrong API keys from this address; wait {math.ceil(wait_s / 60)} minutes", 429,
                      code=RATE_LIMITED, retry_after_s=wait_s)


async def _key_principal(keys: ApiKeys, token: str, failures: FailedLogins, client: str) -> Principal | web.Response:
    """The principal of the key ``token`` sent from ``client``, or the answer refusing it (401, or 429 past the
    limit of failures: then the right key waits too, and the answer tells a guesser nothing)."""
    principal = keys.principal(token)  # checked first: it costs nothing, and a right key must not count
    try:
        if principal is None:
            within = await failures.attempt(client)
        else:
            within = not await failures.locked(client)
    except Exception as exc:
        # Right and wrong keys alike: an answer that differed would let guesses through uncounted.
        log.warning("web.failed_keys_unavailable", error=type(exc).__name__)
        return error_response(BadRequest("the gateway cannot check API keys right now; try again shortly", 503))
    if not within:
        return error_response(_throttled(failures.window_s))
    if principal is None:
        return error_response(_unauthorized("the API key is not valid; send a key configured under web.api_keys"))
    return principal


def auth_middleware(
    keys: ApiKeys, session: SessionCheck, *, failures: FailedLogins, proxies: TrustedProxies,
    signed_routes: frozenset[str] = frozenset(),
) -> Middleware:
    """A middleware that lets a request through only with a valid key or session; the principal goes on the request.

    ``failures`` counts wrong keys per client address, as ``proxies`` (the trusted reverse proxies) report it.
    ``signed_routes``: the names of routes whose links carry their own signature (``?sig=``, a picture an ``<img>``
    loads without headers): such a request without credentials goes to its handler, which checks the signature."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return await handler(request)  # a CORS preflight carries no credentials
        token = _bearer(request)
        found: Principal | web.Response | None
        if token is not None:
            found = await _key_principal(keys, token, failures, proxies.client(request))
        else:
            found = await session(request)
        if found is None and "sig" in request.query and request.match_info.route.name in signed_routes:
            return await handler(request)
        if found is None:
            return error_response(_unauthorized("authentication required: send 'Authorization: Bearer <API key>'"))
        if isinstance(found, web.Response):
            return found
        request[_REQUEST_PRINCIPAL] = found
        return await handler(request)

    return middleware
