"""The Slack :class:`~botgateway.sink.CardSink`: one message per question, native stream or edited.

*native* (:mod:`adapters.slack.native`): ``chat.startStream`` /
``chat.appendStream`` / ``chat.stopStream``, with a Stop control message below
the stream (:mod:`adapters.slack.control`). Any stream error turns that
message into an edit-mode message.

*edit* (:mod:`adapters.slack.edit`): a placeholder ``chat.postMessage``, then
``chat.update`` with a ``markdown`` block, a plain ``text`` fallback and a
Stop button while live.

``streaming: auto`` tries native first and remembers, per workspace, when
Slack says native streaming is not available there.

A channel takes about one new message a second, so the answers of one
channel make their first message in the order the questions came
(:mod:`adapters.slack.channel_line`): each card lines up when it starts and,
when its turn comes, makes its message with what it shows by then. An answer
that is ready by then goes out *finished*, in one message, never a placeholder
first; one still being written starts its live card. ``chat.startStream``
draws from the channel's budget too (``stream_starts_per_channel``), the
workspace's Tier 2 window paid by the sink on the side.

Each answer's mode is planned from the budgets when it starts (:meth:`SlackCardSink.plan`):
native while ``chat.startStream`` and ``chat.stopStream`` have calls to spare
beyond what open streams reserved; otherwise edit mode while ``chat.update``
has; otherwise *deferred*: no message until the answer is complete, then one
message (or a few, when long) on the channel's ``chat.postMessage`` budget. So
a spent budget never leaves anyone with nothing, and never delays finals.

:meth:`SlackCardSink.rate_key` names the bucket (:mod:`adapters.slack.limits`)
of the call the streamer is about to pay for. When the sink ends up making a
different call (a queued card that cannot stream, native streaming refused, a
stream rolled over) or one of its own (Stop controls), the
:class:`~botgateway.sink.CallPacer` pays for it. Slack answers are mapped onto
the typed sink errors (:mod:`adapters.slack.errors`); pacing, coalescing and
retries are the streamer's and the pacer's job. A turn's charts are uploaded as
files right under the answer (:mod:`adapters.slack.uploads`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

import structlog
from cachetools import LRUCache

from adapters.slack.channel_line import ChannelLines, Place
from adapters.slack.control import StopControls, is_control
from adapters.slack.edit import EditMessages, post_ephemeral
from adapters.slack.errors import call_slack
from adapters.slack.handles import CardKey, as_edit, card_key
from adapters.slack.inert import allowed_mentions
from adapters.slack.limits import Bucket, SlackBuckets, on_own_budget
from adapters.slack.native import NativeStreams, StreamBroken
from adapters.slack.render import stream_closing
from adapters.slack.uploads import ChartUploads
from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.sink import CallPacer, CardGone, CardHandle, CardOp, CardTarget, FleetLines
from botgateway.snapshot import CardSnapshot

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig
    from botgateway.stores.base import OpenCardStore

__all__ = ["SlackCardSink"]

log = structlog.get_logger(__name__)

_Mode: TypeAlias = Literal["native", "edit", "deferred", "done"]
"""How a card's next calls are made; ``done``: its message went out finished, and nothing is left to show."""

_MAX_CARDS = 10_000
"""Cards whose mode is remembered at most; the least recently used (never finalized) are forgotten."""

LEFT = "left_in"
"""A taken-over card's handle data: the channel of the message a dead process left, deleted once the answer is
posted."""


