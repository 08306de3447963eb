"""A small async client for the DingTalk OpenAPI calls the adapter makes.

One shared :class:`aiohttp.ClientSession` for every call (the SDK's card
helpers open a session per call, fetch the token with blocking ``requests`` and
swallow errors). The access token is cached until shortly before it expires and
refreshed once when a call answers 401. Failures become the typed sink errors
of :mod:`botgateway.sink` (classified in :mod:`adapters.dingtalk.errors`) so
the card streamer can pace, coalesce and fall back.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import structlog
from multidict import CIMultiDict

from adapters.dingtalk.errors import answer_error, token_error, transport_error, webhook_error
from botgateway.sink import PermanentError

__all__ = ["TOKEN_MARGIN_S", "DingTalkOpenAPI"]

log = structlog.get_logger(__name__)

TOKEN_MARGIN_S = 300.0
"""Refresh the token this long before DingTalk says it expires."""


class DingTalkOpenAPI:
    """Token-managed JSON calls to ``api.dingtalk.com`` (or a fake, through ``base_url``).

    ``session`` may be shared with the rest of the adapter; when omitted the
    client opens its own and closes it in :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        base_url: str = "https://api.dingtalk.com",
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_id = client_id
        self._client_secret = client_secret
        self._base_url = base_url.rstrip("/")
        self._session = session
        self._own_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._clock = clock
        self._token: str | None = None
        self._token_expires_at = 0.0
        self._token_lock = asyncio.Lock()

    @property
    def base_url(self) -> str:
        """The OpenAPI base URL."""
        return self._base_url

    def session(self) -> aiohttp.ClientSession:
        """The shared session (opened on first use)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
            self._own_session = True
        return self._session

    async def aclose(self) -> None:
        """Close the session if this client opened it."""
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()

    # --- token ------------------------------------------------------------------------

    async def access_token(self) -> str:
        """A valid access token, fetched at most once at a time and cached until near expiry."""
        async with self._token_lock:
            # Another task may have refreshed while we waited for the lock.
            if self._token and self._clock() < self._token_expires_at:
                return self._token
            self._token = await self._fetch_token()
            return self._token

    def invalidate_token(self, token: str | None = None) -> None:
        """Forget the cached token (only if it is still ``token``, when given)."""
        if token is None or token == self._token:
            self._token = None
            self._token_expires_at = 0.0

    async def _fetch_token(self) -> str:
        if not self._client_id or not self._client_secret:
            raise PermanentError("DingTalk client_id / client_secret are not set (adapters.dingtalk in config.yaml)")
        url = f"{self._base_url}/v1.0/oauth2/accessToken"
        body = {"appKey": self._client_id, "appSecret": self._client_secret}
        try:
            async with self.session().post(url, json=body, timeout=self._timeout) as resp:
                payload = await self._json(resp)
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, "token request failed") from None
        error = token_error(status, payload)
        if error is not None:
            raise error
        token = payload["accessToken"]
        expire_in = float(payload.get("expireIn") or 7200)
        margin = min(TOKEN_MARGIN_S, expire_in / 10)
        self._token_expires_at = self._clock() + expire_in - margin
        log.debug("dingtalk.token_refreshed", expire_in=expire_in)
        return str(token)

    # --- calls ------------------------------------------------------------------------

    async def call(self, method: str, path: str, body: Mapping[str, Any], *, what: str) -> Any:
        """Call ``path`` with the access token; retry once with a fresh token after a 401.

        Raises :class:`RateLimited`, :class:`TransientError`, :class:`CardGone` or
        :class:`PermanentError`; ``what`` names the call in error messages.
        """
        for attempt in (1, 2):
            token = await self.access_token()
            status, payload, headers = await self._request(method, f"{self._base_url}{path}", body, token, what)
            if status == 401 and attempt == 1:
                # Concurrent calls that all saw the same stale token refresh it once.
                log.info("dingtalk.token_rejected", call=what)
                self.invalidate_token(token)
                continue
            error = answer_error(status, payload, headers, what)
            if error is not None:
                raise error
            return payload
        raise AssertionError("unreachable")  # the second attempt always returns or raises

    async def post_json(self, url: str, body: Mapping[str, Any], *, what: str) -> Any:
        """POST to a full URL that needs no access token (a session webhook)."""
        status, payload, headers = await self._request("POST", url, body, None, what)
        error = answer_error(status, payload, headers, what) or webhook_error(payload, what)
        if error is not None:
            raise error
        return payload

    async def _request(
        self, method: str, url: str, body: Mapping[str, Any], token: str | None, what: str
    ) -> tuple[int, Any, Mapping[str, str]]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["x-acs-dingtalk-access-token"] = token
        try:
            async with self.session().request(
                method, url, data=json.dumps(body, ensure_ascii=False).encode(), headers=headers, timeout=self._timeout
            ) as resp:
                # case-insensitive: a proxy or HTTP/2 hop may lower-case "Retry-After"
                return resp.status, await self._json(resp), CIMultiDict(resp.headers)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, what) from None

    @staticmethod
    async def _json(resp: aiohttp.ClientResponse) -> Any:
        text = await resp.text()
        try:
            return json.loads(text) if text else {}
        except json.JSONDecodeError:
            return {"message": text[:200]}

    # --- the calls the adapter makes -----------------------------------------------------

    async def create_and_deliver(self, body: Mapping[str, Any]) -> Any:
        """``POST /v1.0/card/instances/createAndDeliver``."""
        return await self.call("POST", "/v1.0/card/instances/createAndDeliver", body, what="card createAndDeliver")

    async def update_card(self, body: Mapping[str, Any]) -> Any:
        """``PUT /v1.0/card/instances``: change some of a card's variables (``cardData.cardParamMap``)."""
        return await self.call("PUT", "/v1.0/card/instances", body, what="card update")

    async def stream_card(
        self, out_track_id: str, key: str, content: str, *, finalize: bool = False, error: bool = False
    ) -> Any:
        """``PUT /v1.0/card/streaming`` with the full content (``isFull``)."""
        body = {
            "outTrackId": out_track_id,
            "guid": uuid.uuid4().hex,
            "key": key,
            "content": content,
            "isFull": True,
            "isFinalize": finalize,
            "isError": error,
        }
        return await self.call("PUT", "/v1.0/card/streaming", body, what="card streaming update")

    async def send_group_markdown(self, robot_code: str, conversation_id: str, title: str, text: str) -> Any:
        """``POST /v1.0/robot/groupMessages/send`` with a ``sampleMarkdown`` message."""
        body = {
            "robotCode": robot_code,
            "openConversationId": conversation_id,
            "msgKey": "sampleMarkdown",
            "msgParam": json.dumps({"title": title, "text": text}, ensure_ascii=False),
        }
        return await self.call("POST", "/v1.0/robot/groupMessages/send", body, what="robot group message")

    async def send_user_markdown(self, robot_code: str, user_ids: list[str], title: str, text: str) -> Any:
        """``POST /v1.0/robot/oToMessages/batchSend`` with a ``sampleMarkdown`` message."""
        body = {
            "robotCode": robot_code,
            "userIds": user_ids,
            "msgKey": "sampleMarkdown",
            "msgParam": json.dumps({"title": title, "text": text}, ensure_ascii=False),
        }
        return await self.call("POST", "/v1.0/robot/oToMessages/batchSend", body, what="robot 1:1 message")

    async def send_group_image(self, robot_code: str, conversation_id: str, media_id: str) -> Any:
        """``POST /v1.0/robot/groupMessages/send`` with a ``sampleImageMsg`` showing the uploaded ``media_id``."""
        body = {
            "robotCode": robot_code,
            "openConversationId": conversation_id,
            "msgKey": "sampleImageMsg",
            "msgParam": json.dumps({"photoURL": media_id}),
        }
        return await self.call("POST", "/v1.0/robot/groupMessages/send", body, what="robot group image")

    async def send_user_image(self, robot_code: str, user_ids: list[str], media_id: str) -> Any:
        """``POST /v1.0/robot/oToMessages/batchSend`` with a ``sampleImageMsg`` showing the uploaded ``media_id``."""
        body = {
            "robotCode": robot_code,
            "userIds": user_ids,
            "msgKey": "sampleImageMsg",
            "msgParam": json.dumps({"photoURL": media_id}),
        }
        return await self.call("POST", "/v1.0/robot/oToMessages/batchSend", body, what="robot 1:1 image")
