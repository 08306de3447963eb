"""When the card is updated: buffer policy, one update in flight, rate budget, final delivery.

:class:`CardStreamer` sits between the turn's events and a :class:`~adapters.base.CardSink`.
It decides *when* the card changes, never *what* it says (that is
:class:`~botgateway.card.CardState`):

- pending text is flushed per :class:`BufferPolicy` of the current phase, by a
  timer too, so a stalled stream still shows what it has;
- one update is in flight per card; while it is, only the newest snapshot is
  kept (latest wins) — the next update simply carries everything;
- every call draws a token from the shared :class:`~botgateway.budget.RateBudget`;
  a throttle answer pauses the whole bucket and coalesces, transient errors
  are retried with jittered exponential backoff;
- a long answer continues in a new card (part 2, 3…) instead of being cut;
- the final snapshot is retried until ``final_deadline_s``, then delivered
  through ``sink.fallback``. A final answer is never lost;
- a card whose answer went out as a fallback message is still closed, in the
  background (for ``late_close_s``, with backoff, through the same budget):
  it ends final with a short note pointing at the message below, so no card
  keeps spinning. Its open-card record leaves the Store only once it is final;
  if closing never succeeds, start-up recovery closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, fields, replace
from typing import Literal

import structlog

from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards.metrics import CardMetrics
from botgateway.cards.policy import BufferPolicy
from botgateway.cards.split import split_parts, split_point
from botgateway.cards.state import CardState
from botgateway.events import (
    AnswerDelta,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
)
from botgateway.sink import (
    CardGone,
    CardHandle,
    CardOp,
    CardSink,
    CardTarget,
    PermanentError,
    RateLimited,
    TooLong,
    TransientError,
)
from botgateway.snapshot import CardSnapshot, Narration, Phase
from botgateway.stores.base import OpenCard, Store
from botgateway.strings import t

__all__ = ["CardStreamer"]

log = structlog.get_logger(__name__)

MIN_PART_CHARS = 64
"""Continuation parts are never cut smaller than this, even after ``TooLong`` answers."""


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
        final_deadline_s: float = 30.0,
        store: Store | None = None,
        owner: str | None = None,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 5.0,
        start_timeout_s: float = 3.0,
        late_close_s: float = 300.0,
        late_backoff_base_s: float = 2.0,
        late_backoff_max_s: float = 60.0,
        background: BackgroundTasks | None = None,
        instance_id: str = "",
    ) -> None:
        self.sink = sink
        self.target = target
        self.policy = policy
        self.budget = budget
        """Shared token buckets; ``None`` calls the sink unpaced (benchmark baseline only)."""
        self.state = state
        self.final_deadline_s = final_deadline_s
        self.store = store
        self.instance_id = instance_id
        """The gateway process streaming this card, recorded as the open card's owner."""
        self.metrics = CardMetrics()
        """Filled in as the turn runs; also returned by :meth:`finish`."""
        self._owner = owner or f"{target.platform}:{target.chat_id}:{target.turn_id}:{id(self):x}"
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._start_timeout_s = start_timeout_s
        self.late_close_s = late_close_s
        """After a fallback delivery, how long the card keeps being closed in the background (0: never)."""
        self._late_backoff_base_s = late_backoff_base_s
        self._late_backoff_max_s = late_backoff_max_s
        self._background = background
        self._late_tasks: list[asyncio.Task[bool]] = []
        self._throttle_streak = 0
        self._capacity = max(int(sink.max_chars), MIN_PART_CHARS)
        # The card being streamed and what earlier parts already showed.
        self._handle: CardHandle | None = None
        self._part = 1
        self._part_first_block = 0
        self._part_offset = 0
        self._part_epoch = 0
        self._gone = False
        self._vanished = False  # the platform said the card no longer exists (not just "cannot update")
        self._open_ids: list[str] = []
        # Pacing.
        self._phase: Phase = state.phase
        self._pending = 0
        self._first_pending_at: float | None = None
        self._last_update_at = float("-inf")
        self._want_flush = False
        self._timer: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self._finishing = asyncio.Event()
        self._created = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._first_token_at: float | None = None
        self._finish_called_at: float | None = None
        self._live_attempts = 0

    # --- public API -------------------------------------------------------

    @property
    def handle(self) -> CardHandle | None:
        """The card currently streamed (the latest part), once created."""
        return self._handle

    async def start(self) -> None:
        """Create the card showing the current state; returns once it exists, creation gave up,
        or ``start_timeout_s`` passed (a throttled platform must not hold up the turn).

        Creation keeps being retried in the background; events fed meanwhile are
        shown once the card exists. When it cannot be created the turn still
        runs: the final answer is created (or sent through the fallback) at
        :meth:`finish`.
        """
        if self._worker is not None:
            return
        self._worker = asyncio.create_task(self._run(), name=f"card-streamer:{self._owner}")
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (a user's
            # stop) that arrives just as the card is created.
            async with asyncio.timeout(self._start_timeout_s):
                await self._created.wait()
        except TimeoutError:
            log.info("card.create_slow", platform=self.target.platform, waited_s=self._start_timeout_s)

    async def feed(self, event: TurnEvent) -> None:
        """Fold ``event`` into the state and schedule an update per the buffer policy."""
        if self._finishing.is_set():
            return
        self.metrics.events += 1
        changed = self.state.apply(event)
        now = time.monotonic()
        if self._first_token_at is None and isinstance(event, (AnswerDelta, ThoughtDelta)) and event.text:
            self._first_token_at = now
        if isinstance(event, (ToolCallStarted, ToolCallFinished)):
            # A status line is a change worth showing now, however short.
            changed = max(changed, self.policy.tool.min_chars)
        self._add_pending(changed, now)
        if self.state.phase != self._phase:
            self._phase = self.state.phase
            if self._pending > 0:
                self._request_flush()
                return
        self._evaluate()

    async def refresh(self) -> None:
        """Push the current state now (the queue position changed, the turn left the queue)."""
        if self._finishing.is_set():
            return
        self._add_pending(1, time.monotonic())
        self._request_flush()

    async def finish(self) -> CardMetrics:
        """Deliver the final snapshot (retried until the deadline, then the fallback) and return the metrics.

        Marks the card failed if the state is not final yet (the turn ended
        without TurnDone/TurnFailed). Safe to call twice and after cancellation.
        """
        if self._finish_called_at is None:
            self._finish_called_at = time.monotonic()
        self._finishing.set()
        self._wake.set()
        self._cancel_timer()
        if self._worker is None:
            self._worker = asyncio.create_task(self._run(), name=f"card-streamer:{self._owner}")
        # Shielded: a cancelled caller must not abort the delivery of the final answer.
        await asyncio.shield(self._worker)
        return self.metrics

    @property
    def closing(self) -> bool:
        """True while a card of this turn is being closed in the background (after a fallback delivery)."""
        return any(not task.done() for task in self._late_tasks)

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait for the background closing of cards whose answer went out as a fallback.

        True when every such card ended final (or there was none); False when
        closing gave up, was cancelled, or ``timeout`` passed first.
        """
        tasks = list(self._late_tasks)
        if not tasks:
            return True
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            return False
        return all(not task.cancelled() and task.exception() is None and task.result() for task in done)

    async def aclose(self) -> None:
        """Cancel whatever this streamer still runs (final delivery, background closing) and wait for it.

        For shutdown, after :meth:`finish`. A card not final by then keeps its
        open-card record in the Store, so start-up recovery closes it.
        """
        tasks = [t for t in (self._worker, *self._late_tasks) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- pacing -------------------------------------------------------------

    def _add_pending(self, chars: int, now: float) -> None:
        if chars <= 0:
            return
        self._pending += chars
        if self._first_pending_at is None:
            self._first_pending_at = now

    def _evaluate(self) -> None:
        """Flush now if the phase's rule says so, else arm a timer for when it will."""
        if self._pending <= 0 or self._first_pending_at is None:
            return
        if self._want_flush:
            # An update is already due (or in flight): this change rides along with the newest snapshot.
            self.metrics.coalesced += 1
            return
        rule = self.policy.rule(self._phase)
        now = time.monotonic()
        ready_at = self._first_pending_at + rule.max_wait_s
        if self._pending >= rule.min_chars:
            ready_at = min(ready_at, self._last_update_at + rule.min_interval_s)
        if now >= ready_at:
            self._request_flush()
            return
        if self._timer is not None and self._timer.when() <= asyncio.get_running_loop().time() + (ready_at - now) + 0.001:
            return  # the armed timer fires early enough; re-arming on every chunk would only cost CPU
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(ready_at - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._finishing.is_set():
            self._evaluate()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _request_flush(self) -> None:
        self._cancel_timer()
        if self._want_flush:
            self.metrics.coalesced += 1
        self._want_flush = True
        self._wake.set()

    # --- the worker: all sink calls of this card happen here, one at a time ---

    async def _run(self) -> None:
        try:
            if self.policy.live and not self._finishing.is_set():
                await self._create_card(self._view(), deadline=time.monotonic() + self.final_deadline_s, interruptible=True)
        except Exception:
            log.exception("card.create_crashed", platform=self.target.platform)
        finally:
            self._created.set()
        try:
            while not self._finishing.is_set():
                await self._wake.wait()
                self._wake.clear()
                await asyncio.sleep(0)  # let feeders run between updates, whatever the path taken
                if self._finishing.is_set():
                    break
                if self._want_flush and self.policy.live and not self._gone:
                    await self._send_live()
                    self._evaluate()
                elif self._want_flush:
                    # No live card (gone, or live updates off): the final delivers it all.
                    self._want_flush = False
                    self._pending = 0
                    self._first_pending_at = None
        except Exception:
            log.exception("card.live_crashed", platform=self.target.platform)
        self._cancel_timer()
        await self._deliver_final()

    def _part_answer(self) -> str:
        if self.state.answer_epoch == self._part_epoch:
            return self.state.answer[self._part_offset :]
        return self.state.answer

    def _view(self) -> CardSnapshot:
        return self.state.part_snapshot(self._part, self._part_first_block, self._part_offset, self._part_epoch)

    def _advance_part(self, shown_chars: int) -> None:
        """The current part is closed after ``shown_chars`` more answer characters; the next card starts."""
        if self.state.answer_epoch != self._part_epoch:
            self._part_epoch = self.state.answer_epoch
            self._part_offset = 0
        self._part_offset += shown_chars
        self._part_first_block = self.state.block_count
        self._part += 1
        self._handle = None
        self._gone = False
        self._vanished = False

    def _capped_view(self) -> CardSnapshot:
        """The current part, its answer cut to fit one card (the rest shows in the next part)."""
        view = self._view()
        if len(view.answer) <= self._capacity:
            return view
        return replace(view, answer=view.answer[: split_point(view.answer, self._capacity)])

    def _shrink(self, length: int) -> bool:
        """The platform said too long at ``length`` answer characters: aim lower. False when already minimal."""
        if length <= MIN_PART_CHARS:
            return False
        self._capacity = max(MIN_PART_CHARS, int(min(self._capacity, length) * 0.75))
        return True

    def _closing_view(self, cut: int) -> CardSnapshot:
        """The current part, closed at ``cut`` answer characters, pointing to the next part."""
        view = self._view()
        return replace(
            view, status="done", answer=view.answer[:cut], thought="", footer="", error="", continued=True
        )

    async def _send_live(self) -> None:
        if self.state.final:
            # The final snapshot is finish()'s job; nothing live is left to send.
            self._want_flush = False
            self._pending = 0
            self._first_pending_at = None
            return
        part_answer = self._part_answer()
        if len(part_answer) > self._capacity and self._handle is not None:
            await self._roll_over(part_answer)
            self._want_flush = True
            self._wake.set()
            return
        self._want_flush = False
        self._pending = 0
        self._first_pending_at = None
        self._last_update_at = time.monotonic()
        if self._handle is None:
            # The card of this part does not exist yet (creation was refused or timed out): try again.
            created = self._capped_view()
            outcome = await self._create_card(created, deadline=time.monotonic() + self.final_deadline_s, interruptible=True)
            if outcome == "too_long" and self._shrink(len(created.answer)):
                self._want_flush = True
                self._wake.set()
            elif outcome == "too_long":
                self._gone = True
            return
        snapshot = self._view()
        handle = self._handle
        assert handle is not None
        self._live_attempts += 1

        async def update() -> None:
            await self._adopt(handle, await self.sink.update(handle, snapshot))

        outcome = await self._call(
            "update",
            update,
            snapshot,
            deadline=None,
            interruptible=True,
            retry=False,
        )
        if outcome == "ok":
            self._live_attempts = 0
        elif outcome in ("interrupted", "timeout"):
            return
        elif outcome == "throttled":
            # The bucket is paused: the next update waits for it and carries the newest text.
            self._want_flush = True
            self._wake.set()
        elif outcome == "retry":
            # Transient: back off, then coalesce into the next update, which carries the newest text.
            self._want_flush = True
            delay = self._backoff(self._live_attempts - 1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._finishing.wait()
            self._wake.set()
        elif outcome == "too_long":
            if self._shrink(len(part_answer)):
                self._want_flush = True
                self._wake.set()
            else:
                self._gone = True
        else:
            log.warning("card.live_updates_stopped", platform=self.target.platform, reason=outcome)
            self._gone = True
            self._vanished = outcome == "gone"

    async def _roll_over(self, part_answer: str) -> None:
        """Close the current card at a clean split point and open the next part."""
        cut = split_point(part_answer, self._capacity)
        closing = self._closing_view(cut)
        await self._deliver_part_final(closing, deadline=time.monotonic() + self.final_deadline_s)
        self._advance_part(cut)
        if not self._finishing.is_set():
            created = self._capped_view()
            outcome = await self._create_card(created, deadline=time.monotonic() + self.final_deadline_s, interruptible=True)
            if outcome == "too_long":
                self._shrink(len(created.answer))

    async def _create_card(self, snapshot: CardSnapshot, *, deadline: float, interruptible: bool) -> str:
        """Create the current part's card; returns the outcome of the call (``ok`` sets the handle)."""
        result: list[CardHandle] = []

        async def create() -> None:
            result.append(await self.sink.create(self.target, snapshot))

        outcome = await self._call("create", create, snapshot, deadline=deadline, interruptible=interruptible)
        if outcome != "ok" or not result:
            if outcome != "interrupted":
                log.warning("card.create_failed", platform=self.target.platform, part=self._part, reason=outcome)
                if outcome in ("gone", "failed"):
                    self._gone = True
            return outcome if outcome != "ok" else "failed"
        self._handle = result[0]
        self.metrics.parts += 1
        await self._remember_open(self._handle)
        return "ok"

    # --- final delivery -----------------------------------------------------

    async def _deliver_final(self) -> None:
        started = self._finish_called_at or time.monotonic()
        if not self.state.final:
            self.state.mark_failed()
        deadline = time.monotonic() + self.final_deadline_s
        delivered = True
        try:
            while True:
                part_answer = self._part_answer()
                last = len(part_answer) <= self._capacity
                cut = len(part_answer) if last else split_point(part_answer, self._capacity)
                snapshot = self._view() if last else self._closing_view(cut)
                outcome = await self._deliver_part_final(snapshot, deadline=deadline)
                if outcome == "too_long":
                    if self._shrink(cut):
                        continue
                    # Even a minimal part is refused (huge tool lines?): send it as plain messages.
                    sent = await self._fallback(snapshot)
                    outcome = "fallback" if sent else "lost"
                    if self._handle is not None and not self._vanished:
                        self._close_later(self._handle, snapshot, delivered=sent)
                delivered = delivered and outcome != "lost"
                if last:
                    break
                self._advance_part(cut)
        except Exception:
            log.exception("card.final_crashed", platform=self.target.platform)
            delivered = await self._fallback(self._view()) and delivered
        self.metrics.delivered = delivered
        self.metrics.final_delivery_s = time.monotonic() - started
        log.info(
            "card.finished",
            platform=self.target.platform,
            turn_id=self.target.turn_id,
            status=self.state.status,
            delivered=delivered,
            parts=self.metrics.parts,
            calls=self.metrics.total_calls,
            throttles=self.metrics.throttles,
            fallback=self.metrics.fallback_used,
        )

    async def _deliver_part_final(self, snapshot: CardSnapshot, *, deadline: float) -> Literal["ok", "too_long", "fallback", "lost"]:
        """Finalize the current card with ``snapshot`` (creating it first if needed), else send the fallback."""
        if self._handle is None and not self._gone:
            if await self._create_card(snapshot, deadline=deadline, interruptible=False) == "too_long":
                return "too_long"
        handle = self._handle
        if handle is not None and not self._gone:

            async def finalize() -> None:
                await self._adopt(handle, await self.sink.finalize(handle, snapshot))

            outcome = await self._call("finalize", finalize, snapshot, deadline=deadline)
            if outcome == "ok":
                await self._forget_open(handle)
                if self._handle is not None and self._handle is not handle:
                    await self._forget_open(self._handle)
                return "ok"
            if outcome == "too_long":
                return "too_long"
            if outcome == "gone":
                await self._forget_open(handle)
                handle = None
            log.warning("card.finalize_failed", platform=self.target.platform, part=snapshot.part, reason=outcome)
        elif handle is not None and self._vanished:
            # The card vanished during live updates: nothing left to finalize.
            await self._forget_open(handle)
            handle = None
        sent = await self._fallback(snapshot)
        if handle is not None:
            # The answer went out another way, but the card still shows its live state: close it later.
            self._close_later(handle, snapshot, delivered=sent)
        return "fallback" if sent else "lost"

    # --- closing a card after a fallback delivery ---------------------------------

    def _close_later(self, handle: CardHandle, snapshot: CardSnapshot, *, delivered: bool) -> None:
        """Finalize ``handle``'s card in the background: with a note pointing at the fallback
        message when that went out, else with ``snapshot`` itself (the answer, one more chance)."""
        if self.late_close_s <= 0:
            return  # the open-card record stays: start-up recovery closes the card
        closing = self._note_view(snapshot) if delivered else snapshot
        task = asyncio.create_task(self._close_late(handle, closing), name=f"card-close:{self._owner}:{handle.card_id}")
        self._late_tasks.append(task)
        if self._background is not None:
            self._background.track(task)

    @staticmethod
    def _note_view(snapshot: CardSnapshot) -> CardSnapshot:
        """The card's closing content: final, no answer, a note that the answer is in the message below."""
        note = t(snapshot.locale, "answer_below")
        return replace(
            snapshot,
            status=snapshot.status if snapshot.final else "done",
            answer="",
            thought="",
            continued=False,
            error=f"{snapshot.error}\n\n{note}" if snapshot.error else note,
            seq=snapshot.seq + 1,
        )

    async def _close_late(self, handle: CardHandle, snapshot: CardSnapshot) -> bool:
        """Retry finalizing ``handle`` with backoff for ``late_close_s``; True once the card is final.

        Every attempt draws from the shared budget at priority, like any final
        update. The open-card record is removed only once the card is final
        (or the platform says it is gone); when this gives up, the record stays
        for start-up recovery.
        """
        give_up_at = time.monotonic() + self.late_close_s
        attempt = 0
        outcome = "timeout"
        closed = False
        log.info("card.close_scheduled", platform=self.target.platform, turn_id=self.target.turn_id, card_id=handle.card_id)
        while True:
            # The platform just refused this card for final_deadline_s: give it a moment before each try.
            delay = self._backoff(attempt, base=self._late_backoff_base_s, cap=self._late_backoff_max_s)
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(delay, remaining))
            attempt += 1

            async def finalize(current: CardSnapshot = snapshot) -> None:
                await self.sink.finalize(handle, current)

            # Each attempt gets a full final deadline (budget wait and call), even the last one.
            deadline = time.monotonic() + max(self.final_deadline_s, 1.0)
            outcome = await self._call("finalize", finalize, snapshot, deadline=deadline, retry=False)
            if outcome in ("ok", "gone"):
                # "gone": deleted, or already final (an earlier finalize that timed out here did land).
                await self._forget_open(handle)
                closed = True
                break
            if outcome == "too_long" and snapshot.blocks:
                snapshot = replace(snapshot, blocks=())  # the note alone, then
                continue
            if outcome in ("too_long", "failed"):
                break  # refused for good: retrying the same call cannot help
        # Giving up leaves the open-card record in the Store: start-up recovery closes the card.
        (log.info if closed else log.warning)(
            "card.closed_late" if closed else "card.close_gave_up",
            platform=self.target.platform,
            turn_id=self.target.turn_id,
            card_id=handle.card_id,
            attempts=attempt,
            outcome=outcome,
        )
        return closed

    async def _fallback(self, snapshot: CardSnapshot) -> bool:
        """Send ``snapshot`` as plain message(s), split to fit; True when all of it went out."""
        self.metrics.fallback_used = True
        deadline = time.monotonic() + self.final_deadline_s
        capacity = self._capacity
        pieces = [snapshot]
        while pieces:
            piece = pieces[0]
            if len(piece.answer) > capacity:
                chunks = split_parts(piece.answer, capacity)
                pieces[:1] = [
                    replace(piece, answer=chunk, continued=i < len(chunks) - 1 or piece.continued,
                            blocks=piece.blocks if i == 0 else (), footer=piece.footer if i == len(chunks) - 1 else "")
                    for i, chunk in enumerate(chunks)
                ]
                continue
            current = pieces[0]
            outcome = await self._call(
                "fallback", lambda piece=current: self.sink.fallback(self.target, piece), current, deadline=deadline
            )
            if outcome == "too_long" and capacity > MIN_PART_CHARS and len(current.answer) > MIN_PART_CHARS:
                capacity = max(MIN_PART_CHARS, len(current.answer) // 2)
                continue
            if outcome != "ok":
                log.error(
                    "card.final_lost",
                    platform=self.target.platform,
                    turn_id=self.target.turn_id,
                    reason=outcome,
                    answer_chars=len(current.answer),
                )
                return False
            pieces.pop(0)
        return True

    # --- one sink call, paced and retried -------------------------------------

    def _backoff(self, attempt: int, *, base: float | None = None, cap: float | None = None) -> float:
        """Jittered exponential backoff: base·2^attempt, capped, times 0.5–1.0 (the live/final pacing by default)."""
        base = self._backoff_base_s if base is None else base
        cap = self._backoff_max_s if cap is None else cap
        raw = min(cap, base * (2 ** max(attempt, 0)))
        return raw * random.uniform(0.5, 1.0)

    async def _acquire(self, op: CardOp, *, deadline: float | None, interruptible: bool) -> bool | None:
        """Wait for the budget; False when the deadline passed, None when interrupted by finish()."""
        if self.budget is None:
            return True
        key, limit = self.sink.rate_key(op, self.target)
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            return False
        # Opening a card, its first text and its final answer go first; a later live update
        # that waits just carries newer text.
        priority = op != "update" or self.metrics.first_token_to_visible_s is None
        acquire = asyncio.ensure_future(self.budget.acquire(key, limit, self._owner, priority=priority))
        waiters: set[asyncio.Future[object]] = {acquire}  # type: ignore[arg-type]
        stop: asyncio.Future[object] | None = None
        if interruptible:
            stop = asyncio.ensure_future(self._finishing.wait())
            waiters.add(stop)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stop is not None:
                stop.cancel()
        if acquire in done:
            self.metrics.budget_wait_s += acquire.result()
            return True
        acquire.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquire
        return None if (stop is not None and stop in done) else False

    async def _call(
        self,
        op: CardOp,
        make_call: Callable[[], Awaitable[object]],
        snapshot: CardSnapshot,
        *,
        deadline: float | None,
        interruptible: bool = False,
        retry: bool = True,
    ) -> str:
        """Make one sink call through the budget, retrying throttles and transient errors until ``deadline``.

        Returns ``ok``, ``too_long``, ``gone``, ``failed``, ``timeout``,
        ``interrupted`` (finish() arrived while waiting) or, with
        ``retry=False``, ``throttled`` / ``retry`` for a throttle / transient error.
        """
        attempt = 0
        while True:
            got = await self._acquire(op, deadline=deadline, interruptible=interruptible)
            if got is None:
                self.metrics.coalesced += 1
                return "interrupted"
            if not got:
                return "timeout"
            self.metrics.count_call(op)
            if attempt:
                self.metrics.retries += 1
            # Live calls get the final deadline too, so a hung request cannot freeze the card.
            remaining = self.final_deadline_s if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (shutdown)
                # that arrives as the call completes, and the worker would carry on.
                async with asyncio.timeout(remaining):
                    await make_call()
            except RateLimited as exc:
                self.metrics.throttles += 1
                self._throttle_streak += 1
                # Without a Retry-After, back off longer on every throttle in a row.
                pause = exc.retry_after if exc.retry_after and exc.retry_after > 0 else self._backoff(self._throttle_streak - 1)
                if self.budget is not None:
                    key, _ = self.sink.rate_key(op, self.target)
                    self.budget.pause(key, pause)
                log.info("card.throttled", platform=self.target.platform, op=op, retry_after=exc.retry_after)
                if not retry:
                    if self.budget is None:
                        await asyncio.sleep(pause)
                    return "throttled"
                if self.budget is None:
                    await asyncio.sleep(min(pause, self._remaining(deadline)))
            except (TransientError, TimeoutError) as exc:
                log.info("card.transient_error", platform=self.target.platform, op=op, error=str(exc) or type(exc).__name__)
                if not retry:
                    return "retry"
                await asyncio.sleep(min(self._backoff(attempt), self._remaining(deadline)))
            except TooLong:
                return "too_long"
            except CardGone:
                return "gone"
            except PermanentError as exc:
                log.warning("card.permanent_error", platform=self.target.platform, op=op, error=str(exc))
                return "failed"
            except Exception:
                # A sink bug must not lose the answer: report it and let the caller fall back.
                log.exception("card.sink_crashed", platform=self.target.platform, op=op)
                return "failed"
            else:
                self._throttle_streak = 0
                self._note_visible(snapshot)
                return "ok"
            attempt += 1
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout"

    @staticmethod
    def _remaining(deadline: float | None) -> float:
        return 3600.0 if deadline is None else max(deadline - time.monotonic(), 0.0)

    def _note_visible(self, snapshot: CardSnapshot) -> None:
        if (
            self.metrics.first_token_to_visible_s is None
            and self._first_token_at is not None
            and _visible(snapshot)
        ):
            self.metrics.first_token_to_visible_s = time.monotonic() - self._first_token_at

    # --- open-card bookkeeping ----------------------------------------------

    async def _adopt(self, old: CardHandle, new: object) -> None:
        """Keep the handle a sink returned (it may have moved the card, e.g. to a new message)."""
        if not isinstance(new, CardHandle) or new is old:
            return
        self._handle = new
        if new.card_id != old.card_id:
            await self._forget_open(old)
            await self._remember_open(new)

    async def _remember_open(self, handle: CardHandle) -> None:
        if self.store is None:
            return
        try:
            await self.store.add_open_card(
                OpenCard(
                    platform=self.target.platform,
                    card_id=handle.card_id,
                    turn_id=self.target.turn_id,
                    target=_target_dict(handle.target),
                    created_at=time.time(),
                    owner=self.instance_id,
                )
            )
            self._open_ids.append(handle.card_id)
        except Exception:
            log.exception("card.store_add_failed", platform=self.target.platform)

    async def _forget_open(self, handle: CardHandle) -> None:
        if self.store is None or handle.card_id not in self._open_ids:
            return
        try:
            await self.store.remove_open_card(self.target.platform, handle.card_id)
            self._open_ids.remove(handle.card_id)
        except Exception:
            log.exception("card.store_remove_failed", platform=self.target.platform)


def _target_dict(target: CardTarget) -> dict[str, object]:
    """A JSON-ready copy of ``target`` for the Store (``extra`` as a plain dict)."""
    try:
        data = asdict(replace(target, extra=dict(target.extra)))
    except TypeError:
        data = {f.name: getattr(target, f.name) for f in fields(target)}
        data["extra"] = {k: v for k, v in target.extra.items() if isinstance(v, (str, int, float, bool, type(None)))}
    return data
