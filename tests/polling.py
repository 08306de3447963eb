"""Waiting for state another process (or a write behind a turn) keeps, which has no event to await: polling it.

A store written behind the turn (an audit record after the card), Redis,
or a SQLite file a gateway subprocess writes: nothing here can be told when
it changes, so the test reads it again until it holds. The timeout only
proves "not stuck"; it is never a margin the assertion depends on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["until_read"]

T = TypeVar("T")

POLL_S = 0.02
"""How often the state is read again."""


async def until_read(read: Callable[[], Awaitable[T]], holds: Callable[[T], bool], timeout: float = 10.0) -> T:
    """Read ``await read()`` until ``holds(value)``, and return that value."""
    async with asyncio.timeout(timeout):
        while not holds(value := await read()):
            await asyncio.sleep(POLL_S)
        return value
