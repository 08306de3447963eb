"""The web console's sessions: who logged in, kept server-side in the Store, found again by a cookie.

A login with the admin password (``web.admin_password_hash``) opens a session
for the principal ``web:admin``; a login with an API key (``web.api_keys``)
opens one for that key's principal, ``api:<name>``: the access policy then
treats the console's questions like the key's own (an access role lists
``web:admin`` in its ``members`` to give the admin its tools). The cookie holds
only a random id (``HttpOnly; SameSite=Strict``, ``Secure`` over https); the
Store keeps the session under the id's SHA-256, so a copy of the Store opens no
session. Each session has a CSRF token that every state-changing request (not
GET, HEAD or OPTIONS) must echo in ``X-CSRF-Token``: a page of another site
can neither read it nor send a custom header.

Login attempts are counted per client address in the Store (shared by every
replica) before they are checked, so concurrent guesses cannot all slip under
the limit; a success takes its count back. Past :data:`MAX_FAILED_LOGINS` in
:data:`FAILED_LOGIN_WINDOW_S` the next ones are refused unchecked until the
window ends; failed API keys of the HTTP API count in the same window
(:mod:`adapters.web.failed_logins`). The address is the peer's, or the client's
as the trusted reverse proxies report it
(:class:`~adapters.web.client_addr.TrustedProxies`). The
password's scrypt runs in a thread, at most :data:`PASSWORD_CHECKS` at a time
per process: it costs tens of milliseconds and 16 MiB, and the event loop serves
every card meanwhile.

A session remembers a fingerprint of what opened it (the SHA-256 of the API key,
or of the admin password's hash) and counts only while the configured key or
hash still has it: removing a key or changing the password ends its sessions.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from aiohttp import web

from adapters.web.client_addr import TrustedProxies
from adapters.web.failed_logins import FAILED_LOGIN_WINDOW_S, MAX_FAILED_LOGINS, FailedLogins
from botgateway.password_hash import verify_password
from botgateway.principal import Principal
from botgateway.stores.base import CounterStore, DocumentStore

__all__ = [
    "ADMIN_PRINCIPAL", "CSRF_HEADER", "FAILED_LOGIN_WINDOW_S", "MAX_FAILED_LOGINS", "PASSWORD_CHECKS", "SAFE_METHODS",
    "SESSIONS", "SESSION_COOKIE", "SESSION_TTL_S", "KeyRing", "LoginOutcome", "SessionBook", "SessionStore",
    "WebSession", "csrf_ok", "fingerprint", "request_session", "session_principal",
]

SESSION_COOKIE = "botgateway_session"
"""The cookie holding the session id."""

CSRF_HEADER = "X-CSRF-Token"
"""The header a state-changing request carries its session's CSRF token in."""

ADMIN_PRINCIPAL = "web:admin"
"""The principal of a session opened with the admin password."""

SESSION_TTL_S = 8 * 3600.0
"""How long a session lasts after its login (a working day); then the console asks to log in again."""

PASSWORD_CHECKS = 2
"""Password checks (scrypt, in threads) one process runs at a time; more wait their turn."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing, so need no CSRF token."""

_KEY_PREFIX = "web:session:"

LoginOutcome = Literal["ok", "bad_credentials", "throttled", "no_login"]
"""``ok``; a wrong key or password; too many failures from this address; no login configured at all."""

class KeyRing(Protocol):
    """The configured API keys, as logins use them (:class:`adapters.web.auth.ApiKeys`)."""

    @property
    def configured(self) -> bool:
        """Whether any key is configured."""
        ...

    def principal(self, presented: str) -> Principal | None:
        """The principal of the key ``presented``, or None when it is no configured key."""
        ...

    def fingerprint(self, principal_id: str) -> str | None:
        """The fingerprint (:func:`fingerprint`) of the key configured now for ``principal_id``, or None."""
        ...


class _NoKeys:
    """No API key logins."""

    configured = False

    def principal(self, presented: str) -> Principal | None:
        return None

    def fingerprint(self, principal_id: str) -> str | None:
        return None


