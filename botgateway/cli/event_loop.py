"""The event loop ``botgateway run`` serves on (``gateway.event_loop``): uvloop where it is installed.

uvloop runs the loop, its timers and its sockets in C: the same gateway spends
less CPU per streamed chunk and per card call. Its clock (``loop.time()``) is
read once per turn of the loop, in milliseconds; the gateway's timeouts and
pacing are tenths of seconds and more, so nothing it does depends on finer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "run"]

T = TypeVar("T")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``choice`` names (None: asyncio's own)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not installed (Windows, PyPy): asyncio's own serves as well, a little slower
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """Run ``main`` to its end on the loop ``choice`` names, as :func:`asyncio.run` does."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
