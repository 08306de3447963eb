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

Each answer's mode (native, edit, or *deferred*: one message once the answer
is complete) is planned from the budgets when it starts, and
:meth:`SlackCardSink.rate_key` names the bucket of the call the streamer is
about to pay for (:mod:`adapters.slack.planner`). When the sink ends up making a
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
from typing import TYPE_CHECKING

import structlog

from adapters.slack.channel_line import ChannelLines, Place
from adapters.slack.control import StopControls, is_control
from adapters.slack.edit import EditMessages, post_ephemeral
from adapters.slack.errors import call_slack
from adapters.slack.handles import as_edit
from adapters.slack.inert import allowed_mentions
from adapters.slack.limits import Bucket, SlackBuckets, on_own_budget
from adapters.slack.native import NativeStreams, StreamBroken
from adapters.slack.planner import AnswerPlanner, Mode
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
        self._planner = AnswerPlanner(config, self._buckets, pacer, self._native.available)

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
        """The bucket of the call ``op`` makes next for ``target`` (:meth:`AnswerPlanner.rate_key
        <adapters.slack.planner.AnswerPlanner.rate_key>`)."""
        return self._planner.rate_key(op, target)

    def plan(self, target: CardTarget) -> Mode:
        """The mode a new answer starts in, from the budgets as they are now (:mod:`adapters.slack.planner`)."""
        return self._planner.plan(target)

    def take_over(self, target: CardTarget) -> None:
        """``target``'s card is a message another process made (a resumed turn's): the answer comes complete, in a
        new message on the channel's budget, and the message left behind is deleted then
        (:meth:`AnswerPlanner.take_over <adapters.slack.planner.AnswerPlanner.take_over>`)."""
        self._planner.take_over(target)

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The call planned for ``op`` cannot be had soon: the answer takes the next strategy down
        (:meth:`AnswerPlanner.replan <adapters.slack.planner.AnswerPlanner.replan>`)."""
        return self._planner.replan(op, target)

    # --- CardSink -----------------------------------------------------------------

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """The card's first message, made in its slot: the finished answer when it is complete by then, else a native
        stream (when possible) or the placeholder message; a deferred answer makes no call."""
        self._lines.made(target)  # its slot is granted: the next answer of the channel moves up
        planned = self._planner.create_mode(target)
        # A card with a preamble (an alert's) lives on and is edited later: it needs its message now.
        if planned == "deferred" and not snapshot.final and not snapshot.preamble:
            return CardHandle(card_id=f"deferred-{target.turn_id}-{snapshot.part}", target=target, data={"mode": "deferred"})
        per_channel = self._config.stream_starts_per_channel
        channel_paid = planned in ("edit", "done") or (planned == "native" and per_channel)
        if snapshot.final and not snapshot.preamble:
            return await self._post_finished(target, snapshot, paid=channel_paid)
        if (planned == "native" and self._planner.initial_mode(target, snapshot) == "native"
                and self._planner.may_start(target)):
            try:
                handle = await self._native.start(target, snapshot, paid=not per_channel)
            except StreamBroken as exc:
                log.info("slack.stream_unavailable", team=target.workspace_id, reason=str(exc))
            else:
                self._planner.became(target, "native")
                if not snapshot.final:
                    self._controls.open(target, prompts=snapshot.approvals)
                return handle
        self._planner.became(target, "edit")
        if channel_paid:
            return await self._edit.post(target, snapshot)
        return await on_own_budget(self._pacer, self._buckets.post_bucket(target), target,
                                   lambda: self._edit.post(target, snapshot))

    async def _post_finished(self, target: CardTarget, snapshot: CardSnapshot, *, paid: bool) -> CardHandle:
        """The answer is complete by its slot: one finished message, no placeholder first (``paid``: the streamer
        drew the channel's slot for it; else the pacer draws it)."""
        if paid:
            posted = await self._edit.post(target, snapshot)
        else:
            posted = await on_own_budget(self._pacer, self._buckets.post_bucket(target), target,
                                         lambda: self._edit.post(target, snapshot))
        self._planner.became(target, "done")
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
        if handle.data.get("mode") is None and self._planner.left_behind(handle.target):
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
        self._planner.became(handle.target, "edit")
        await self._native.stop_quietly(channel, ts)
        await self._controls.close(handle.target)  # the edited message carries its own Stop button
        edited = CardHandle(card_id=handle.card_id, target=handle.target, data={"mode": "edit", "channel": channel, "ts": ts})
        self._edit.converted(handle, edited)
        await self._edit.edit(edited, snapshot)
        return edited
