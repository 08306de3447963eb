"""Serving the turns' pictures: the console's to its session, the API's to its key or to a link that key was given.

A picture is answered only to its turn's asker. ``/console/artifacts/<ref>.png``
(``?theme=dark``: the dark one, when it was drawn) goes to that principal's
console session (401 without a session, as the console's other routes).
``/v1/artifacts/<ref>.png`` goes to the API key that asked
(``Authorization: Bearer``), to the console session that asked, or to a link
whose ``sig`` is valid (:mod:`adapters.web.artifact_links`; a bad or expired
one is 401). Anyone else, and a reference not kept here (unknown, expired,
made in another process), gets 404 in that side's JSON error shape.
"""

from __future__ import annotations

from aiohttp import web

from adapters.web.artifact_links import PictureLinks
from adapters.web.artifact_shelf import ArtifactShelf, KeptPicture, picture_ref
from adapters.web.auth import caller_of
from adapters.web.body import BadRequest
from adapters.web.session import request_session

__all__ = ["PICTURES", "PICTURE_ROUTE", "api_picture_route", "console_picture"]

PICTURES = web.AppKey("botgateway.web.pictures", ArtifactShelf)
"""Where the root application keeps the shelf the console's pictures are served from (set by the web adapter)."""

PICTURE_ROUTE = "artifact"
"""The name of the API's picture route: its links may carry their own signature instead of credentials."""

_HEADERS = {
    "Cache-Control": "private, max-age=3600",  # the same reference is always the same picture
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'",
}


def _png(kept: KeptPicture, *, dark: bool = False) -> web.Response:
    return web.Response(body=kept.png(dark=dark), content_type="image/png", headers=_HEADERS)


async def console_picture(request: web.Request) -> web.StreamResponse:
    """``GET /console/artifacts/<ref>.png``: a picture of one of the session's own turns."""
    session = await request_session(request)
    if session is None:
        return web.json_response({"error": "not logged in", "code": "login"}, status=401)
    shelf = request.config_dict.get(PICTURES)
    ref = picture_ref(request.match_info["name"])
    kept = shelf.find(ref) if shelf is not None and ref is not None else None
    if kept is None or kept.owner != session.principal_id:
        return web.json_response({"error": "not found"}, status=404)
    return _png(kept, dark=request.query.get("theme") == "dark")


def api_picture_route(shelf: ArtifactShelf, links: PictureLinks) -> web.RouteDef:
    """``GET /artifacts/<ref>.png`` (relative to the ``/v1`` sub-application), named :data:`PICTURE_ROUTE`."""

    async def handler(request: web.Request) -> web.StreamResponse:
        ref = picture_ref(request.match_info["name"])
        kept = shelf.find(ref) if ref is not None else None
        if kept is None:
            raise BadRequest("no such picture is kept here: it expired, or was drawn by another process", 404)
        caller = caller_of(request)
        if caller is not None and caller.id == kept.owner:
            return _png(kept)
        sig = request.query.get("sig")
        if sig is None:
            raise BadRequest("no such picture is kept here: it expired, or was drawn by another process", 404)
        if not links.signed(kept, sig):
            raise BadRequest("the picture's link is not valid or has expired; ask again for a new one", 401)
        return _png(kept)

    return web.get("/artifacts/{name}", handler, name=PICTURE_ROUTE)
