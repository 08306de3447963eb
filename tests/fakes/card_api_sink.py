"""The ``CardSink`` that talks to the fake card API over HTTP, as a real adapter talks to its platform.

:class:`HttpCardSink` implements :class:`adapters.base.CardSink` against
:class:`~tests.fakes.card_api.FakeCardAPI` with aiohttp, mapping statuses to
the typed sink errors (429 / 403 QpsLimit → ``RateLimited``, 404/410 →
``CardGone``, 413 → ``TooLong``, 5xx and connection errors →
``TransientError``, other 4xx → ``PermanentError``), and declares the rate
budget it keeps under the fake's limits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import aiohttp

from botgateway.budget import RateLimit
from botgateway.cards.render import render_markdown
from botgateway.sink import (
    CardGone,
    CardHandle,
    CardOp,
    CardTarget,
    PermanentError,
    RateLimited,
    TooLong,
    TransientError,
    parse_retry_after,
    target_to_dict,
)
from botgateway.snapshot import CardSnapshot, Narration
from tests.fakes.card_api_limits import APP_BUCKET, BUCKET_OF_OP

__all__ = ["DEFAULT_SINK_RATE", "HttpCardSink", "snapshot_to_dict"]


def snapshot_to_dict(snapshot: CardSnapshot) -> dict[str, Any]:
    """A JSON-ready snapshot; each block carries ``type`` (``narration`` or ``tool``)."""
    data = asdict(snapshot)
    data["blocks"] = [
        {"type": "narration" if isinstance(b, Narration) else "tool", **asdict(b)} for b in snapshot.blocks
    ]
    return data


DEFAULT_SINK_RATE = RateLimit(rate_per_s=18.0, burst=4)
"""What :class:`HttpCardSink` declares by default: 90 % of a 20 QPS platform, small bursts."""


class HttpCardSink:
    """A :class:`adapters.base.CardSink` for :class:`FakeCardAPI` over aiohttp.

    ``rate`` (or ``rates`` per bucket) is the budget the sink declares to the
    streamer; keep it below the fake's limit, as a real adapter keeps headroom
    under a platform's published quota. ``one_bucket=True`` declares one
    budget for every call of the app (match the fake's ``one_bucket``), keyed
    by the target's workspace when it has one. ``session``: a shared aiohttp
    session the caller owns; without one the sink opens (and closes) its own.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_chars: int = 3000,
        rate: RateLimit = DEFAULT_SINK_RATE,
        rates: Mapping[str, RateLimit] | None = None,
        one_bucket: bool = False,
        platform: str = "fake",
        app_key: str = "fake-app",
        render: Callable[[CardSnapshot], str] = render_markdown,
        timeout_s: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_chars = max_chars
        self.platform = platform
        self._rate = rate
        self._rates = dict(rates or {})
        self._one_bucket = one_bucket
        self._app_key = app_key
        self._render = render
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> HttpCardSink:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if the sink created it."""
        if self._session is not None and self._own_session:
            await self._session.close()
            self._session = None

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One bucket per app and API, or one per app (``one_bucket``), as the fake limits them."""
        if self._one_bucket:
            return f"{self.platform}:{target.workspace_id or self._app_key}:{APP_BUCKET}", self._rates.get(APP_BUCKET, self._rate)
        bucket = BUCKET_OF_OP[op]
        return f"{self.platform}:{self._app_key}:{bucket}", self._rates.get(bucket, self._rate)

    def _body(self, target: CardTarget, snapshot: CardSnapshot) -> dict[str, Any]:
        return {"target": target_to_dict(target), "snapshot": snapshot_to_dict(snapshot), "text": self._render(snapshot)}

    async def _request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._own_session = True
        try:
            async with self._session.request(method, self.base_url + path, json=body, timeout=self._timeout) as resp:
                try:
                    payload = await resp.json(content_type=None)
                except ValueError:
                    payload = {}
                payload = payload if isinstance(payload, dict) else {}
                status = resp.status
                retry_header = resp.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(f"card API unreachable: {type(exc).__name__}") from None
        if 200 <= status < 300:
            return payload
        code = str(payload.get("code", ""))
        if status == 429 or (status == 403 and "qpslimit" in code.lower()):
            raw = retry_header or payload.get("retry_after")
            retry_after = parse_retry_after(None if raw is None else str(raw))
            raise RateLimited(retry_after, f"card API throttled ({status}{' ' + code if code else ''})")
        if status in (404, 410):
            raise CardGone(f"card not found ({status})")
        if status == 413:
            raise TooLong(f"card too long ({status})")
        if status >= 500:
            raise TransientError(f"card API error {status}")
        raise PermanentError(f"card API refused the call ({status} {code})")

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """``POST /cards``."""
        payload = await self._request("POST", "/cards", self._body(target, snapshot))
        if not payload.get("card_id"):
            raise TransientError("card API: create answered without a card_id")
        return CardHandle(card_id=str(payload["card_id"]), target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``PUT /cards/{id}``."""
        await self._request("PUT", f"/cards/{handle.card_id}", self._body(handle.target, snapshot))
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``POST /cards/{id}/finalize``."""
        await self._request("POST", f"/cards/{handle.card_id}/finalize", self._body(handle.target, snapshot))
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """``POST /messages``."""
        await self._request("POST", "/messages", self._body(target, snapshot))