class SlackCardSink:
    """Creates, streams and finalizes Slack answer messages (see the module docstring)."""

    platform = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        pacer: CallPacer | None = None,
        lines: FleetLines | None = None,
    ) -> None:
        """``pacer`` pays for the calls the sink makes beyond the one the streamer paid for: Stop controls
        of native streams draw from the same per-channel ``chat.postMessage`` bucket as the cards, stream
        rollovers from the workspace's ``chat.startStream`` bucket (None: those calls are made unpaced).
        ``lines``: the fleet's channel lines (None: this process's alone)."""
        self._config = config
        self._pacer = pacer
        self.max_chars = config.max_live_bytes
        """Live answer text per message; past it the answer continues in a new thread message."""
        self._buckets = SlackBuckets.from_config(config)
        self._client = client
        self._native = NativeStreams(client, config, buckets=self._buckets, pacer=pacer, clock=clock)
        self._edit = EditMessages(client, config)
        self._lines = ChannelLines(fleet=lines)
        self._controls = StopControls(client, buckets=self._buckets, pacer=pacer, enabled=config.stop_button,
                                      idle=self._lines.idle)
        self._uploads = ChartUploads(client, self._buckets, pacer)
        # Mode per live card, so rate_key names the bucket the next call really uses.
        self._modes: LRUCache[CardKey, _Mode] = LRUCache(_MAX_CARDS)
        # Cards taken over whose message may still be a dead process's stream: stopped before their first edit.
        self._taken_over: LRUCache[CardKey, bool] = LRUCache(_MAX_CARDS)

    def keep_controls_on_record(self, store: OpenCardStore, instance_id: str) -> None:
        """Record Stop controls in ``store`` as the cards are (owned by ``instance_id``), for recovery after a crash."""
        self._controls.keep_on_record(store, instance_id)

    # --- budgets ----------------------------------------------------------------

    @property
    def lines(self) -> ChannelLines:
        """Every channel's line of answers waiting for their first message (the adapter announces questions in it)."""
        return self._lines

    def line_up(self, target: CardTarget) -> Place:
        """The card of ``target`` lines up for its channel's next new message (:mod:`adapters.slack.channel_line`)."""
        return self._lines.line_up(target)

    def native_available(self, workspace_id: str) -> bool:
        """False once auto mode learned that this workspace cannot stream natively."""
        return self._native.available(workspace_id)

    def rate_key(self, op: CardOp, target: CardTarget) -> Bucket:
        """The bucket of the call ``op`` makes next for ``target``.

        Creating a card: a new message in the channel (``chat.postMessage``, or
        ``chat.startStream`` when stream starts count per channel), else
        ``chat.startStream`` per workspace; fallbacks are channel messages too.
        Updates: ``chat.update`` or stream appends per workspace, shared by all
        cards. Finalizing a recovered Stop control: ``chat.delete`` per
        workspace. A deferred answer makes no call until its final, one
        ``chat.postMessage``; an answer that went out finished makes none.
        """
        if op == "finalize" and is_control(target):
            return self._buckets.delete_bucket(target)  # a recovered Stop control is deleted
        mode = self._planned_create_mode(target) if op == "create" else self._modes.get(card_key(target))
        if op == "create" and mode == "native" and not self._config.stream_starts_per_channel:
            return self._buckets.start_bucket(target)
        if (op in ("create", "update") and mode == "deferred") or (op in ("update", "finalize") and mode == "done"):
            return self._buckets.no_call_bucket(target)
        if op in ("create", "fallback") or mode == "deferred":
            return self._buckets.post_bucket(target)
        if (mode or self._initial_mode(target)) == "native":
            return self._buckets.stop_bucket(target) if op == "finalize" else self._buckets.stream_bucket(target)
        return self._buckets.update_bucket(target)

    def _planned_create_mode(self, target: CardTarget) -> _Mode:
        """The mode ``rate_key("create")`` budgets for: the card's mode so far, else the plan made now (and kept).

        The snapshot is not known yet, so a queued card (which never streams) is
        budgeted as a stream on its first try; :meth:`create` then has the pacer pay
        for the placeholder, and the card's retries and later parts use what it became.
        """
        key = card_key(target)
        mode = self._modes.get(key)
        if mode is None:
            mode = self._modes[key] = self.plan(target)
        elif mode == "native" and not self._may_start(target):
            # The workspace's stream window was spent since the plan: the card is an edited message, planned so
            # before its final is reserved.
            mode = self._modes[key] = self._edit_or_deferred(target)
        return mode

    def plan(self, target: CardTarget) -> _Mode:
        """The mode a new answer starts in, from the budgets as they are now (see the module docstring)."""
        mode = self._initial_mode(target)
        if self._pacer is None:
            return mode
        if mode == "native" and (self._spare(self._buckets.start_bucket(target)) < 1
                                 or self._spare(self._buckets.stop_bucket(target)) < 1):
            mode = "edit"  # no stream could start now, or its stop would take a reserved call
        return self._edit_or_deferred(target) if mode == "edit" else mode

    def _edit_or_deferred(self, target: CardTarget) -> _Mode:
        if self._pacer is not None and self._spare(self._buckets.update_bucket(target)) < 1:
            log.info("slack.answer_deferred", team=target.workspace_id, reason="chat.update budget reserved for finals")
            return "deferred"
        return "edit"

    def take_over(self, target: CardTarget) -> None:
        """``target``'s card is a message another process made (a resumed turn's): the answer comes complete, in a
        new message on the channel's budget, and the message left behind is deleted then.

        Slack still counts the dead process's ``chat.update`` and stream calls of the last minute, which this
        process cannot know: a resumed answer edited live would spend a window that may be gone, and be throttled
        where it matters most. A new message and a ``chat.delete`` need only the channel's slot (the burst the dead
        process spent is seconds old) and the delete tier; nothing of the left message stays live.
        """
        self._modes[card_key(target)] = "deferred"
        self._taken_over[card_key(target)] = True

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The call planned for ``op`` cannot be had soon: the answer takes the next strategy down.

        The plan read the budgets as this process last saw them, a moment old in a fleet: another replica may
        have spent the workspace's window meanwhile, or promised its calls to its own cards' finals. A stream
        whose ``chat.startStream`` cannot start soon, or whose ``chat.stopStream`` cannot be promised, starts as
        an edited message instead; an edited message whose final ``chat.update`` cannot be promised is deferred
        (one message once the answer is complete, on the channel's ``chat.postMessage`` budget). A deferred
        answer has no other way (:class:`~botgateway.sink.Replanning`).
        """
        key = card_key(target)
        mode = self._modes.get(key)
        if mode == "native" and op == "create" and self._config.stream_starts_per_channel:
            return False  # the channel's budget is what it waits for, and an edited message would wait for it too
        if mode == "native" and op in ("create", "finalize"):
            new: _Mode = self._edit_or_deferred(target)
        elif mode == "edit" and op == "finalize":
            new = "deferred"
        else:
            return False
        self._modes[key] = new
        log.info("slack.answer_replanned", team=target.workspace_id, mode=new, op=op,
                 reason="the workspace's budget for that call is spent or promised to other answers")
        return True

    def _spare(self, bucket: Bucket) -> float:
        assert self._pacer is not None
        return self._pacer.spare(*bucket)

    def _initial_mode(self, target: CardTarget, snapshot: CardSnapshot | None = None) -> _Mode:
        mode = self._config.streaming
        if mode == "edit" or not target.thread_id:
            return "edit"  # a stream must be a reply in a thread
        if snapshot is not None and snapshot.status == "queued":
            return "edit"  # the queue note must disappear later; a stream cannot take text back
        if snapshot is not None and snapshot.preamble:
            return "edit"  # a preamble (an alert's status) changes later; a stream cannot take text back
        if mode == "auto" and not self._native.available(target.workspace_id):
            return "edit"
        return "native"

    # --- CardSink -----------------------------------------------------------------

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """The card's first message, made in its slot: the finished answer when it is complete by then, else a native
        stream (when possible) or the placeholder message; a deferred answer makes no call."""
        self._lines.made(target)  # its slot is granted: the next answer of the channel moves up
        planned = self._planned_create_mode(target)
        # A card with a preamble (an alert's) lives on and is edited later: it needs its message now.
        if planned == "deferred" and not snapshot.final and not snapshot.preamble:
            return CardHandle(card_id=f"deferred-{target.turn_id}-{snapshot.part}", target=target, data={"mode": "deferred"})
        per_channel = self._config.stream_starts_per_channel
        channel_paid = planned in ("edit", "done") or (planned == "native" and per_channel)
        if snapshot.final and not snapshot.preamble:
            return await self._post_finished(target, snapshot, paid=channel_paid)
        if planned == "native" and self._initial_mode(target, snapshot) == "native" and self._may_start(target):
            try:
                handle = await self._native.start(target, snapshot, paid=not per_channel)
            except StreamBroken as exc:
                log.info("slack.stream_unavailable", team=target.workspace_id, reason=str(exc))
            else:
                self._modes[card_key(target)] = "native"
                if not snapshot.final:
                    self._controls.open(target, prompts=snapshot.approvals)
                return handle
        self._modes[card_key(target)] = "edit"
        if channel_paid:
            return await self._edit.post(target, snapshot)
        return await on_own_budget(self._pacer, self._buckets.post_bucket(target), target,
                                   lambda: self._edit.post(target, snapshot))

    def _may_start(self, target: CardTarget) -> bool:
        """Whether a stream can start now when the sink pays its workspace's ``chat.startStream`` window itself: the
        channel slot is taken, and an edited message uses it at once instead of holding it while the window slides."""
        if not self._config.stream_starts_per_channel or self._pacer is None:
            return True
        return self._spare(self._buckets.start_bucket(target)) >= 1

    async def _post_finished(self, target: CardTarget, snapshot: CardSnapshot, *, paid: bool) -> CardHandle:
        """The answer is complete by its slot: one finished message, no placeholder first (``paid``: the streamer
        drew the channel's slot for it; else the pacer draws it)."""
        if paid:
            posted = await self._edit.post(target, snapshot)
        else:
            posted = await on_own_budget(self._pacer, self._buckets.post_bucket(target), target,
                                         lambda: self._edit.post(target, snapshot))
        self._modes[card_key(target)] = "done"
        return CardHandle(card_id=posted.card_id, target=target,
                          data={**posted.data, "mode": "done", "shown": self._edit.shown(target, snapshot)})

    async def _finish_posted(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """A message that went out finished is edited only when the final shows something else by now (a picture's
        line); ``chat.update`` is then paid by the pacer, the streamer having drawn nothing for it."""
        shown = self._edit.shown(handle.target, snapshot)
        if handle.data.get("shown") != shown:
            edited = as_edit(handle)
            await on_own_budget(self._pacer, self._buckets.update_bucket(handle.target), handle.target,
                                lambda: self._edit.edit(edited, snapshot))
            handle = CardHandle(card_id=edited.card_id, target=handle.target,
                                data={**edited.data, "mode": "done", "shown": shown})
        if not snapshot.continued:  # the answer's last part: an earlier part's stream may have left a Stop control
            await self._controls.close(handle.target)
        return handle

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show ``snapshot``: append the new part to the stream, or edit the message (nothing for a deferred answer)."""
        if handle.data.get("mode") in ("deferred", "done"):
            return handle
        if handle.data.get("mode") is None and self._taken_over.pop(card_key(handle.target), False):
            # The message a dead process left: deleted once the answer is posted (see take_over).
            return CardHandle(card_id=handle.card_id, target=handle.target,
                              data={"mode": "deferred", LEFT: str(handle.data.get("channel") or handle.target.chat_id)})
        stream = self._native.of(handle)
        if stream is not None:
            try:
                await self._native.append(stream, handle.target, snapshot)
                self._controls.show(handle.target, snapshot.approvals)  # a stream cannot carry buttons
                return handle
            except StreamBroken as exc:
                return await self._to_edit(handle, snapshot, str(exc))
        self._edit.check_size(snapshot)
        handle = self._edit.handle_of(handle)
        await self._edit.edit(handle, snapshot)
        return handle

    async def _delete_left(self, handle: CardHandle) -> None:
        """Delete the message a dead process left (a taken-over card's) now that its answer is posted below it; its
        own ``chat.delete``, paid here. Gone already is as good."""
        channel = str(handle.data.get(LEFT) or "")
        if not channel:
            return
        try:
            await on_own_budget(self._pacer, self._buckets.delete_bucket(handle.target), handle.target,
                                lambda: call_slack(self._client.chat_delete, channel=channel, ts=handle.card_id))
        except CardGone:
            pass

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` and end the stream; the Stop button goes away.

        A recovered Stop control (a process that is gone left it) is taken away instead.
        """
        if is_control(handle.target):
            await self._controls.take_away_left(handle)
            return handle
        if handle.data.get("mode") == "deferred":
            await self._edit.post_plain(handle.target, snapshot)  # the answer, complete, in one go
            await self._delete_left(handle)
            return handle
        if handle.data.get("mode") == "done":
            return await self._finish_posted(handle, snapshot)
        stream = self._native.of(handle)
        if stream is not None:
            try:
                await self._native.stop(stream, handle.target, snapshot)
                self._native.forget(handle)
            except StreamBroken as exc:
                return await self._to_edit(handle, snapshot, str(exc))
            if not snapshot.continued:  # a continued part: the next part of the same answer keeps the control
                await self._controls.close(handle.target)
            return handle
        if handle.data.get("mode") is None:
            # Recovered after a restart: we do not know how the message was made; a stream must be stopped.
            note, _ = stream_closing(snapshot, allowed_mentions(handle.target))
            if await self._native.stop_quietly(handle.target.chat_id, handle.card_id, markdown_text=note or None):
                return handle
        self._edit.check_size(snapshot)
        handle = self._edit.handle_of(handle)
        await self._edit.edit(handle, snapshot)
        if not snapshot.continued:
            await self._controls.close(handle.target)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Post ``snapshot`` as new thread message(s), split when long: the answer is never lost."""
        await self._edit.post_plain(target, snapshot)
        if not snapshot.continued:
            await self._controls.close(target)

    async def private_note(self, target: CardTarget, user_id: str, text: str) -> bool:
        """An ephemeral message to ``user_id`` in ``target``'s channel and thread (only they see it)."""
        return await post_ephemeral(self._client, channel=target.chat_id, user=user_id, text=text,
                                    thread_ts=target.thread_id or None)

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """Upload ``artifact`` as a file right under the answer; the card itself shows nothing for it."""
        await self._uploads.upload(target, artifact, handle)
        return ArtifactPlacement()

    async def aclose(self) -> None:
        """Take away Stop controls of cards that never ended and wait for control calls still running."""
        await self._controls.aclose()

    async def _to_edit(self, handle: CardHandle, snapshot: CardSnapshot, reason: str) -> CardHandle:
        """A stream failed: close it if we can and keep the message up to date by editing it from now on."""
        log.info("slack.stream_fallback", team=handle.target.workspace_id, reason=reason)
        stream = self._native.forget(handle)
        channel = stream.channel if stream else str(handle.data.get("channel") or handle.target.chat_id)
        ts = stream.ts if stream else str(handle.data.get("ts") or handle.card_id)
        self._modes[card_key(handle.target)] = "edit"
        await self._native.stop_quietly(channel, ts)
        await self._controls.close(handle.target)  # the edited message carries its own Stop button
        edited = CardHandle(card_id=handle.card_id, target=handle.target, data={"mode": "edit", "channel": channel, "ts": ts})
        self._edit.converted(handle, edited)
        await self._edit.edit(edited, snapshot)
        return edited
