"""A turn's chart as a file right under its Slack answer: the two-step external upload, each Web API call paced.

``files.upload`` is retired. An upload is three requests, the ones slack_sdk's
``files_upload_v2`` makes, made here one by one so that each Web API call is
paid from its own Tier 4 bucket through the :class:`~botgateway.sink.CallPacer`
(which honours a throttle's ``Retry-After`` and tries again):

1. ``files.getUploadURLExternal`` (file name, length, alt text) gives an upload URL and a file id;
2. the PNG's bytes are POSTed to that URL (Slack's upload service, not a Web API method: no tier);
3. ``files.completeUploadExternal`` shares the file, titled, into the answer's channel and thread.

Where it goes is :func:`upload_place`. Slack's refusals come back as the typed
sink errors, with what to do about them (:data:`~adapters.slack.errors.UPLOAD_HINTS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
import structlog

from adapters.slack.errors import UPLOAD_HINTS, call_slack, classify
from adapters.slack.limits import SlackBuckets, paced
from botgateway.artifacts import Artifact
from botgateway.sink import CallPacer, CardHandle, CardTarget, PermanentError, TransientError

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["MAX_ALT_TXT", "ChartUploads", "upload_place"]

log = structlog.get_logger(__name__)

MAX_ALT_TXT = 1000
"""Slack's limit of an upload's ``alt_txt`` (longer is refused with ``alt_txt_too_large``)."""

_GET_URL = "files.getUploadURLExternal"
_COMPLETE = "files.completeUploadExternal"
_ATTEMPTS = 3
"""Calls of each Web API method at most: a throttled one is tried again after Slack's ``Retry-After``."""


def upload_place(target: CardTarget, handle: CardHandle | None) -> tuple[str, str | None]:
    """The channel and thread (``thread_ts``, None: top level) a chart of ``target``'s answer goes to.

    A Slack user looks for the picture right under the answer, where the conversation goes on:

    * an answer in a thread (a channel mention is answered in the mention's thread, an assistant-pane
      question in its own) gets it in that thread, below the answer;
    * a direct message answered at top level gets it at top level too, right below the answer: a DM reads as
      one flat conversation, and a thread under the answer would hide the chart behind "1 reply";
    * a card posted at top level of a channel (an alert's) gets it in the card's own thread, keeping the
      channel at one message per card; until that card has a message (an answer deferred to its end), the
      chart goes beside it, at top level.
    """
    data = handle.data if handle is not None else {}
    channel = str(data.get("channel") or target.chat_id)
    if target.thread_id:
        return channel, target.thread_id
    if not target.is_group or handle is None or data.get("mode") == "deferred":
        return channel, None
    return channel, str(data.get("ts") or handle.card_id)


def alt_text(artifact: Artifact) -> str | None:
    """The chart's figures in words, cut to what Slack takes (None when there are none)."""
    alt = " ".join(artifact.alt.split())
    if len(alt) > MAX_ALT_TXT:
        alt = alt[: MAX_ALT_TXT - 1] + "…"
    return alt or None


class ChartUploads:
    """Uploads charts into the answers' threads, each Web API call paid from its workspace's bucket."""

    def __init__(self, client: AsyncWebClient, buckets: SlackBuckets, pacer: CallPacer | None) -> None:
        """``pacer`` None makes the calls unpaced (a sink built without one)."""
        self._client = client
        self._buckets = buckets
        self._pacer = pacer

    async def upload(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> None:
        """Share ``artifact`` as a PNG file under the answer of ``target`` (:func:`upload_place`).

        Raises the typed sink errors: a refusal says what to do about it, a throttle that outlasted the tries
        is :class:`~botgateway.sink.RateLimited`.
        """
        channel, thread_ts = upload_place(target, handle)
        owner = f"slack-upload:{target.turn_id}:{artifact.ref}"
        client = self._client
        got = await paced(
            self._pacer, self._buckets.files_bucket(target, _GET_URL),
            lambda: call_slack(client.files_getUploadURLExternal, hints=UPLOAD_HINTS, filename=artifact.file_name,
                               length=len(artifact.png), alt_txt=alt_text(artifact)),
            owner=owner, attempts=_ATTEMPTS,
        )
        upload_url, file_id = str(got.get("upload_url") or ""), str(got.get("file_id") or "")
        if not upload_url or not file_id:
            raise PermanentError(f"unexpected answer from slack ({_GET_URL} gave no upload URL)")
        await post_bytes(client, upload_url, artifact.png)
        await paced(
            self._pacer, self._buckets.files_bucket(target, _COMPLETE),
            lambda: call_slack(client.files_completeUploadExternal, hints=UPLOAD_HINTS,
                               files=[{"id": file_id, "title": artifact.title}], channel_id=channel,
                               thread_ts=thread_ts),
            owner=owner, attempts=_ATTEMPTS,
        )
        log.info("slack.chart_uploaded", team=target.workspace_id, channel=channel, threaded=thread_ts is not None,
                 ref=artifact.ref, bytes=len(artifact.png))


async def post_bytes(client: AsyncWebClient, url: str, data: bytes) -> None:
    """POST ``data`` to an upload URL Slack gave, with the client's timeout, proxy and TLS settings.

    The URL itself authorizes the upload: no token is sent. Slack's upload service answers 200 once it has the
    bytes; a 5xx (or a throttle) is a :class:`TransientError`, any other answer a :class:`PermanentError`.
    """
    timeout = aiohttp.ClientTimeout(total=client.timeout)
    ssl = client.ssl if client.ssl is not None else True
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
            url, data=data, proxy=client.proxy, ssl=ssl, headers={"Content-Type": "application/octet-stream"}
        ) as response:
            status = response.status
            await response.read()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise classify(exc) from None
    if status == 200:
        return
    if status >= 500 or status == 429:
        raise TransientError(f"slack's upload service is having trouble (HTTP {status})")
    raise PermanentError(f"slack's upload service refused the file (HTTP {status})")
