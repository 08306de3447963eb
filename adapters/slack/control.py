"""The control of a native stream: a small message below the stream with its Stop and approval buttons.

A streaming message cannot carry blocks until ``chat.stopStream``, so a native
stream gets its Stop button from a *control* message posted below it in the
thread (a "working" note and the same Stop button as edit mode). It is posted
in the background once the channel's ``chat.postMessage`` budget allows (an
answer that ends first never gets one) and deleted with ``chat.delete`` when
the answer ends, is stopped, fails, falls back or turns into an edit-mode
message (which carries its own button). When it cannot be posted the answer
still streams; "stop" typed in the thread still works. The delete is planned
like a card's final: the control reserves one ``chat.delete`` of the
workspace when it is opened, and the delete is a priority call that uses it,
so live updates can never spend it and the control goes as soon as its answer
ends; the reservation is given back once the control is gone (deleted, taken
away another way, failed for good, or never posted). A control waits until no
answer of its channel waits for its first message (:mod:`adapters.slack.channel_line`):
it never takes the slot of a queued answer.

A call waiting for an approval shows on the control too (:meth:`StopControls.show`):
what would run, with Approve and Deny buttons, edited away once decided. A
stream that has no Stop button (``stop_button: false``) gets a control for its
approvals alone.

Every control call goes through the :class:`~botgateway.sink.CallPacer`, tried
up to :data:`CONTROL_ATTEMPTS` times when Slack throttles it.

A posted control is on record in the Store like a card (same owner, its target
marked by :data:`CONTROL_MARK`) until it is taken away, so when the process is
killed, recovery finalizes it through the sink (:meth:`StopControls.take_away_left`)
instead of leaving a Stop button in the thread forever.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from cachetools import LRUCache

from adapters.slack.errors import call_slack
from adapters.slack.handles import CardKey, card_key
from adapters.slack.inert import allowed_mentions
from adapters.slack.limits import SlackBuckets, paced, release, reserve
from adapters.slack.render import control_blocks, control_done_blocks
from botgateway.background import BackgroundTasks
from botgateway.cards.records import OpenCardRecords
from botgateway.sink import CallPacer, CardGone, CardHandle, CardTarget, PermanentError, SinkError
from botgateway.snapshot import ApprovalPrompt
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.stores.base import OpenCardStore

__all__ = ["CONTROL_ATTEMPTS", "CONTROL_MARK", "CONTROL_WAIT_S", "Control", "StopControls", "is_control"]

log = structlog.get_logger(__name__)

CONTROL_WAIT_S = 5.0
"""How long ending a card waits for its Stop control to go away before carrying on (it still goes, in the background)."""

CONTROL_ATTEMPTS = 3
"""Tries per control call when Slack throttles it."""

_MAX_CARDS = 10_000
"""Controls kept at most; the oldest (cards that were never finalized) are retired."""

CONTROL_MARK = "slack_control"
"""Key in the ``extra`` of a control's recorded target: this record is a Stop control, not an answer."""


def is_control(target: CardTarget) -> bool:
    """Whether ``target`` is the recorded target of a Stop control (recovered after a restart)."""
    return bool(target.extra.get(CONTROL_MARK))


class Control:
    """The Stop control message of one native stream (mutable; owned by :class:`StopControls`)."""

    def __init__(self, *, channel: str, thread_ts: str, target: CardTarget) -> None:
        self.channel = channel
        """The channel of the control (Slack's answer may name it differently)."""
        self.thread_ts = thread_ts
        """The thread the control is posted in."""
        self.target = target
        """The card the control stops (its turn id is the button's value)."""
        self.ts = ""
        """The control message once posted."""
        self.task: asyncio.Task[Any] | None = None
        """The background post."""
        self.posting = False
        """True while ``chat.postMessage`` is in flight (it cannot be taken back, only deleted after)."""
        self.ending = False
        """The card ended: do not post; delete what was posted."""
        self.record: OpenCardRecords | None = None
        """The control's record in the Store while it is posted (None: not kept)."""
        self.prompts: tuple[ApprovalPrompt, ...] = ()
        """Approvals the control shows now (its buttons)."""
        self.stop = True
        """Whether the control carries the Stop button."""
        self.edit: asyncio.Task[Any] | None = None
        """The edit showing the current approvals, while one runs (one at a time)."""

    def blocks(self) -> list[dict[str, Any]]:
        """What the control shows now."""
        target = self.target
        return control_blocks(target.turn_id if self.stop else "", target.locale, self.prompts, allowed_mentions(target))

    def handle(self) -> CardHandle:
        """The posted control as a recorded card: its ts, in its channel, its target marked as a control."""
        extra = {**self.target.extra, CONTROL_MARK: True}
        return CardHandle(card_id=self.ts, target=dataclasses.replace(self.target, chat_id=self.channel, extra=extra))


