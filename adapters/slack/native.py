"""Native streams: ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``.

The answer is appended as markdown, tool calls as ``task_update`` chunks; each
call sends only what the stream does not show yet (:class:`Stream`). Slack
expires long streams, so one older than ``stream_rollover_s`` is stopped and
continued in a new message in the thread. A throttle answer propagates (the
streamer pauses and retries); any other failure raises :class:`StreamBroken`
and the sink keeps the message up to date by editing it instead. In
``streaming: auto`` mode a workspace where ``chat.startStream`` is not
available is remembered.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from cachetools import LRUCache

from adapters.slack.errors import NATIVE_UNAVAILABLE, classify, slack_error_code
from adapters.slack.handles import MessageKey, message_key
from adapters.slack.inert import allowed_mentions
from adapters.slack.limits import SlackBuckets, on_own_budget
from adapters.slack.render import NO_MENTIONS, stream_closing, stream_pieces
from botgateway.sink import CallPacer, CardHandle, CardTarget, RateLimited
from botgateway.snapshot import CardSnapshot

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig

__all__ = ["NativeStreams", "Stream", "StreamBroken"]

log = structlog.get_logger(__name__)

_MAX_STREAMS = 10_000
"""Live streams kept at most; the least recently used (cards that were never finalized) are forgotten."""


class StreamBroken(Exception):
    """A native stream cannot continue (error or text that cannot be appended)."""


class Stream:
    """What one native stream already shows, so each call appends only what is new."""

    def __init__(self, *, channel: str, ts: str, started: float, allowed: frozenset[str] = NO_MENTIONS) -> None:
        self.channel = channel
        """The channel of the stream."""
        self.ts = ts
        """The current stream message (changes on rollover)."""
        self.started = started
        """When the current message started streaming (the clock's time)."""
        self.live = True
        """False between stopping the old message of a rollover and starting the new one."""
        self.sent = ""
        """The text appended so far (narration and answer, linearized)."""
        self.tasks: dict[str, str] = {}
        """Task id → status last sent."""
        self.allowed = allowed
        """User ids the asker mentioned: the only user mentions the stream lets through."""
        self._pending: tuple[str, dict[str, str]] | None = None

    def chunks_for(self, snapshot: CardSnapshot) -> list[dict[str, Any]]:
        """Chunks that bring the stream up to ``snapshot``; :meth:`commit` once Slack accepted them.

        Raises :class:`StreamBroken` when the snapshot takes back text that was streamed.
        """
        sent, tasks = self.sent, dict(self.tasks)
        chunks: list[dict[str, Any]] = []
        position = 0
        for kind, piece in stream_pieces(snapshot, self.allowed):
            if kind == "task":
                if tasks.get(piece["id"]) != piece["status"]:
                    chunks.append(piece)
                    tasks[piece["id"]] = piece["status"]
                continue
            end = position + len(piece)
            shown = sent[position:end]
            if not piece.startswith(shown):
                raise StreamBroken("the card's text changed in a way a stream cannot show")
            new = piece[len(shown):]
            if new:
                if position + len(shown) < len(sent):
                    raise StreamBroken("new text would land before text already streamed")
                _add_text(chunks, new)
                sent += new
            position = end
        if position < len(sent):
            raise StreamBroken("the card's text became shorter than what was streamed")
        self._pending = (sent, tasks)
        return chunks

    def commit(self) -> None:
        """The chunks of the last :meth:`chunks_for` were accepted."""
        if self._pending is not None:
            self.sent, self.tasks = self._pending
            self._pending = None


class NativeStreams:
    """Opens, appends to, rolls over and stops the native streams of the sink's cards."""

    def __init__(
        self,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        buckets: SlackBuckets,
        pacer: CallPacer | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._config = config
        self._buckets = buckets
        self._pacer = pacer
        self._clock = clock
        self._unavailable: set[str] = set()
        self._streams: LRUCache[MessageKey, Stream] = LRUCache(_MAX_STREAMS)

    def available(self, workspace_id: str) -> bool:
        """False once auto mode learned that this workspace cannot stream natively."""
        return workspace_id not in self._unavailable

    def of(self, handle: CardHandle) -> Stream | None:
        """The live stream of a native-mode ``handle`` (None for an edited or recovered message)."""
        if handle.data.get("mode") != "native":
            return None
        return self._streams.get(message_key(handle))

    def forget(self, handle: CardHandle) -> Stream | None:
        """Stop keeping ``handle``'s stream; returns it, if it was kept."""
        return self._streams.pop(message_key(handle), None)

    async def start(self, target: CardTarget, snapshot: CardSnapshot, *, paid: bool) -> CardHandle:
        """Open the card's stream; ``paid``: the streamer drew this ``chat.startStream`` token already."""
        stream = Stream(channel=target.chat_id, ts="", started=self._clock(), allowed=allowed_mentions(target))
        stream.ts = await self._open(target, stream.chunks_for(snapshot), paid=paid)
        stream.commit()
        handle = CardHandle(card_id=stream.ts, target=target, data={"mode": "native", "channel": target.chat_id, "ts": stream.ts})
        self._streams[message_key(handle)] = stream
        return handle

    async def append(self, stream: Stream, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Append what ``snapshot`` adds, in a new message when the current one is too old."""
        chunks = stream.chunks_for(snapshot)
        if not chunks:
            return
        if self._clock() - stream.started >= self._config.stream_rollover_s:
            await self._rollover(stream, target, chunks)
            return
        await self._call("chat.appendStream", self._client.chat_appendStream, channel=stream.channel, ts=stream.ts, chunks=chunks)
        stream.commit()

    async def stop(self, stream: Stream, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Append the rest of ``snapshot`` and its closing note and footer, and end the stream."""
        if not stream.live:
            # A rollover was throttled after its old message stopped: the rest goes into a new one.
            stream.ts = await self._open(target, [], paid=False)
            stream.live = True
            stream.started = self._clock()
        chunks = stream.chunks_for(snapshot)
        note, blocks = stream_closing(snapshot, stream.allowed, target)  # a final answer's buttons too
        if note:
            _add_text(chunks, note)
        await self._call("chat.stopStream", self._client.chat_stopStream, channel=stream.channel, ts=stream.ts,
                         chunks=chunks or None, blocks=blocks or None)
        stream.commit()

    async def stop_quietly(self, channel: str, ts: str, *, markdown_text: str | None = None) -> bool:
        """Stop a stream that may already be stopped or expired; True when Slack stopped it."""
        try:
            await self._client.chat_stopStream(channel=channel, ts=ts, markdown_text=markdown_text)
        except Exception as exc:  # already stopped, expired or not a stream: editing may still work
            log.debug("slack.stop_stream_ignored", error=slack_error_code(exc) or type(exc).__name__)
            return False
        return True

    async def _rollover(self, stream: Stream, target: CardTarget, chunks: list[dict[str, Any]]) -> None:
        """Slack expires long streams: stop this one and continue in a new message in the thread."""
        if stream.live:
            await self._call("chat.stopStream", self._client.chat_stopStream, channel=stream.channel, ts=stream.ts)
            # Remembered, so a retry after a throttled startStream does not stop the stopped stream again.
            stream.live = False
        old = stream.ts
        # The streamer paid for an append; the new stream is a chat.startStream of the workspace's own budget.
        stream.ts = await self._open(target, chunks, paid=False)
        stream.live = True
        stream.started = self._clock()
        stream.commit()
        log.info("slack.stream_rolled_over", old_ts=old, new_ts=stream.ts)

    async def _open(self, target: CardTarget, chunks: list[dict[str, Any]], *, paid: bool) -> str:
        """``chat.startStream`` in ``target``'s thread with the first ``chunks``; returns the new message's ts.

        ``paid``: the streamer drew the token from the ``chat.startStream`` bucket; else the pacer draws it.
        """

        def start() -> Awaitable[str]:
            return self._call(
                "chat.startStream",
                self._client.chat_startStream,
                channel=target.chat_id,
                thread_ts=target.thread_id,
                recipient_team_id=_recipient_team(target),
                recipient_user_id=target.user_id or None,
                chunks=chunks or None,
                workspace_id=target.workspace_id,
            )

        if paid:
            return await start()
        return await on_own_budget(self._pacer, self._buckets.start_bucket(target), target, start)

    async def _call(self, method: str, fn: Any, *, workspace_id: str = "", **kwargs: Any) -> str:
        """Call a stream method; throttling propagates, anything else breaks the stream."""
        try:
            response = await fn(**kwargs)
        except Exception as exc:
            error = classify(exc)
            if isinstance(error, RateLimited):
                raise error from None
            code = slack_error_code(exc)
            if method == "chat.startStream" and code in NATIVE_UNAVAILABLE and self._config.streaming == "auto":
                self._unavailable.add(workspace_id)
                log.warning("slack.native_streaming_unavailable", team=workspace_id, error=code,
                            note="using placeholder + chat.update in this workspace from now on")
            raise StreamBroken(f"{method} failed: {code or type(exc).__name__}") from None
        return str(response.get("ts") or kwargs.get("ts") or "")


def _add_text(chunks: list[dict[str, Any]], text: str) -> None:
    """Append ``text`` as markdown, to the last chunk when that is markdown already."""
    if chunks and chunks[-1]["type"] == "markdown_text":
        chunks[-1]["text"] += text
    else:
        chunks.append({"type": "markdown_text", "text": text})


def _recipient_team(target: CardTarget) -> str | None:
    """The asker's own workspace (differs from ours in Slack Connect channels)."""
    return str(target.extra.get("user_team") or target.workspace_id or "") or None
