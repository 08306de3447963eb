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
        self._active: asyncio.Timeout | None = None

    def start(self) -> None:
        """Begin counting now (call from the turn's event loop)."""
        if self.timeout_s is not None:
            self._when = asyncio.get_running_loop().time() + self.timeout_s

    async def run(self, step: Awaitable[T]) -> T:
        """Await ``step`` within the deadline; raises :class:`TurnTimedOut` (``step`` cancelled) when it passes."""
        timeout = asyncio.timeout_at(self._effective())
        try:
            async with timeout:
                self._active = timeout
                return await step
        except TimeoutError:
            if not timeout.expired():
                raise  # the step's own timeout, not ours
            self.expired = True
            raise TurnTimedOut() from None
        finally:
            self._active = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count against the deadline (nested pauses count once)."""
        if self._when is None or self._paused_at is not None:
            yield
            return
        loop = asyncio.get_running_loop()
        self._paused_at = loop.time()
        self._apply()
        try:
            yield
        finally:
            paused_for = loop.time() - self._paused_at
            self._paused_at = None
            if self._when is not None:
                self._when += paused_for
            self._apply()

    def disarm(self) -> None:
        """No deadline from now on: the answer is complete and only its commit is left."""
        self._when = None
        self._apply()

    def _effective(self) -> float | None:
        """The loop time the running step must end by, ``None`` when nothing bounds it now."""
        return None if self._paused_at is not None else self._when

    def _apply(self) -> None:
        if self._active is not None:
            self._active.reschedule(self._effective())
