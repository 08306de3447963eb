"""An event loop on a clock of its own, for tests of timeouts and deadlines that a busy machine cannot stretch.

The loop's time passes only when nothing is ready to run, and then at once to
the next timer: a 0.05 s deadline is never eaten by the machine being slow
between two steps (the steps take no loop time), and a wait of 0.5 s costs
no real time. :meth:`VirtualTimeLoop.advance` lets time pass while a task
holds the loop, as a busy consumer does. Only for code that waits on the
loop's own timers and events: real I/O still waits in real time, and the
clock jumps past any timer meanwhile.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "advance", "in_virtual_time"]

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Answers at once: what is ready now, else (when the loop would sleep until a timer) nothing, the clock moved."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            return super().select(None)  # no timer at all: only I/O (a thread's answer) can come
        ready = super().select(0)
        if not ready and timeout > 0:
            self._clock[0] += timeout  # the next timer is due now
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose :meth:`time` starts at 0 and jumps to the next timer whenever the loop is idle."""

    def __init__(self) -> None:
        self._now = [0.0]
        super().__init__(selector=_JumpingSelector(self._now))

    def time(self) -> float:
        """The loop's clock (seconds since it started, as the loop let them pass)."""
        return self._now[0]

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass at once, while the caller holds the loop (timers due meanwhile run late)."""
        self._now[0] += seconds


def in_virtual_time(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``scenario()`` to its end on a :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(scenario())


def advance(seconds: float) -> None:
    """:meth:`VirtualTimeLoop.advance` on the running loop (a consumer busy for ``seconds``)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop), "runs in in_virtual_time()"
    loop.advance(seconds)
