"""When the card is updated: buffer policy, one update in flight, latest wins.

:class:`CardStreamer` sits between the turn's events and a
:class:`~botgateway.sink.CardSink`. It decides *when* the card changes, never
*what* it says (that is :class:`~botgateway.cards.state.CardState`):

- pending text is flushed per :class:`~botgateway.cards.buffer_policy.BufferPolicy`
  of the current phase, by a timer too, so a stalled stream still shows what it has;
- one update is in flight per card; while it is, only the newest snapshot is
  kept (latest wins) — the next update simply carries everything;
- every call goes through the card's :class:`~botgateway.cards.caller.CardCaller`
  (shared budget, throttle pauses, retries);
- each live update, and what its outcome means for the next, is a
  :class:`~botgateway.cards.live_updates.LiveUpdater`'s; a long answer continues in a
  new card (:class:`~botgateway.cards.parts.PartCursor`);
- where a channel takes its new messages in line (:class:`~botgateway.sink.ChannelLines`), the card lines up when
  it starts and is created when its turn comes, with what it shows by then (finished, when the answer is);
- the final answer is delivered by :class:`~botgateway.cards.delivery.FinalDelivery`,
  which never loses it, and a card left behind by a fallback is closed in the
  background (:class:`~botgateway.cards.late_close.LateCloser`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.caller import LIVE_BACKOFF, CardCaller
from botgateway.cards.delivery import FinalDelivery
from botgateway.cards.late_close import LateCloser
from botgateway.cards.live import LiveCard
from botgateway.cards.live_updates import LiveUpdater
from botgateway.cards.metrics import CardMetrics
from botgateway.cards.pacing import Pacing
from botgateway.cards.parts import PartCursor
from botgateway.cards.records import OpenCardRecords
from botgateway.cards.shipping import SETTLE_S, PictureShipper
from botgateway.cards.state import CardState
from botgateway.events import (
    AnswerDelta,
    ApprovalDecided,
    ApprovalRequested,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
)
from botgateway.sink import CardHandle, CardSink, CardTarget, ChannelLines, Replanning
from botgateway.snapshot import CardSnapshot, Narration
from botgateway.stores.base import OpenCardStore

__all__ = ["CardStreamer", "StreamerTiming"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class StreamerTiming:
    """How long a card's calls may take and how they are retried."""

    final_deadline_s: float = 30.0
    """The final answer is retried on the card this long, then sent as a fallback message."""
    start_timeout_s: float = 3.0
    """:meth:`CardStreamer.start` waits this long for the card to exist; creation goes on in the background."""
    backoff: Backoff = LIVE_BACKOFF
    """Retry pacing after transient errors and throttles without a Retry-After."""
    late_close_s: float = 300.0
    """After a fallback delivery, how long the card keeps being closed in the background (0: never)."""
    late_backoff: Backoff = Backoff(base_s=2.0, max_s=60.0)
    """Pacing of those background closing attempts."""
    picture_settle_s: float = SETTLE_S
    """How long the final waits for the turn's pictures still being delivered; then they are given up, in a line."""


def _visible(snapshot: CardSnapshot) -> bool:
    return bool(
        snapshot.answer.strip()
        or snapshot.thought
        or any(isinstance(b, Narration) and b.text.strip() for b in snapshot.blocks)
    )


