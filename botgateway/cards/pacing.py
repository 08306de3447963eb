"""When a card's pending changes are due: the buffer policy applied over time.

Changes pile up as characters pending since the last update. They are due once
the current phase's rule says so (enough characters and enough time since the
last update), or after ``max_wait_s`` whatever came, so a stalled stream still
shows what it has; a timer fires for that. A phase change flushes at once.
While an update is due or in flight, further changes just ride along with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.metrics import CardMetrics
from botgateway.snapshot import Phase

__all__ = ["Pacing"]


class Pacing:
    """The pending changes of one card and when they are due (mutable; owned by its streamer)."""

    def __init__(self, policy: BufferPolicy, phase: Phase, *, on_due: Callable[[], None], metrics: CardMetrics) -> None:
        """``on_due`` is called (synchronously) when an update is due."""
        self._policy = policy
        self._phase = phase
        self._on_due = on_due
        self._metrics = metrics
        self._pending = 0
        self._first_pending_at: float | None = None
        self._last_update_at = float("-inf")
        self._timer: asyncio.Handle | None = None
        self._timer_due = 0.0  # loop time the armed timer fires (event loops need not offer Handle.when())
        self._stopped = False
        self.due = False
        """An update is due (or in flight): the next update carries every pending change."""

    def add(self, chars: int, now: float) -> None:
        """``chars`` more visible characters changed at ``now``."""
        if chars <= 0:
            return
        self._pending += chars
        if self._first_pending_at is None:
            self._first_pending_at = now

    def phase(self, phase: Phase) -> None:
        """The turn is in ``phase`` now: a change of phase flushes what is pending at once."""
        if phase != self._phase:
            self._phase = phase
            if self._pending > 0:
                self.flush()
                return
        self.evaluate()

    def evaluate(self) -> None:
        """Due now if the phase's rule says so, else arm a timer for when it will be."""
        if self._pending <= 0 or self._first_pending_at is None:
            return
        if self.due:
            # An update is already due (or in flight): this change rides along with the newest snapshot.
            self._metrics.coalesced += 1
            return
        rule = self._policy.rule(self._phase)
        now = time.monotonic()
        ready_at = self._first_pending_at + rule.max_wait_s
        if self._pending >= rule.min_chars:
            ready_at = min(ready_at, self._last_update_at + rule.min_interval_s)
        if now >= ready_at:
            self.flush()
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + (ready_at - now)
        if self._timer is not None and self._timer_due <= due + 0.001:
            return  # the armed timer fires early enough; re-arming on every chunk would only cost CPU
        self.cancel_timer()
        self._timer = loop.call_later(ready_at - now, self._on_timer)
        self._timer_due = due

    def flush(self) -> None:
        """Make an update due now."""
        self.cancel_timer()
        if self.due:
            self._metrics.coalesced += 1
        self.due = True
        self._on_due()

    def again(self, *, wake: bool = True) -> None:
        """The update did not go out: it is due again (``wake=False``: due, but the caller wakes the worker later)."""
        self.due = True
        if wake:
            self._on_due()

    def sent(self) -> None:
        """An update carrying every pending change starts now."""
        self.clear()
        self._last_update_at = time.monotonic()

    def clear(self) -> None:
        """Nothing is pending any more (the final update will carry it all)."""
        self.due = False
        self._pending = 0
        self._first_pending_at = None

    def stop(self) -> None:
        """No more live updates: the timer is cancelled and not re-armed."""
        self._stopped = True
        self.cancel_timer()

    def cancel_timer(self) -> None:
        """Disarm the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if not self._stopped:
            self.evaluate()
