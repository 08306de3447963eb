"""The fake DingTalk's old media upload (``POST /media/upload``) and the media ids a markdown text shows.

:class:`UploadedMedia` is one file the upload accepted. :class:`DingTalkMedia` is
the part of :class:`~tests.fakes.dingtalk.FakeDingTalk` that answers the upload
like DingTalk: the token in the query (errcode 40014 otherwise), a PNG in the
multipart field ``media`` (errcode 40005 otherwise), HTTP 200 with an
``errcode`` unless a scripted failure or the QPS limit answers first; it keeps
the bytes and answers a fresh ``media_id``.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.dingtalk_calls import Call
from tests.fakes.dingtalk_limits import QPS_LIMIT_CODE, DingTalkLimits

__all__ = ["MEDIA_PATH", "PNG_SIGNATURE", "DingTalkMedia", "UploadedMedia"]

MEDIA_PATH = "/media/upload"
"""The old media upload's path (its token and ``type`` are in the query)."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""The first bytes of every PNG: the upload takes nothing else."""
_IMAGE_REF = re.compile(r"!\[[^\]\n]*\]\((@[A-Za-z0-9_\-]+)\)")


@dataclass(frozen=True)
class UploadedMedia:
    """A file the media upload accepted."""

    media_id: str
    """The id it answered (``@lADP…``)."""
    media_type: str
    """The ``type`` query parameter (``image``)."""
    file_name: str
    """The multipart part's file name."""
    content_type: str
    """The multipart part's content type."""
    data: bytes = field(repr=False)
    """The bytes uploaded."""
    at: float
    """``time.monotonic()`` when it was accepted."""


class DingTalkMedia:
    """The media upload (a mixin of :class:`~tests.fakes.dingtalk.FakeDingTalk`)."""

    calls: list[Call]
    media: dict[str, UploadedMedia]
    _valid_tokens: set[str]
    _limits: DingTalkLimits
    _notify: Callable[[], Awaitable[None]]

    def uploads(self) -> list[Call]:
        """Every call that reached the media upload (accepted or not), in arrival order."""
        return [c for c in self.calls if c.path == MEDIA_PATH]

    @staticmethod
    def media_ids_in(text: str) -> list[str]:
        """The media ids ``text`` shows as images (``![title](@media_id)``), in order."""
        return _IMAGE_REF.findall(text)

    async def _media_upload(self, request: web.Request) -> web.Response:
        """The old media upload: token in the query, the file in the multipart field ``media``, HTTP 200 with an
        ``errcode`` unless a scripted or QPS throttle answers first."""
        token = request.query.get("access_token")
        media_type = request.query.get("type", "")
        try:
            form = await request.post()
        except ValueError:
            form = None
        part = form.get("media") if form is not None else None
        data = part.file.read() if isinstance(part, web.FileField) else b""
        call = Call("POST", request.path, {"type": media_type, "bytes": len(data)}, time.monotonic(), token=token)
        self.calls.append(call)
        answer, status = self._media_answer(call, token, media_type, part, data)
        call.status = status
        await self._notify()
        if status != 200:
            headers = {"Retry-After": "2"} if status == 429 else None
            return web.json_response(answer, status=status, headers=headers)
        return web.json_response(answer)

    def _media_answer(self, call: Call, token: str | None, media_type: str, part: Any,
                      data: bytes) -> tuple[dict[str, Any], int]:
        failure = self._limits.next_failure(MEDIA_PATH)
        if failure == "qps":
            return {"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r7"}, 403
        if failure == "429":
            return {"code": "Throttling", "message": "too many requests"}, 429
        if failure == "500":
            return {"code": "ServiceUnavailable", "message": "internal error"}, 503
        if failure == "401" or token not in self._valid_tokens:
            return {"errcode": 40014, "errmsg": "不合法的access_token"}, 200
        if self._limits.media_over_qps(call.at):
            return {"code": QPS_LIMIT_CODE, "message": "app qps limit", "requestid": "r8"}, 403
        if media_type != "image":
            return {"errcode": 40004, "errmsg": "不合法的媒体文件类型"}, 200
        if not isinstance(part, web.FileField) or not data.startswith(PNG_SIGNATURE):
            return {"errcode": 40005, "errmsg": "不合法的文件类型"}, 200
        media_id = f"@lADP{secrets.token_hex(10)}"
        self.media[media_id] = UploadedMedia(media_id, media_type, part.filename, part.content_type, data, call.at)
        return {"errcode": 0, "errmsg": "ok", "media_id": media_id, "created_at": int(time.time() * 1000),
                "type": media_type}, 200