class CardStreamer:
    """Streams one turn's card (and its continuation parts) to a sink.

    Use: ``await start()`` (creates the card), ``await feed(event)`` for every
    turn event (never blocks on the network), ``await finish()`` (delivers the
    final snapshot, returns :class:`CardMetrics`). ``finish`` is idempotent and
    safe after the turn was cancelled; cancelling ``finish`` itself does not
    stop the final delivery.

    When the final answer had to go out through the fallback, ``finish``
    returns once it did, and the card itself is closed in a background task
    (tracked by ``background`` when given): :meth:`wait_closed` waits for it,
    :meth:`aclose` (shutdown) cancels it.

    With a ``store``, the card is on record as open (owned by ``instance_id``,
    the gateway process) until it is final, so recovery can close it after a crash.
    """

    def __init__(
        self,
        sink: CardSink,
        target: CardTarget,
        *,
        policy: BufferPolicy,
        budget: RateBudget | None,
        state: CardState,
        timing: StreamerTiming = StreamerTiming(),
        store: OpenCardStore | None = None,
        background: BackgroundTasks | None = None,
        instance_id: str = "",
    ) -> None:
        """``budget`` None calls the sink unpaced (benchmark baseline only)."""
        self.target = target
        self.policy = policy
        self.state = state
        self.timing = timing
        self.metrics = CardMetrics()
        """Filled in as the turn runs; also returned by :meth:`finish`."""
        owner = f"{target.platform}:{target.chat_id}:{target.turn_id}:{id(self):x}"
        self._caller = CardCaller(
            budget, lambda op: sink.rate_key(op, target), owner=owner, platform=target.platform, metrics=self.metrics,
            backoff=timing.backoff, call_timeout_s=timing.final_deadline_s,
            replan=(lambda op: sink.replan(op, target)) if isinstance(sink, Replanning) else None,
        )
        records = OpenCardRecords(store, target, instance_id=instance_id)
        self._records = records
        self._cursor = PartCursor(state, sink.max_chars)
        self._card = LiveCard(sink, target, self._caller, records, on_visible=self._live_visible)
        self._sink = sink
        self._late = LateCloser(
            sink, target, self._caller, records,
            late_close_s=timing.late_close_s, backoff=timing.late_backoff,
            final_deadline_s=timing.final_deadline_s, background=background, owner=owner,
            on_visible=self._note_visible,
        )
        self._delivery = FinalDelivery(
            sink, target, card=self._card, cursor=self._cursor, caller=self._caller, records=records,
            late=self._late, final_deadline_s=timing.final_deadline_s, on_visible=self._note_visible,
        )
        self._owner = owner
        self._created = asyncio.Event()
        self._pictures = PictureShipper(sink, target, state, created=self._created, handle=lambda: self._card.handle,
                                        on_change=self._picture_changed)
        self._wake = asyncio.Event()
        self._pacing = Pacing(policy, state.phase, on_due=self._wake.set, metrics=self.metrics)
        self._finishing = asyncio.Event()
        self._updater = LiveUpdater(
            state, card=self._card, cursor=self._cursor, caller=self._caller, pacing=self._pacing,
            delivery=self._delivery, final_deadline_s=timing.final_deadline_s, finishing=self._finishing,
            wake=self._wake.set, platform=target.platform,
        )
        self._worker: asyncio.Task[None] | None = None
        self._first_token_at: float | None = None
        self._hurried = False  # the first text went without yielding to the feeders first
        self._finish_called_at: float | None = None

    # --- public API -------------------------------------------------------

    @property
    def handle(self) -> CardHandle | None:
        """The card currently streamed (the latest part), once created."""
        return self._card.handle

    async def start(self, *, wait: bool = True) -> None:
        """Create the card showing the current state; returns once it exists (and is on record), creation gave up,
        or ``start_timeout_s`` passed (a throttled platform must not hold up the turn).
        With ``wait`` False it returns at once: the turn's model request goes out while the card is created.

        Creation keeps being retried in the background; events fed meanwhile are
        shown once the card exists (the first call shows the latest state). When it
        cannot be created the turn still runs: the final answer is created (or sent
        through the fallback) at :meth:`finish`.
        """
        if self._worker is not None:
            return
        self._worker = self._spawn()
        if not wait:
            return
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (a user's
            # stop) that arrives just as the card is created.
            async with asyncio.timeout(self.timing.start_timeout_s):
                await self._created.wait()
                await self._records.settled()
        except TimeoutError:
            log.info("card.create_slow", platform=self.target.platform, waited_s=self.timing.start_timeout_s)

    async def feed(self, event: TurnEvent) -> None:
        """Fold ``event`` into the state and schedule an update per the buffer policy."""
        if self._finishing.is_set():
            return
        self.metrics.events += 1
        changed = self.state.apply(event)
        now = time.monotonic()
        if self._first_token_at is None and isinstance(event, (AnswerDelta, ThoughtDelta)) and event.text:
            self._first_token_at = now
        if isinstance(event, (ToolCallStarted, ToolCallFinished, ApprovalRequested, ApprovalDecided)):
            # A status line (or an approval's buttons) is a change worth showing now, however short.
            changed = max(changed, self.policy.tool.min_chars)
        self._pacing.add(changed, now)
        self._pacing.phase(self.state.phase)
        if isinstance(event, ToolCallFinished) and event.artifacts:
            self._pictures.ship_new()

    async def refresh(self) -> None:
        """Push the current state now (the queue position changed, the turn left the queue)."""
        self._picture_changed()

    def nudge(self) -> None:
        """:meth:`refresh` for a caller that cannot wait (a callback): the update goes as the card's pacing allows."""
        self._picture_changed()

    def _picture_changed(self) -> None:
        if self._finishing.is_set():
            return  # the final, still to come, carries it
        self._pacing.add(1, time.monotonic())
        self._pacing.flush()

    async def finish(self) -> CardMetrics:
        """Deliver the final snapshot (retried until the deadline, then the fallback) and return the metrics.

        Marks the card failed if the state is not final yet (the turn ended
        without TurnDone/TurnFailed). Safe to call twice and after cancellation.
        """
        if self._finish_called_at is None:
            self._finish_called_at = time.monotonic()
        self._finishing.set()
        self._wake.set()
        self._pacing.stop()
        if self._worker is None:
            self._worker = self._spawn()
        # Shielded: a cancelled caller must not abort the delivery of the final answer.
        await asyncio.shield(self._worker)
        return self.metrics

    @property
    def closing(self) -> bool:
        """True while a card of this turn is being closed in the background (after a fallback delivery)."""
        return self._late.closing

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait for the background closing of cards whose answer went out as a fallback.

        True when every such card ended final (or there was none); False when
        closing gave up, was cancelled, or ``timeout`` passed first.
        """
        return await self._late.wait_closed(timeout)

    async def aclose(self) -> None:
        """Cancel whatever this streamer still runs (final delivery, background closing) and wait for it.

        For shutdown, after :meth:`finish`. A card not final by then keeps its
        open-card record in the Store, so start-up recovery closes it.
        """
        await self._pictures.aclose()
        self._card.leave_line()  # a worker cancelled before its first step never gives its place up itself
        tasks = [t for t in (self._worker, *self._late.running()) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # Not cancelled: a card still open must be on record, for start-up recovery.
        await self._records.settled()

    # --- the worker: all sink calls of this card happen here, one at a time ---

    def _spawn(self) -> asyncio.Task[None]:
        """Line the card up in its channel (in the order the turns start), then start the worker."""
        if isinstance(self._sink, ChannelLines):
            self._card.place = self._sink.line_up(self.target)
        return asyncio.create_task(self._run(), name=f"card-streamer:{self._owner}")

    async def _run(self) -> None:
        try:
            await self._run_card()
        finally:
            self._card.leave_line()  # whatever happened, the card holds up its channel's line no more

    async def _run_card(self) -> None:
        try:
            if self.policy.live and not self._finishing.is_set():
                await self._updater.create_first()
        except Exception:
            log.exception("card.create_crashed", platform=self.target.platform)
        finally:
            self._created.set()
        try:
            while not self._finishing.is_set():
                await self._wake.wait()
                self._wake.clear()
                if self._finishing.is_set():
                    break  # the final goes out now: nothing is gained by letting the feeders run first
                if self._first_text_waits():
                    self._hurried = True  # once: a path that does not reach the network still yields next time
                else:
                    await asyncio.sleep(0)  # let feeders run between updates, whatever the path taken
                    if self._finishing.is_set():
                        break
                if self._pacing.due and self.policy.live and not self._card.gone:
                    await self._updater.send()
                    self._pacing.evaluate()
                elif self._pacing.due:
                    # No live card (gone, or live updates off): the final delivers it all.
                    self._pacing.clear()
        except Exception:
            log.exception("card.live_crashed", platform=self.target.platform)
        self._pacing.stop()
        try:
            await self._pictures.settle(self.timing.picture_settle_s)  # bounded: a picture never holds the answer for long
        except Exception:
            log.exception("card.pictures_crashed", platform=self.target.platform)
        try:
            await self._delivery.deliver(self.state, started=self._finish_called_at or time.monotonic())
        finally:
            if not self._late.closing:
                self._caller.release()  # whatever the final did, the card needs no more of the budget
            # else the card is closed in the background, on the call it reserved: the closer releases it

    def _first_text_waits(self) -> bool:
        """The first text is pending and the card shows none yet: it goes at once, not an event-loop turn later
        (a busy loop's turn is what a reader waits for), and it is never hurried twice."""
        return (
            not self._hurried
            and self._first_token_at is not None
            and self.metrics.first_token_to_visible_s is None
        )

    def _live_visible(self, snapshot: CardSnapshot) -> None:
        """The live card of the current part shows ``snapshot``: the part is never cut before it any more."""
        self._cursor.showed(snapshot)
        self._note_visible(snapshot)

    def _note_visible(self, snapshot: CardSnapshot) -> None:
        if (
            self.metrics.first_token_to_visible_s is None
            and self._first_token_at is not None
            and _visible(snapshot)
        ):
            self.metrics.first_token_to_visible_s = time.monotonic() - self._first_token_at
