"""The Slack :class:`~adapters.base.CardSink`: one message per question, native stream or edited.

*native*: ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``;
the answer is appended as markdown, tool calls as ``task_update`` chunks. A
stream older than ``stream_rollover_s`` is stopped and continued in a new one.
Any stream error turns that message into an edit-mode message.

A streaming message cannot carry blocks until ``chat.stopStream``, so a native
stream gets its Stop button from a small *control* message posted below it in
the thread (a "working" note and the same Stop button as edit mode). It is
posted in the background once the per-channel ``chat.postMessage`` budget
allows (an answer that ends first never gets one) and deleted with
``chat.delete`` when the answer ends, is stopped, fails, falls back or turns
into an edit-mode message (which carries its own button). When it cannot be
posted the answer still streams; "stop" typed in the thread still works.

*edit*: a placeholder ``chat.postMessage``, then ``chat.update`` with a
``markdown`` block and a plain ``text`` fallback, and a Stop button while live.

``streaming: auto`` tries native first and remembers, per workspace, when
Slack says native streaming is not available there.

Budgets: ``chat.postMessage`` per channel (placeholders, fallbacks, Stop
controls), ``chat.update`` per workspace, ``chat.startStream`` per workspace
(Tier 2, about 20 a minute: new streams, continuation parts and rollovers) and
``chat.appendStream`` / ``stopStream`` per workspace. :meth:`SlackCardSink.rate_key`
names the bucket of the call the streamer is about to make; when the sink ends
up making a different call (a queued card that cannot stream, native streaming
refused, a stream rolled over) it takes that call's token itself.

Slack answers are mapped onto the typed sink errors; pacing, coalescing and
retries are the streamer's job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError

from adapters.slack.render import (
    MAX_MARKDOWN_CHARS,
    card_blocks,
    card_markdown,
    card_text,
    control_blocks,
    control_done_blocks,
    stream_closing,
    stream_pieces,
)
from botgateway.budget import RateLimit
from botgateway.cards.split import split_parts
from botgateway.sink import (
    CardGone,
    CardHandle,
    CardOp,
    CardTarget,
    PermanentError,
    RateLimited,
    SinkError,
    TooLong,
    TransientError,
    parse_retry_after,
)
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.budget import RateBudget
    from botgateway.config import SlackConfig

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

_GONE = {
    "message_not_found", "cant_update_message", "edit_window_closed", "thread_not_found",
    "message_not_in_streaming_state", "is_archived", "channel_not_found",
}
_TOO_LONG = {"msg_too_long", "msg_blocks_too_long", "markdown_text_too_long"}
_PERMANENT = {
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "no_permission",
    "missing_scope", "not_in_channel", "restricted_action", "ekm_access_denied", "team_access_not_granted",
    "invalid_blocks", "invalid_arguments", "not_allowed_token_type", "org_login_required",
}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "timeout"}
_NATIVE_UNAVAILABLE = {
    "unknown_method", "not_allowed_token_type", "method_deprecated", "missing_scope", "feature_not_enabled",
    "not_allowed", "invalid_arguments", "missing_recipient_user_id", "missing_recipient_team_id",
    "team_not_allowed", "access_denied",
}
"""``chat.startStream`` errors meaning streaming is not available in this workspace (auto mode remembers)."""

_DELETE_RATE_PER_MIN = 50.0
"""``chat.delete`` is Tier 3 (50+ per minute per workspace)."""

_CONTROL_WAIT_S = 5.0
"""How long ending a card waits for its Stop control to go away before carrying on (it still goes, in the background)."""

_CONTROL_ATTEMPTS = 3
"""Tries per control call when Slack throttles it."""


def window_limit(calls: float, window_s: float) -> RateLimit:
    """A token bucket that never lets more than ``calls`` through in any ``window_s`` window.

    A bucket of ``burst`` refilling at ``rate`` admits at most ``burst + rate * window``
    calls per window; aim at 90 % of Slack's count to leave room for clock and
    network skew between our bucket and Slack's counter.
    """
    allowed = max(calls * 0.9, 1.0)
    burst = max(1, int(allowed * 0.2))
    # A budget of one call per window cannot be met exactly by a bucket; refill slowly then.
    rate = max(allowed - burst, allowed * 0.1) / window_s
    return RateLimit(rate_per_s=rate, burst=burst)


def slack_error_code(exc: BaseException) -> str:
    """The ``error`` code of a Slack API failure (empty when there is none)."""
    response = getattr(exc, "response", None)
    data = getattr(response, "data", None)
    if isinstance(data, Mapping):
        return str(data.get("error") or "")
    return ""


def classify(exc: BaseException) -> SinkError:
    """Map a Slack SDK / transport failure onto the typed sink errors (messages carry no secrets)."""
    if isinstance(exc, SinkError):
        return exc
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = getattr(response, "status_code", None) or getattr(response, "status", None) or 0
        headers = getattr(response, "headers", None) or {}
        code = slack_error_code(exc)
        if status == 429 or code == "ratelimited":
            retry_after = parse_retry_after(_header(headers, "Retry-After"))
            return RateLimited(retry_after, f"slack throttled the call ({code or status})")
        if code in _GONE:
            return CardGone(f"the message can no longer be updated ({code})")
        if code in _TOO_LONG:
            return TooLong(f"the message is too long for slack ({code})")
        if code in _PERMANENT:
            return PermanentError(f"slack refused the call ({code}); check the app's token and scopes")
        if status >= 500 or code in _TRANSIENT:
            return TransientError(f"slack is having trouble ({code or f'HTTP {status}'})")
        if not code:
            return TransientError(f"unexpected answer from slack (HTTP {status})")
        return PermanentError(f"slack refused the call ({code})")
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
        return TransientError(f"could not reach slack ({type(exc).__name__})")
    return PermanentError(f"unexpected error talking to slack ({type(exc).__name__})")


def _header(headers: Any, name: str) -> str | None:
    try:
        value = headers.get(name) or headers.get(name.lower())
    except AttributeError:
        return None
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return str(value) if value is not None else None


class _StreamBroken(Exception):
    """A native stream cannot continue (error or text that cannot be appended)."""


class SlackCardSink:
    """Creates, streams and finalizes Slack answer messages (see the module docstring)."""

    platform = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        budget: RateBudget | None = None,
    ) -> None:
        """``budget`` is the gateway's :class:`~botgateway.budget.RateBudget`: Stop controls of native
        streams draw from the same per-channel ``chat.postMessage`` bucket as the cards, and stream
        rollovers from the workspace's ``chat.startStream`` bucket (None: unpaced)."""
        self._client = client
        self._config = config
        self._clock = clock
        self._budget = budget
        self.max_chars = config.max_live_bytes
        """Live answer text per message; past it the answer continues in a new thread message."""
        window = config.rate_window_s
        self._update_limit = window_limit(config.update_rate_per_min, window)
        self._append_limit = window_limit(config.append_rate_per_min, window)
        self._start_limit = window_limit(config.start_stream_rate_per_min, window)
        self._post_limit = RateLimit(rate_per_s=config.post_rate_per_s, burst=1)
        self._delete_limit = window_limit(_DELETE_RATE_PER_MIN, window)
        self._native_unavailable: set[str] = set()
        # Mode per live card, so rate_key names the bucket the next call really uses.
        self._modes: OrderedDict[tuple[str, str, str, str], str] = OrderedDict()
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._converted: OrderedDict[tuple[str, str], CardHandle] = OrderedDict()
        # Stop controls of native streams, per card (one per turn, kept across continuation parts).
        self._controls: OrderedDict[tuple[str, str, str, str], _Control] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    # --- budgets ----------------------------------------------------------------

    def native_available(self, workspace_id: str) -> bool:
        """False once auto mode learned that this workspace cannot stream natively."""
        return workspace_id not in self._native_unavailable

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The bucket of the call ``op`` makes next for ``target``.

        Creating a card: ``chat.startStream`` per workspace when it will stream
        natively, else ``chat.postMessage`` per channel (fallbacks too). Updates:
        ``chat.update`` or stream appends per workspace, shared by all cards.
        """
        team = target.workspace_id or "-"
        if op == "create" and self._planned_create_mode(target) == "native":
            return self._start_key(target), self._start_limit
        if op in ("create", "fallback"):
            return self._post_key(target), self._post_limit
        if self._modes.get(_card_key(target), self._initial_mode(target)) == "native":
            return f"slack:{team}:stream", self._append_limit
        return f"slack:{team}:chat.update", self._update_limit

    def _post_key(self, target: CardTarget) -> str:
        return f"slack:{target.workspace_id or '-'}:post:{target.chat_id}"

    def _start_key(self, target: CardTarget) -> str:
        return f"slack:{target.workspace_id or '-'}:chat.startStream"

    def _planned_create_mode(self, target: CardTarget) -> str:
        """The mode ``rate_key("create")`` budgets for: the card's mode so far, else its workspace's.

        The snapshot is not known yet, so a queued card (which never streams) is
        budgeted as a stream on its first try; :meth:`create` then pays for the
        placeholder itself, and the card's retries and later parts use what it became.
        """
        return self._modes.get(_card_key(target)) or self._initial_mode(target)

    # --- CardSink -----------------------------------------------------------------

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Start a native stream (when possible) or post the placeholder message."""
        planned = self._planned_create_mode(target)
        if self._initial_mode(target, snapshot) == "native":
            try:
                handle = await self._start_stream(target, snapshot, paid=planned == "native")
                self._remember(target, "native")
                if not snapshot.final:
                    self._open_control(target)
                return handle
            except RateLimited:
                raise
            except _StreamBroken as exc:
                log.info("slack.stream_unavailable", team=target.workspace_id, reason=str(exc))
        self._remember(target, "edit")
        if planned == "edit":
            return await self._post(target, snapshot)
        return await self._on_own_budget(self._post_key(target), self._post_limit, target,
                                         lambda: self._post(target, snapshot))

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show ``snapshot``: append the new part to the stream, or edit the message."""
        stream = self._stream_of(handle)
        if stream is not None:
            try:
                await self._append(stream, handle.target, snapshot)
                return handle
            except _StreamBroken as exc:
                return await self._to_edit(handle, snapshot, str(exc))
        self._check_size(snapshot)
        handle = self._edit_handle(handle)
        await self._edit(handle, snapshot)
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` and end the stream; the Stop button goes away."""
        stream = self._stream_of(handle)
        if stream is not None:
            try:
                await self._stop_stream(stream, handle.target, snapshot)
                self._streams.pop(_stream_key(handle), None)
            except _StreamBroken as exc:
                return await self._to_edit(handle, snapshot, str(exc))
            if not snapshot.continued:  # a continued part: the next part of the same answer keeps the control
                await self._close_control(handle.target)
            return handle
        if handle.data.get("mode") is None:
            # Recovered after a restart: we do not know how the message was made; a stream must be stopped.
            try:
                note, _ = stream_closing(snapshot)
                await self._client.chat_stopStream(channel=handle.target.chat_id, ts=handle.card_id, markdown_text=note or None)
                return handle
            except Exception as exc:
                log.debug("slack.recover_stop_stream_ignored", error=slack_error_code(exc) or type(exc).__name__)
        self._check_size(snapshot)
        handle = self._edit_handle(handle)
        await self._edit(handle, snapshot)
        if not snapshot.continued:
            await self._close_control(handle.target)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Post ``snapshot`` as new thread message(s), split when long: the answer is never lost."""
        final = dataclasses.replace(snapshot, status=snapshot.status if snapshot.final else "done")
        body = card_markdown(final)
        # The streamer already cut the answer to size; split only what Slack would refuse.
        parts = split_parts(body, MAX_MARKDOWN_CHARS) if len(body) > MAX_MARKDOWN_CHARS else [body]
        for part in parts:
            blocks = [{"type": "markdown", "text": part}]
            text = card_text(dataclasses.replace(final, blocks=(), answer=part, footer="", error="", asker=""))
            await self._call(
                self._client.chat_postMessage,
                channel=target.chat_id,
                thread_ts=target.thread_id,
                text=text,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
            )
        if not snapshot.continued:
            await self._close_control(target)

    async def aclose(self) -> None:
        """Take away Stop controls of cards that never ended and wait for control calls still running."""
        for key in list(self._controls):
            self._retire_later(self._controls.pop(key))
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=_CONTROL_WAIT_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # --- edit mode -----------------------------------------------------------------

    async def _post(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        blocks = self._blocks(target, snapshot)
        response = await self._call(
            self._client.chat_postMessage,
            channel=target.chat_id,
            thread_ts=target.thread_id,
            text=card_text(snapshot),
            blocks=blocks,
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = str(response["ts"])
        channel = str(response.get("channel") or target.chat_id)
        return CardHandle(card_id=ts, target=target, data={"mode": "edit", "channel": channel, "ts": ts})

    async def _edit(self, handle: CardHandle, snapshot: CardSnapshot) -> None:
        await self._call(
            self._client.chat_update,
            channel=handle.data.get("channel") or handle.target.chat_id,
            ts=handle.data.get("ts") or handle.card_id,
            text=card_text(snapshot),
            blocks=self._blocks(handle.target, snapshot),
        )

    def _check_size(self, snapshot: CardSnapshot) -> None:
        """Live text is kept under ``max_live_bytes`` (UTF-8), so CJK answers split as early as Latin ones."""
        size = len(snapshot.answer.encode("utf-8"))
        if size > self._config.max_live_bytes:
            raise TooLong(f"the answer part has {size} bytes; the live limit is {self._config.max_live_bytes}")

    def _blocks(self, target: CardTarget, snapshot: CardSnapshot) -> list[dict[str, Any]]:
        turn_id = target.turn_id if self._config.stop_button else ""
        blocks = card_blocks(snapshot, turn_id=turn_id)
        if len(blocks[0]["text"]) > MAX_MARKDOWN_CHARS:
            raise TooLong(f"the card has {len(blocks[0]['text'])} characters; slack takes {MAX_MARKDOWN_CHARS}")
        return blocks

    async def _to_edit(self, handle: CardHandle, snapshot: CardSnapshot, reason: str) -> CardHandle:
        """A stream failed: close it if we can and keep the message up to date by editing it from now on."""
        log.info("slack.stream_fallback", team=handle.target.workspace_id, reason=reason)
        stream = self._streams.pop(_stream_key(handle), None)
        channel = stream.channel if stream else str(handle.data.get("channel") or handle.target.chat_id)
        ts = stream.ts if stream else str(handle.data.get("ts") or handle.card_id)
        self._remember(handle.target, "edit")
        try:
            await self._client.chat_stopStream(channel=channel, ts=ts)
        except Exception as exc:  # already stopped or expired: editing may still work
            log.debug("slack.stop_stream_ignored", error=slack_error_code(exc) or type(exc).__name__)
        await self._close_control(handle.target)  # the edited message carries its own Stop button
        edited = CardHandle(card_id=handle.card_id, target=handle.target, data={"mode": "edit", "channel": channel, "ts": ts})
        self._converted[_stream_key(handle)] = edited
        while len(self._converted) > 10_000:
            self._converted.popitem(last=False)
        await self._edit(edited, snapshot)
        return edited

    # --- native mode ---------------------------------------------------------------

    def _initial_mode(self, target: CardTarget, snapshot: CardSnapshot | None = None) -> str:
        mode = self._config.streaming
        if mode == "edit" or not target.thread_id:
            return "edit"  # a stream must be a reply in a thread
        if snapshot is not None and snapshot.status == "queued":
            return "edit"  # the queue note must disappear later; a stream cannot take text back
        if mode == "auto" and target.workspace_id in self._native_unavailable:
            return "edit"
        return "native"

    def _edit_handle(self, handle: CardHandle) -> CardHandle:
        """The edit-mode handle of ``handle``'s message (the current message if a stream rolled over, then failed)."""
        return self._converted.get(_stream_key(handle)) or _as_edit(handle)

    def _stream_of(self, handle: CardHandle) -> _Stream | None:
        if handle.data.get("mode") != "native":
            return None
        return self._streams.get(_stream_key(handle))

    def _remember(self, target: CardTarget, mode: str) -> None:
        key = _card_key(target)
        self._modes[key] = mode
        self._modes.move_to_end(key)
        while len(self._modes) > 10_000:  # cards that were never finalized
            self._modes.popitem(last=False)

    async def _start_stream(self, target: CardTarget, snapshot: CardSnapshot, *, paid: bool) -> CardHandle:
        """Open the card's stream; ``paid``: the streamer drew this ``chat.startStream`` token already."""
        stream = _Stream(channel=target.chat_id, ts="", started=self._clock())
        stream.ts = await self._open_stream(target, stream.chunks_for(snapshot), paid=paid)
        stream.commit()
        handle = CardHandle(card_id=stream.ts, target=target, data={"mode": "native", "channel": target.chat_id, "ts": stream.ts})
        self._streams[_stream_key(handle)] = stream
        while len(self._streams) > 10_000:
            self._streams.pop(next(iter(self._streams)))
        return handle

    async def _append(self, stream: _Stream, target: CardTarget, snapshot: CardSnapshot) -> None:
        chunks = stream.chunks_for(snapshot)
        if not chunks:
            return
        if self._clock() - stream.started >= self._config.stream_rollover_s:
            await self._rollover(stream, target, chunks)
            return
        await self._stream_call("chat.appendStream", self._client.chat_appendStream, channel=stream.channel, ts=stream.ts, chunks=chunks)
        stream.commit()

    async def _rollover(self, stream: _Stream, target: CardTarget, chunks: list[dict[str, Any]]) -> None:
        """Slack expires long streams: stop this one and continue in a new message in the thread."""
        if stream.live:
            await self._stream_call("chat.stopStream", self._client.chat_stopStream, channel=stream.channel, ts=stream.ts)
            # Remembered, so a retry after a throttled startStream does not stop the stopped stream again.
            stream.live = False
        old = stream.ts
        # The streamer paid for an append; the new stream is a chat.startStream of the workspace's own budget.
        stream.ts = await self._open_stream(target, chunks, paid=False)
        stream.live = True
        stream.started = self._clock()
        stream.commit()
        log.info("slack.stream_rolled_over", old_ts=old, new_ts=stream.ts)

    async def _open_stream(self, target: CardTarget, chunks: list[dict[str, Any]], *, paid: bool) -> str:
        """``chat.startStream`` in ``target``'s thread with the first ``chunks``; returns the new message's ts.

        ``paid``: the streamer drew the token from the ``chat.startStream`` bucket; else the sink draws it.
        """

        def start() -> Awaitable[str]:
            return self._stream_call(
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
        return await self._on_own_budget(self._start_key(target), self._start_limit, target, start)

    async def _stop_stream(self, stream: _Stream, target: CardTarget, snapshot: CardSnapshot) -> None:
        if not stream.live:
            # A rollover was throttled after its old message stopped: the rest goes into a new one.
            stream.ts = await self._open_stream(target, [], paid=False)
            stream.live = True
            stream.started = self._clock()
        chunks = stream.chunks_for(snapshot)
        note, blocks = stream_closing(snapshot)
        if note:
            if chunks and chunks[-1]["type"] == "markdown_text":
                chunks[-1]["text"] += note
            else:
                chunks.append({"type": "markdown_text", "text": note})
        await self._stream_call(
            "chat.stopStream",
            self._client.chat_stopStream,
            channel=stream.channel,
            ts=stream.ts,
            chunks=chunks or None,
            blocks=blocks or None,
        )
        stream.commit()

    # --- the Stop control of a native stream --------------------------------------------

    def _open_control(self, target: CardTarget) -> None:
        """Post the Stop control for ``target``'s stream in the background (once per card)."""
        key = _card_key(target)
        if not self._config.stop_button or not target.turn_id or not target.thread_id or key in self._controls:
            return
        control = _Control(channel=target.chat_id, thread_ts=target.thread_id, target=target)
        self._controls[key] = control
        while len(self._controls) > 10_000:  # cards that were never finalized
            self._retire_later(self._controls.popitem(last=False)[1])
        control.task = self._spawn(self._post_control(control))

    async def _close_control(self, target: CardTarget) -> None:
        """Take the card's Stop control away; waits a little for it, never raises."""
        control = self._controls.pop(_card_key(target), None)
        if control is None:
            return
        task = self._retire_later(control)
        # asyncio.wait never cancels the task: if this call is cancelled or times out, the control still goes.
        await asyncio.wait({task}, timeout=_CONTROL_WAIT_S)

    def _retire_later(self, control: _Control) -> asyncio.Task[None]:
        control.ending = True
        return self._spawn(self._retire(control))

    async def _retire(self, control: _Control) -> None:
        post = control.task
        if post is not None and not post.done():
            if not control.posting and not control.ts:
                post.cancel()  # still waiting for a post token: the control is simply never posted
            # A post in flight (or just landed) deletes its own message: it sees ``ending``.
            await asyncio.wait({post})
            return
        if control.ts:
            await self._delete_control(control)

    async def _post_control(self, control: _Control) -> None:
        target = control.target

        async def post() -> Any:
            if control.ending:
                return None  # the answer ended while we waited for the budget: no call at all
            control.posting = True
            try:
                return await self._client.chat_postMessage(
                    channel=control.channel,
                    thread_ts=control.thread_ts,
                    text=t(target.locale, "control_working"),
                    blocks=control_blocks(target.turn_id, target.locale),
                    unfurl_links=False,
                    unfurl_media=False,
                )
            finally:
                control.posting = False

        try:
            response = await self._paced(self._post_key(target), self._post_limit, f"slack-control:{target.turn_id}", post)
            if response is None:
                return
            control.ts = str(response.get("ts") or "")
            control.channel = str(response.get("channel") or control.channel)
            log.debug("slack.stop_control_posted", turn_id=target.turn_id, ts=control.ts)
            if control.ending:
                await self._delete_control(control)
        except asyncio.CancelledError:
            raise
        except SinkError as error:
            log.warning("slack.stop_control_failed", turn_id=target.turn_id, channel=control.channel,
                        error=str(error), note="the answer streams without a Stop button; 'stop' in the thread still works")
        except Exception:
            log.exception("slack.stop_control_crashed", turn_id=target.turn_id)

    async def _delete_control(self, control: _Control) -> None:
        """Delete the control message; if Slack will not, at least take its button away."""
        target = control.target
        team = target.workspace_id or "-"
        owner = f"slack-control:{target.turn_id}"
        try:
            await self._paced(f"slack:{team}:chat.delete", self._delete_limit, owner,
                              self._client.chat_delete, channel=control.channel, ts=control.ts)
            log.debug("slack.stop_control_deleted", turn_id=target.turn_id, ts=control.ts)
            return
        except CardGone:
            return  # someone deleted it already
        except Exception as exc:
            log.info("slack.stop_control_delete_failed", turn_id=target.turn_id, error=str(exc) or type(exc).__name__)
        try:
            await self._paced(f"slack:{team}:chat.update", self._update_limit, owner, self._client.chat_update,
                              channel=control.channel, ts=control.ts, text=t(target.locale, "control_done"),
                              blocks=control_done_blocks(target.locale))
        except Exception as exc:  # a stale button only earns its presser an "already finished" note
            log.warning("slack.stop_control_left", turn_id=target.turn_id, error=str(exc) or type(exc).__name__)

    async def _paced(self, key: str, limit: RateLimit, owner: str, fn: Any, **kwargs: Any) -> Any:
        """One control call through the shared budget, retried when Slack throttles it; other errors are typed and raised."""
        for attempt in range(_CONTROL_ATTEMPTS):
            if self._budget is not None:
                await self._budget.acquire(key, limit, owner)
            try:
                return await fn(**kwargs)
            except Exception as exc:
                error = classify(exc)
                if not isinstance(error, RateLimited) or attempt + 1 >= _CONTROL_ATTEMPTS:
                    raise error from None
                await self._throttled(key, error)
        raise AssertionError("unreachable")

    async def _throttled(self, key: str, error: RateLimited) -> None:
        """Slack throttled a call the sink paid for itself: pause that shared bucket (every caller would be throttled too)."""
        pause = error.retry_after if error.retry_after and error.retry_after > 0 else 1.0
        if self._budget is not None:
            self._budget.pause(key, pause)
        else:
            await asyncio.sleep(min(pause, _CONTROL_WAIT_S))

    async def _on_own_budget(self, key: str, limit: RateLimit, target: CardTarget,
                             call: Callable[[], Awaitable[_T]]) -> _T:
        """Make ``call``, whose bucket ``key`` is not the one the streamer drew from for this sink call.

        The token is drawn here. When Slack throttles the call, this bucket is paused
        and the throttle comes back as a :class:`TransientError`: the streamer retries
        without pausing its own bucket, which Slack did not throttle, and the retry
        waits here for this one. Without a shared budget the throttle goes to the caller as is.
        """
        if self._budget is None:
            return await call()
        await self._budget.acquire(key, limit, f"slack-card:{target.turn_id}", priority=True)
        try:
            return await call()
        except RateLimited as error:
            await self._throttled(key, error)
            raise TransientError(f"{error}; waiting for that budget before trying again") from None

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _stream_call(self, method: str, fn: Any, *, workspace_id: str = "", **kwargs: Any) -> str:
        """Call a stream method; throttling propagates, anything else breaks the stream."""
        try:
            response = await fn(**kwargs)
        except Exception as exc:
            error = classify(exc)
            if isinstance(error, RateLimited):
                raise error from None
            code = slack_error_code(exc)
            if method == "chat.startStream" and code in _NATIVE_UNAVAILABLE and self._config.streaming == "auto":
                self._native_unavailable.add(workspace_id)
                log.warning("slack.native_streaming_unavailable", team=workspace_id, error=code,
                            note="using placeholder + chat.update in this workspace from now on")
            raise _StreamBroken(f"{method} failed: {code or type(exc).__name__}") from None
        return str(response.get("ts") or kwargs.get("ts") or "")

    async def _call(self, fn: Any, **kwargs: Any) -> Any:
        try:
            return await fn(**kwargs)
        except Exception as exc:
            raise classify(exc) from None


class _Stream:
    """What one native stream already shows, so each call appends only what is new."""

    def __init__(self, *, channel: str, ts: str, started: float) -> None:
        self.channel = channel
        self.ts = ts
        """The current stream message (changes on rollover)."""
        self.started = started
        self.live = True
        """False between stopping the old message of a rollover and starting the new one."""
        self.sent = ""
        """The text appended so far (narration and answer, linearized)."""
        self.tasks: dict[str, str] = {}
        """Task id → status last sent."""
        self._pending: tuple[str, dict[str, str]] | None = None

    def chunks_for(self, snapshot: CardSnapshot) -> list[dict[str, Any]]:
        """Chunks that bring the stream up to ``snapshot``; :meth:`commit` once Slack accepted them.

        Raises :class:`_StreamBroken` when the snapshot takes back text that was streamed.
        """
        sent, tasks = self.sent, dict(self.tasks)
        chunks: list[dict[str, Any]] = []
        position = 0
        for kind, piece in stream_pieces(snapshot):
            if kind == "task":
                if tasks.get(piece["id"]) != piece["status"]:
                    chunks.append(piece)
                    tasks[piece["id"]] = piece["status"]
                continue
            end = position + len(piece)
            shown = sent[position:end]
            if not piece.startswith(shown):
                raise _StreamBroken("the card's text changed in a way a stream cannot show")
            new = piece[len(shown):]
            if new:
                if position + len(shown) < len(sent):
                    raise _StreamBroken("new text would land before text already streamed")
                if chunks and chunks[-1]["type"] == "markdown_text":
                    chunks[-1]["text"] += new
                else:
                    chunks.append({"type": "markdown_text", "text": new})
                sent += new
            position = end
        if position < len(sent):
            raise _StreamBroken("the card's text became shorter than what was streamed")
        self._pending = (sent, tasks)
        return chunks

    def commit(self) -> None:
        """The chunks of the last :meth:`chunks_for` were accepted."""
        if self._pending is not None:
            self.sent, self.tasks = self._pending
            self._pending = None


class _Control:
    """The Stop control message of one native stream (mutable; owned by the sink)."""

    def __init__(self, *, channel: str, thread_ts: str, target: CardTarget) -> None:
        self.channel = channel
        self.thread_ts = thread_ts
        self.target = target
        """The card the control stops (its turn id is the button's value)."""
        self.ts = ""
        """The control message once posted."""
        self.task: asyncio.Task[None] | None = None
        """The background post."""
        self.posting = False
        """True while ``chat.postMessage`` is in flight (it cannot be taken back, only deleted after)."""
        self.ending = False
        """The card ended: do not post; delete what was posted."""


def _recipient_team(target: CardTarget) -> str | None:
    """The asker's own workspace (differs from ours in Slack Connect channels)."""
    return str(target.extra.get("user_team") or target.workspace_id or "") or None


def _stream_key(handle: CardHandle) -> tuple[str, str]:
    return (handle.target.chat_id, handle.card_id)


def _card_key(target: CardTarget) -> tuple[str, str, str, str]:
    return (target.workspace_id, target.chat_id, target.thread_id or "", target.turn_id)


def _as_edit(handle: CardHandle) -> CardHandle:
    """The same message as an edit-mode handle."""
    if handle.data.get("mode") == "edit":
        return handle
    channel = str(handle.data.get("channel") or handle.target.chat_id)
    ts = str(handle.data.get("ts") or handle.card_id)
    return CardHandle(card_id=ts, target=handle.target, data={"mode": "edit", "channel": channel, "ts": ts})
