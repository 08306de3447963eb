"""The one bound on a whole turn's time (``llm.turn_timeout_s``).

A model that keeps its stream alive with empty chunks or endless reasoning
passes every per-chunk timeout; only a deadline on the whole turn ends it. The
loop awaits each step of a turn through :meth:`TurnDeadline.run`, never across
a ``yield``, so the deadline can only ever cancel the turn's own work (the model
stream, running tools), not the consumer drawing the card.

The deadline lives here and nowhere else: time spent in
:meth:`TurnDeadline.paused` does not count (a wait for a person, such as an
approval), and :meth:`TurnDeadline.disarm` ends the bound once the answer is
complete, so its commit to history is never cut in half.

It is one timer for the whole turn, moved only when a pause or a disarm moves
the deadline: a step is every streamed chunk, and an ``asyncio.timeout`` per
step armed and cancelled a timer per chunk, a good part of a chunk's CPU. When
the timer fires during a step, that step's task is cancelled, as the timeout
would have done; when it fires between steps, the next step ends at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["TurnDeadline", "TurnTimedOut", "turn_timeout_message"]

T = TypeVar("T")


class TurnTimedOut(Exception):
    """The turn's deadline passed while one of its steps was running (that step was cancelled)."""


def turn_timeout_message(timeout_s: float) -> str:
    """Plain words for a turn that ran out of time, naming the config key."""
    return (
        f"The answer took longer than {timeout_s:g} s (llm.turn_timeout_s) and was stopped; what was written so far "
        "is kept. Ask a narrower question, or raise llm.turn_timeout_s"
    )


class TurnDeadline:
    """A deadline for one turn, started by :meth:`start`; ``timeout_s`` ``None`` means unbounded."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        """The bound on the turn, in seconds of counted time."""
        self.expired = False
        """Whether the deadline has fired."""
        self._when: float | None = None  # event-loop time; None once disarmed (or never bounded)
        self._paused_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._step: asyncio.Task[object] | None = None  # the task inside run(), if any
        self._cancelling = 0  # that task's cancellation requests before ours
        self._fired = False  # the deadline cancelled the running step

    def start(self) -> None:
        """Begin counting now (call from the turn's event loop)."""
        if self.timeout_s is not None:
            self._when = asyncio.get_running_loop().time() + self.timeout_s
            self._arm()

    async def run(self, step: Awaitable[T]) -> T:
        """Await ``step`` within the deadline; raises :class:`TurnTimedOut` (``step`` cancelled) when it passes."""
        when = self._effective()
        if when is not None and asyncio.get_running_loop().time() >= when:
            return await self._run_late(step, when)
        task = asyncio.current_task()
        assert task is not None and self._step is None, "one step at a time, inside a task"
        self._step, self._cancelling, self._fired = task, task.cancelling(), False
        try:
            return await step
        except asyncio.CancelledError:
            if self._fired and task.uncancel() <= self._cancelling:
                self.expired = True
                raise TurnTimedOut() from None
            raise
        finally:
            self._step = None

    async def _run_late(self, step: Awaitable[T], when: float) -> T:
        """A step started after the deadline passed: it ends at its first wait, as a timeout would end it."""
        timeout = asyncio.timeout_at(when)
        try:
            async with timeout:
                return await step
        except TimeoutError:
            if not timeout.expired():
                raise  # the step's own timeout, not ours
            self.expired = True
            raise TurnTimedOut() from None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count against the deadline (nested pauses count once)."""
        if self._when is None or self._paused_at is not None:
            yield
            return
        loop = asyncio.get_running_loop()
        self._paused_at = loop.time()
        self._arm()
        try:
            yield
        finally:
            paused_for = loop.time() - self._paused_at
            self._paused_at = None
            if self._when is not None:
                self._when += paused_for
            self._arm()

    def disarm(self) -> None:
        """No deadline from now on: the answer is complete and only its commit is left."""
        self._when = None
        self._arm()

    def _effective(self) -> float | None:
        """The loop time the running step must end by, ``None`` when nothing bounds it now."""
        return None if self._paused_at is not None else self._when

    def _arm(self) -> None:
        """Set the one timer to the effective deadline (or none)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        when = self._effective()
        if when is not None:
            self._timer = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._step is not None and self._effective() is not None:
            # The task is suspended inside its step: the cancellation lands there, as asyncio.timeout's would.
            self._fired = True
            self._step.cancel()
        # Between steps: the next run() finds the deadline passed.
