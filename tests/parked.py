"""A coroutine started as a task and run up to its first wait, for tests that assert "nothing happened yet".

``asyncio.create_task`` only schedules a task: a test that asserts at once
that the task still waits (for a slot, a budget's call, a card) would pass
for a task that has not even begun. Yielding a guessed number of times in
between waits on nothing. :func:`parked` waits for the task itself to say it
began: everything the task does before its first real wait runs in that same
step, so when :func:`parked` returns the task is in its line (or done).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["parked"]

T = TypeVar("T")


async def parked(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``coro`` as a task that has run up to its first wait (or to its end)."""
    began = asyncio.Event()

    async def run() -> T:
        began.set()  # wakes the caller only once this step ends: at the task's first wait
        return await coro

    task = asyncio.create_task(run())
    await began.wait()
    return task