class _Controls(LRUCache[CardKey, Control]):
    """Controls per card; one evicted to make room is retired, not just forgotten."""

    def __init__(self, maxsize: int, retire: Callable[[Control], object]) -> None:
        super().__init__(maxsize)
        self._retire = retire

    def popitem(self) -> tuple[CardKey, Control]:
        key, control = super().popitem()
        self._retire(control)
        return key, control


class StopControls:
    """Posts and retires the Stop controls of native streams, one per card (kept across continuation parts)."""

    def __init__(self, client: AsyncWebClient, *, buckets: SlackBuckets, pacer: CallPacer | None,
                 enabled: bool = True, idle: Callable[[CardTarget], Awaitable[None]] | None = None) -> None:
        """``enabled``: False when the config turns Stop buttons off (no control is ever posted); ``idle(target)``
        returns once no answer of ``target``'s channel waits for its first message (None: controls never wait)."""
        self._client = client
        self._idle = idle
        self._enabled = enabled
        self._buckets = buckets
        self._pacer = pacer
        self._tasks = BackgroundTasks()
        self._controls = _Controls(_MAX_CARDS, self._retire_later)
        self._store: OpenCardStore | None = None
        self._owner = ""

    def keep_on_record(self, store: OpenCardStore, instance_id: str) -> None:
        """Record every control posted from now on in ``store``, owned by the process ``instance_id`` (as its cards)."""
        self._store = store
        self._owner = instance_id

    async def take_away_left(self, handle: CardHandle) -> None:
        """Take away a control a process that is gone left behind (``handle`` rebuilt from its record).

        Deleted, or when Slack will not, turned into a note without its button.
        Sink errors are raised: the caller (recovery) paid for the delete and
        retries a throttle.
        """
        target = handle.target
        try:
            await call_slack(self._client.chat_delete, channel=target.chat_id, ts=handle.card_id)
            return
        except CardGone:
            return  # someone deleted it already
        except PermanentError as exc:
            log.info("slack.stop_control_delete_failed", turn_id=target.turn_id, error=str(exc))
        await paced(self._pacer, self._buckets.update_bucket(target),
                    lambda: call_slack(self._client.chat_update, channel=target.chat_id, ts=handle.card_id,
                                       text=t(target.locale, "control_done"), blocks=control_done_blocks(target.locale)),
                    owner=_owner(target), attempts=CONTROL_ATTEMPTS)

    def open(self, target: CardTarget, *, prompts: tuple[ApprovalPrompt, ...] = ()) -> None:
        """Post the control for ``target``'s stream in the background (once per card).

        Without Stop buttons (config) a control is posted only to carry approvals (``prompts``).
        """
        key = card_key(target)
        if (not self._enabled and not prompts) or not target.turn_id or not target.thread_id or key in self._controls:
            return
        control = Control(channel=target.chat_id, thread_ts=target.thread_id, target=target)
        control.prompts, control.stop = prompts, self._enabled
        self._controls[key] = control
        reserve(self._pacer, self._buckets.delete_bucket(target), _owner(target))
        control.task = self._tasks.spawn(self._post(control), name=f"slack-control:{target.turn_id}")

    def show(self, target: CardTarget, prompts: tuple[ApprovalPrompt, ...]) -> None:
        """Show the approvals waiting now on the stream's control (posted for them if need be), in the background."""
        control = self._controls.get(card_key(target))
        if control is None:
            if prompts:
                self.open(target, prompts=prompts)
            return
        if control.prompts == prompts or control.ending:
            return
        control.prompts = prompts
        # Not posted yet: the post shows the prompts of its moment, and edits after if they changed.
        if control.ts and (control.edit is None or control.edit.done()):
            control.edit = self._tasks.spawn(self._edit(control), name=f"slack-control-edit:{target.turn_id}")

    async def _edit(self, control: Control) -> None:
        """Edit the posted control until it shows its current approvals (a decision takes the buttons away)."""
        target = control.target
        shown: tuple[ApprovalPrompt, ...] | None = None

        async def edit() -> Any:
            nonlocal shown
            if control.ending:
                return None
            shown = control.prompts
            return await call_slack(self._client.chat_update, channel=control.channel, ts=control.ts,
                                    text=t(target.locale, "control_working"), blocks=control.blocks())

        while not control.ending and shown != control.prompts:
            try:
                await paced(self._pacer, self._buckets.update_bucket(target), edit, owner=_owner(target),
                            attempts=CONTROL_ATTEMPTS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # "approve 4821" typed in the thread still works: the tool line names the code
                log.warning("slack.control_edit_failed", turn_id=target.turn_id, error=str(exc) or type(exc).__name__)
                return

    async def close(self, target: CardTarget) -> None:
        """Take the card's Stop control away; waits a little for it, never raises."""
        control = self._controls.pop(card_key(target), None)
        if control is None:
            return
        task = self._retire_later(control)
        if task is not None:
            # asyncio.wait never cancels the task: if this call is cancelled or times out, the control still goes.
            await asyncio.wait({task}, timeout=CONTROL_WAIT_S)

    async def aclose(self) -> None:
        """Take away the controls of cards that never ended; wait a little for control calls, then cancel them."""
        for key in list(self._controls):
            self._retire_later(self._controls.pop(key))
        await self._tasks.wait(timeout=CONTROL_WAIT_S)
        await self._tasks.aclose()

    def _retire_later(self, control: Control) -> asyncio.Task[Any] | None:
        control.ending = True
        return self._tasks.spawn(self._retire(control), name=f"slack-control-retire:{control.target.turn_id}")

    async def _retire(self, control: Control) -> None:
        try:
            post = control.task
            if post is not None and not post.done():
                if not control.posting and not control.ts:
                    post.cancel()  # still waiting for a post token: the control is simply never posted
                # A post in flight (or just landed) deletes its own message: it sees ``ending``.
                await asyncio.wait({post})
                return
            if control.edit is not None and not control.edit.done():
                # An edit landing after the delete's fallback would bring buttons back.
                await asyncio.wait({control.edit})
            if control.ts:
                await self._delete(control)
        finally:
            self._release(control)

    def _release(self, control: Control) -> None:
        """The control needs no delete any more: give back the one reserved for it."""
        release(self._pacer, self._buckets.delete_bucket(control.target), _owner(control.target))

    async def _post(self, control: Control) -> None:
        target = control.target
        posted: list[tuple[ApprovalPrompt, ...]] = []  # the approvals the post showed

        async def post() -> Any:
            if control.ending:
                return None  # the answer ended while we waited for the budget: no call at all
            control.posting = True
            posted.append(control.prompts)
            try:
                return await call_slack(
                    self._client.chat_postMessage,
                    channel=control.channel,
                    thread_ts=control.thread_ts,
                    text=t(target.locale, "control_working"),
                    blocks=control.blocks(),
                    unfurl_links=False,
                    unfurl_media=False,
                )
            finally:
                control.posting = False

        try:
            if self._idle is not None:
                await self._idle(target)  # the answers waiting in the channel's line go first
            response = await paced(self._pacer, self._buckets.post_bucket(target), post,
                                   owner=_owner(target), attempts=CONTROL_ATTEMPTS)
            if response is None:
                return
            control.ts = str(response.get("ts") or "")
            control.channel = str(response.get("channel") or control.channel)
            log.debug("slack.stop_control_posted", turn_id=target.turn_id, ts=control.ts)
            await self._remember(control)
            if not control.ending and posted and posted[-1] != control.prompts:
                # Approvals changed while the post was on its way; as control.edit, show() waits its turn.
                control.edit = self._tasks.spawn(self._edit(control), name=f"slack-control-edit:{target.turn_id}")
                if control.edit is not None:  # None: the adapter is closing, and spawns nothing more
                    await asyncio.wait({control.edit})
            if control.ending:
                await self._delete(control)
        except asyncio.CancelledError:
            raise
        except SinkError as error:
            self._release(control)  # never posted: nothing to delete
            log.warning("slack.stop_control_failed", turn_id=target.turn_id, channel=control.channel,
                        error=str(error), note="the answer streams without a Stop button; 'stop' in the thread still works")
        except Exception:
            log.exception("slack.stop_control_crashed", turn_id=target.turn_id)

    async def _remember(self, control: Control) -> None:
        """Put the posted control on record, so a process killed now still has it taken away."""
        if self._store is None or not control.ts:
            return
        control.record = OpenCardRecords(self._store, control.target, instance_id=self._owner)
        await control.record.remember(control.handle())

    async def _delete(self, control: Control) -> None:
        """Delete the control message (if Slack will not, at least take its button away); then forget its record."""
        try:
            await self._take_away(control)
        finally:
            if control.record is not None:
                # Shielded: a shutdown cancelling this must not leave a record that recovery would redo.
                await asyncio.shield(control.record.forget(control.handle()))

    async def _take_away(self, control: Control) -> None:
        target = control.target
        try:
            await paced(self._pacer, self._buckets.delete_bucket(target),
                        lambda: call_slack(self._client.chat_delete, channel=control.channel, ts=control.ts),
                        owner=_owner(target), attempts=CONTROL_ATTEMPTS, reserved=True)
            log.debug("slack.stop_control_deleted", turn_id=target.turn_id, ts=control.ts)
            return
        except CardGone:
            return  # someone deleted it already
        except Exception as exc:
            log.info("slack.stop_control_delete_failed", turn_id=target.turn_id, error=str(exc) or type(exc).__name__)
        try:
            await paced(self._pacer, self._buckets.update_bucket(target),
                        lambda: call_slack(self._client.chat_update, channel=control.channel, ts=control.ts,
                                           text=t(target.locale, "control_done"), blocks=control_done_blocks(target.locale)),
                        owner=_owner(target), attempts=CONTROL_ATTEMPTS)
        except Exception as exc:  # a stale button only earns its presser an "already finished" note
            log.warning("slack.stop_control_left", turn_id=target.turn_id, error=str(exc) or type(exc).__name__)


def _owner(target: CardTarget) -> str:
    """The control's name in the budget's round-robin (apart from its card's own calls)."""
    return f"slack-control:{target.turn_id}"
