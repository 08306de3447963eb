"""The web console's routes: the login, the pages and their static files, the report tables and the status.

``/`` is the console (to ``/login`` without a session); ``/login`` takes an API
key or the admin password as JSON (a form post from another site cannot send
JSON without a CORS preflight, which is never answered) and sets the session
cookie; ``/logout`` ends the session. The pages' files are served from the
package (``adapters/web/console/``), with a Content-Security-Policy that lets
them load nothing but themselves: no CDN, no inline script, no remote image.
The Audit, Usage, Feedback and Status data (``/console/api/…``) are for the
admin session only; a turn's pictures (``/console/artifacts/…``) for the
session that asked it (:mod:`adapters.web.artifact_routes`); an answer's votes
and its Refresh (``/console/answers/…``) for its asker
(:mod:`adapters.web.console_answers`). The chat itself talks to the HTTP API
(``/v1/…``), whose auth accepts the session
(:func:`adapters.web.session.session_principal`). The icon is an SVG
(``/console/static/favicon.svg``, and ``/favicon.ico`` for browsers that ask
there unprompted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from adapters.web.artifact_routes import console_picture
from adapters.web.console_answers import answer_routes
from adapters.web.console_reports import (
    BadFilter,
    Report,
    ReportStore,
    audit_report,
    feedback_report,
    report_response,
    usage_report,
)
from adapters.web.console_status import StatusParts, console_status
from adapters.web.failed_logins import FAILED_LOGIN_WINDOW_S
from adapters.web.session import SESSION_COOKIE, SESSIONS, SessionBook, WebSession, csrf_ok, request_session

__all__ = ["STATIC_FILES", "console_routes", "mount_console"]

STATIC_FILES = {
    "app.css": "text/css",
    "app.js": "text/javascript",
    "chat.js": "text/javascript",
    "chat_answers.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
    "layout.js": "text/javascript",
    "login.js": "text/javascript",
    "markdown.js": "text/javascript",
    "reports.js": "text/javascript",
    "strings.js": "text/javascript",
}
"""The files under ``/console/static/``, and their types; nothing else of the package is served."""

_PAGES = ("index.html", "login.html")

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Sent with every console file: the pages load only their own files, are never framed, leak no referrer."""

_REPORTS: dict[str, Callable[[ReportStore, Any], Awaitable[Report]]] = {
    "audit": audit_report,
    "usage": usage_report,
    "feedback": feedback_report,
}

_LOGIN_ERRORS = {
    "bad_credentials": (401, "the API key or password is not right"),
    "throttled": (429, "too many failed logins from this address; wait 15 minutes"),
    "no_login": (503, "no login is configured: set web.admin_password_hash or web.api_keys"),
}


def _files() -> dict[str, bytes]:
    folder = resources.files("adapters.web") / "console"
    return {name: (folder / name).read_bytes() for name in (*_PAGES, *STATIC_FILES)}


def _error(status: int, message: str, code: str = "", headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message, **({"code": code} if code else {})}, status=status, headers=headers)


class _Console:
    """The handlers, over the session book, the Store and the status parts."""

    def __init__(self, book: SessionBook, status: StatusParts) -> None:
        self._book = book
        self._status = status
        self._files = _files()

    def _file(self, name: str, content_type: str) -> web.Response:
        return web.Response(body=self._files[name], content_type=content_type, charset="utf-8", headers=_HEADERS)

    async def index(self, request: web.Request) -> web.StreamResponse:
        if await request_session(request) is None:
            raise web.HTTPFound("/login")
        return self._file("index.html", "text/html")

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        return self._file("login.html", "text/html")

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            return _error(404, "not found")
        return self._file(name, STATIC_FILES[name])

    async def favicon(self, request: web.Request) -> web.StreamResponse:
        return self._file("favicon.svg", STATIC_FILES["favicon.svg"])

    async def login(self, request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _error(415, "send the login as JSON: {\"key\": …} or {\"password\": …}", "bad_request")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not valid JSON", "bad_request")
        if not isinstance(body, dict):
            return _error(400, "send an object: {\"key\": …} or {\"password\": …}", "bad_request")
        key, password = str(body.get("key") or ""), str(body.get("password") or "")
        outcome, session_id, session = await self._book.login(key=key, password=password,
                                                              client=self._book.client(request))
        if session is None:
            status, message = _LOGIN_ERRORS[outcome]
            # The longest wait left: the window of the address's failures (as a throttled API key is told).
            wait = {"Retry-After": str(int(FAILED_LOGIN_WINDOW_S))} if outcome == "throttled" else None
            return _error(status, message, outcome, wait)
        response = web.json_response(_session_json(session))
        self._book.set_cookie(response, request, session_id)
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session = await request_session(request)
        if session is not None and not csrf_ok(request, session):
            return _error(403, "the request lacks the session's X-CSRF-Token", "csrf")
        if session is not None:
            await self._book.logout(request.cookies.get(SESSION_COOKIE, ""))
        response = web.json_response({"ok": True})
        self._book.clear_cookie(response, request)
        return response

    async def session(self, request: web.Request) -> web.StreamResponse:
        session = await request_session(request)
        if session is None:
            return _error(401, "not logged in", "login")
        return web.json_response(_session_json(session))

    async def _admin(self, request: web.Request) -> web.Response | None:
        session = await request_session(request)
        if session is None:
            return _error(401, "not logged in", "login")
        if not session.admin:
            return _error(403, "only the admin login may read this", "admin")
        return None

    async def report(self, request: web.Request) -> web.StreamResponse:
        refused = await self._admin(request)
        if refused is not None:
            return refused
        name = request.match_info["report"]
        build = _REPORTS.get(name)
        if build is None:
            return _error(404, "not found")
        try:
            report = await build(self._status.store, request.query)
        except BadFilter as exc:
            return _error(400, str(exc), "filter")
        return report_response(name, report, request.query.get("format", "json"))

    async def status(self, request: web.Request) -> web.StreamResponse:
        refused = await self._admin(request)
        if refused is not None:
            return refused
        return web.json_response(await console_status(self._status))


def _session_json(session: WebSession) -> dict[str, Any]:
    return {"principal": session.principal_id, "admin": session.admin, "csrf": session.csrf,
            "expires_at": session.expires_at}


def console_routes(book: SessionBook, status: StatusParts) -> list[web.RouteDef]:
    """The console's routes (see the module's doc)."""
    console = _Console(book, status)
    return [
        web.get("/", console.index),
        web.get("/login", console.login_page),
        web.post("/login", console.login),
        web.post("/logout", console.logout),
        web.get("/console/session", console.session),
        web.get("/console/static/{name}", console.static),
        web.get("/favicon.ico", console.favicon),
        web.get("/console/artifacts/{name}", console_picture),
        web.get("/console/api/status", console.status),
        web.get("/console/api/{report}", console.report),
        *answer_routes(),
    ]


def mount_console(app: web.Application, book: SessionBook, status: StatusParts) -> None:
    """Serve the console on ``app`` (the gateway's root application, before it starts) and keep ``book`` where
    :func:`~adapters.web.session.session_principal` finds it."""
    app[SESSIONS] = book
    app.add_routes(console_routes(book, status))