def fingerprint(secret: str) -> str:
    """The SHA-256 (hex) of ``secret``: what a session keeps of the key or password hash that opened it."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


class SessionStore(DocumentStore, CounterStore, Protocol):
    """The part of the Store sessions live in: documents with a TTL, and the counters of failed logins."""


@dataclass(frozen=True)
class WebSession:
    """One logged-in browser."""

    principal_id: str
    """``web:admin`` or ``api:<key name>``."""
    csrf: str
    """The token state-changing requests must send in ``X-CSRF-Token``."""
    expires_at: float
    """Unix time the session ends."""

    @property
    def principal(self) -> Principal:
        """Who the session acts as."""
        platform, _, user = self.principal_id.partition(":")
        return Principal.of(platform, user, name=user)

    @property
    def admin(self) -> bool:
        """Whether it was opened with the admin password (the audit, usage, feedback and status pages need it)."""
        return self.principal_id == ADMIN_PRINCIPAL


def _store_key(session_id: str) -> str:
    return _KEY_PREFIX + hashlib.sha256(session_id.encode()).hexdigest()


class SessionBook:
    """Logs browsers in and out, and finds their sessions again."""

    def __init__(
        self,
        store: SessionStore,
        *,
        admin_password_hash: str = "",
        api_keys: KeyRing | None = None,
        ttl_s: float = SESSION_TTL_S,
        secure: bool | None = None,
        proxies: TrustedProxies | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``api_keys``: the configured API keys (none by default); ``secure``: mark the cookie ``Secure`` (None:
        when the request came over https, directly or as a proxy's ``X-Forwarded-Proto`` says); ``proxies``: the
        reverse proxies whose ``X-Forwarded-For`` names the client (none trusted by default)."""
        self._store = store
        self._admin_hash = admin_password_hash
        self._keys: KeyRing = api_keys if api_keys is not None else _NoKeys()
        self._ttl_s = ttl_s
        self._secure = secure
        self._proxies = proxies or TrustedProxies()
        self._failures = FailedLogins(store)
        self._clock = clock
        self._password_checks = asyncio.Semaphore(PASSWORD_CHECKS)

    @property
    def can_login(self) -> bool:
        """Whether any login is configured (an admin password or an API key)."""
        return bool(self._admin_hash or self._keys.configured)

    def client(self, request: web.Request) -> str:
        """The address failed logins of ``request`` count against (the client's, through trusted proxies)."""
        return self._proxies.client(request)

    async def _check(self, key: str, password: str) -> str | None:
        if password and self._admin_hash:
            async with self._password_checks:  # scrypt is slow and memory-hard: a few at a time, off the loop
                if await asyncio.to_thread(verify_password, password, self._admin_hash):
                    return ADMIN_PRINCIPAL
        principal = self._keys.principal(key) if key else None
        return principal.id if principal is not None else None

    def _fingerprint(self, principal_id: str) -> str | None:
        """The fingerprint a session of ``principal_id`` must carry now (None: no such login is configured)."""
        if principal_id == ADMIN_PRINCIPAL:
            return fingerprint(self._admin_hash) if self._admin_hash else None
        return self._keys.fingerprint(principal_id)

    async def login(
        self, *, key: str = "", password: str = "", client: str = ""
    ) -> tuple[LoginOutcome, str, WebSession | None]:
        """Check an API key or the admin password sent from ``client`` (its address); on success open a session.

        Returns the outcome, the new session's id (for the cookie; empty on failure) and the session.
        """
        if not self.can_login:
            return "no_login", "", None
        # Counted before the check: concurrent attempts each see the others', so at most the limit are checked.
        if not await self._failures.attempt(client):
            return "throttled", "", None
        principal_id = await self._check(key, password)
        if principal_id is None:
            return "bad_credentials", "", None
        await self._failures.succeeded(client)
        session_id = secrets.token_urlsafe(32)
        session = WebSession(principal_id=principal_id, csrf=secrets.token_urlsafe(32),
                             expires_at=self._clock() + self._ttl_s)
        document = {"principal": session.principal_id, "csrf": session.csrf, "expires_at": session.expires_at,
                    "fingerprint": self._fingerprint(principal_id) or ""}
        await self._store.put_document(_store_key(session_id), document, self._ttl_s)
        return "ok", session_id, session

    async def find(self, session_id: str) -> WebSession | None:
        """The live session of ``session_id``, or None (unknown, logged out or expired)."""
        if not session_id or len(session_id) > 128:
            return None
        data = await self._store.get_document(_store_key(session_id))
        if not data or not data.get("principal"):
            return None
        session = WebSession(principal_id=str(data["principal"]), csrf=str(data.get("csrf", "")),
                             expires_at=float(data.get("expires_at", 0.0)))
        if session.expires_at <= self._clock() or not session.csrf:
            return None
        now = self._fingerprint(session.principal_id)  # the key removed or the password changed: the session ends
        kept = str(data.get("fingerprint", ""))
        return session if now is not None and hmac.compare_digest(now.encode(), kept.encode()) else None

    async def logout(self, session_id: str) -> None:
        """End ``session_id`` (an empty document stands in its place for a moment, then expires)."""
        await self._store.put_document(_store_key(session_id), {}, 1.0)

    def secure(self, request: web.Request) -> bool:
        """Whether the cookie is to be marked ``Secure`` for ``request``."""
        if self._secure is not None:
            return self._secure
        forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return request.secure or forwarded == "https"

    def set_cookie(self, response: web.StreamResponse, request: web.Request, session_id: str) -> None:
        """Give the browser ``session_id``: ``HttpOnly``, ``SameSite=Strict``, ``Secure`` over https."""
        response.set_cookie(SESSION_COOKIE, session_id, max_age=int(self._ttl_s), path="/", httponly=True,
                            samesite="Strict", secure=self.secure(request))

    def clear_cookie(self, response: web.StreamResponse, request: web.Request) -> None:
        """Make the browser forget its session cookie."""
        response.del_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="Strict", secure=self.secure(request))


SESSIONS = web.AppKey("botgateway.http.sessions", SessionBook)
"""Where the root application keeps its :class:`SessionBook` (set by
:func:`~adapters.web.console_routes.mount_console`)."""


async def request_session(request: web.Request) -> WebSession | None:
    """The session of ``request``'s cookie, or None (no console mounted, no cookie, unknown or expired)."""
    book = request.config_dict.get(SESSIONS)
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if book is None or not session_id:
        return None
    return await book.find(session_id)


def csrf_ok(request: web.Request, session: WebSession) -> bool:
    """Whether ``request`` may act for ``session``: a safe method, or the session's CSRF token in the header."""
    if request.method in SAFE_METHODS:
        return True
    sent = request.headers.get(CSRF_HEADER, "")
    return bool(sent) and hmac.compare_digest(sent.encode(), session.csrf.encode())


async def session_principal(request: web.Request) -> Principal | None:
    """The principal of ``request``'s console session, or None: no session, or a state-changing request without
    the session's CSRF token (the API's auth then answers 401). What the API's auth middleware calls."""
    session = await request_session(request)
    if session is None or not csrf_ok(request, session):
        return None
    return session.principal
