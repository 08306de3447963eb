"""Uploading a picture into DingTalk's media store: the ``media_id`` messages and markdown show it by.

``POST {oapi}/media/upload?access_token=…&type=image`` with the PNG in the
multipart field ``media`` (the old API, ``oapi.dingtalk.com``: the app's access
token goes in the query and the answer is HTTP 200 with an ``errcode``). The
call uses the adapter's :class:`~adapters.dingtalk.openapi.DingTalkOpenAPI`
session and cached token, refreshed once when the old API calls it stale. A
``media_id`` is reusable and only shows inside DingTalk's clients, so no URL
of ours ever reaches the chat.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from multidict import CIMultiDict

from adapters.dingtalk.errors import OAPI_BAD_TOKEN_ERRCODES, media_error, transport_error
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.sink import PermanentError

__all__ = ["MEDIA_ID", "MediaUploads"]

log = structlog.get_logger(__name__)

MEDIA_ID = re.compile(r"@[A-Za-z0-9_\-]{4,200}")
"""What a usable ``media_id`` looks like (``@lADPD…``): anything else is refused rather than put into markdown."""

_TIMEOUT = aiohttp.ClientTimeout(total=20)
"""An upload carries a picture; it gets more time than a JSON call, still bounded."""


class MediaUploads:
    """Uploads images for one app (its token and session), answering their ``media_id``."""

    def __init__(self, api: DingTalkOpenAPI, *, oapi_base_url: str = "https://oapi.dingtalk.com") -> None:
        """``api``: the adapter's OpenAPI client; ``oapi_base_url``: the old API (a fake's, in tests)."""
        self._api = api
        self._url = oapi_base_url.rstrip("/") + "/media/upload"

    async def upload_png(self, png: bytes, file_name: str) -> str:
        """Upload ``png`` as an image named ``file_name``; returns its ``media_id``.

        Raises the typed sink errors (:func:`~adapters.dingtalk.errors.media_error`); the token is
        refreshed once when the old API says it is stale.
        """
        for attempt in (1, 2):
            token = await self._api.access_token()
            status, payload, headers = await self._post(token, png, file_name)
            errcode = payload.get("errcode") if isinstance(payload, Mapping) else None
            if (status == 401 or errcode in OAPI_BAD_TOKEN_ERRCODES) and attempt == 1:
                log.info("dingtalk.media_token_rejected", errcode=errcode)
                self._api.invalidate_token(token)
                continue
            error = media_error(status, payload, headers)
            if error is not None:
                raise error
            media_id = payload.get("media_id") if isinstance(payload, Mapping) else None
            if not isinstance(media_id, str) or not MEDIA_ID.fullmatch(media_id):
                raise PermanentError("DingTalk media upload answered without a usable media_id")
            return media_id
        raise AssertionError("unreachable")  # the second attempt always returns or raises

    async def _post(self, token: str, png: bytes, file_name: str) -> tuple[int, Any, CIMultiDict[str]]:
        form = aiohttp.FormData()
        form.add_field("media", png, filename=file_name, content_type="image/png")
        try:
            async with self._api.session().post(self._url, params={"access_token": token, "type": "image"},
                                                data=form, timeout=_TIMEOUT) as resp:
                text = await resp.text()
                status, headers = resp.status, CIMultiDict(resp.headers)
        except (TimeoutError, aiohttp.ClientError) as exc:
            # the exception's text names the URL, token included: only its kind is kept
            raise transport_error(exc, "media upload") from None
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError:
            payload = {}
        return status, payload, headers
