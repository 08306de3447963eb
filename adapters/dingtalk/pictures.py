"""Delivering a turn's charts on DingTalk: each uploaded once, then shown under the AI card or in the markdown reply.

A picture is uploaded to DingTalk's media store (:mod:`adapters.dingtalk.media`)
and shown by the ``media_id`` the upload answers, never by a URL of ours:

- A turn answered by an AI card gets a robot image message in the card's chat
  (``sampleImageMsg`` with ``photoURL`` = the media id), sent as soon as the
  card exists, so it sits right under the card. DingTalk documents no image in
  an AI card's streaming markdown variable (its markdown is documented for
  text, colours, links and mentions), so the card itself carries no embed.
- A turn answered by one markdown reply (no card template, degraded, a 1:1
  sender without a staff id) gets ``![title](@media_id)`` in the reply's
  markdown, the form DingTalk's robot messages document for an uploaded
  picture. The upload is done before the reply goes out (the reply waits for
  it a short while).

Both calls are paid through the core's :class:`~botgateway.sink.CallPacer`: the
upload from the app's budget of the media API (DingTalk allows about 20 calls a
second per app and API), the image message from the chat's message budget,
shared with the chat's markdown replies. A throttle (HTTP 403 ``QpsLimit``,
429) is a :class:`~botgateway.sink.RateLimited` the pacer waits out and retries.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import structlog

from adapters.dingtalk.card_sink import app_limit
from adapters.dingtalk.errors import batch_send_error
from adapters.dingtalk.media import MediaUploads
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.sink import CallPacer, CardTarget

__all__ = ["ATTEMPTS", "DingTalkPictures", "MessageBudget", "image_markdown"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

ATTEMPTS = 3
"""Calls of one kind a picture makes at most when DingTalk throttles them (the pacer waits between them)."""

_ALT_UNSAFE = re.compile(r"[\[\]()!<>`\\\r\n]+")
_ALT_CHARS = 60


def image_markdown(title: str, media_id: str) -> str:
    """``![title](@media_id)``: an uploaded picture in DingTalk markdown, its title kept from changing the markup."""
    alt = " ".join(_ALT_UNSAFE.sub(" ", title).split())[:_ALT_CHARS] or "chart"
    return f"![{alt}]({media_id})"


class MessageBudget(Protocol):
    """The chat's message budget (the markdown sender's), which an image message draws from too."""

    def rate_key(self, target: CardTarget) -> tuple[str, RateLimit]:
        """The per-chat message bucket of ``target``."""
        ...


class DingTalkPictures:
    """Uploads a turn's pictures and shows each under the AI card or in the markdown reply."""

    def __init__(
        self,
        api: DingTalkOpenAPI,
        uploads: MediaUploads,
        *,
        messages: MessageBudget,
        robot_code: str,
        qps: float = 20.0,
        pacer: CallPacer | None = None,
    ) -> None:
        """``messages``: the chat's message budget; ``qps``: the app's calls a second per API; ``pacer``: pays for
        the calls from the shared budgets (None: they are made at once, a throttle failing the picture)."""
        self._api = api
        self._uploads = uploads
        self._messages = messages
        self._robot_code = robot_code
        self._upload_limit = app_limit(qps)
        self._pacer = pacer

    async def ship(self, target: CardTarget, artifact: Artifact, *, beside_card: bool) -> ArtifactPlacement:
        """Upload ``artifact``; with ``beside_card`` send it as an image message into the card's chat and embed
        nothing, else answer the markdown that shows it in the reply. Raises the typed sink errors."""
        owner = f"dingtalk-picture:{artifact.ref}"
        upload_bucket = f"dingtalk:{self._robot_code}:media.upload", self._upload_limit
        media_id = await self._paced(upload_bucket, lambda: self._uploads.upload_png(artifact.png, artifact.file_name),
                                     owner)
        log.info("dingtalk.picture_uploaded", ref=artifact.ref, bytes=len(artifact.png), beside_card=beside_card)
        if not beside_card:
            return ArtifactPlacement(embed=image_markdown(artifact.title, media_id))
        await self._paced(self._messages.rate_key(target), lambda: self._send_image(target, media_id), owner)
        return ArtifactPlacement()

    async def _send_image(self, target: CardTarget, media_id: str) -> None:
        if target.is_group:
            await self._api.send_group_image(self._robot_code, target.chat_id, media_id)
            return
        answer = await self._api.send_user_image(self._robot_code, [target.user_id], media_id)
        # batchSend answers HTTP 200 even when it sent nothing: the lists say who was skipped.
        error = batch_send_error(answer, target.user_id)
        if error is not None:
            raise error

    async def _paced(self, bucket: tuple[str, RateLimit], fn: Callable[[], Awaitable[_T]], owner: str) -> _T:
        if self._pacer is None:
            return await fn()
        key, limit = bucket
        try:
            return await self._pacer.call(key, limit, fn, owner=owner, attempts=ATTEMPTS)
        finally:
            self._pacer.release(key, owner)  # one picture's calls: the budget forgets what it was served
