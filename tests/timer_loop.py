"""An event loop that counts the timers scheduled on it, for tests about what streaming costs the loop."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["TimerCountingLoop"]


class TimerCountingLoop(asyncio.SelectorEventLoop):
    """A selector event loop counting ``call_at`` (``call_later`` and every timeout go through it)."""

    timers = 0
    """Timers scheduled so far."""

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        self.timers += 1
        return super().call_at(when, callback, *args, context=context)
