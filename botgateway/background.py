"""Background work that outlives the call that started it, owned so shutdown can end it.

A card whose final answer went out as a fallback message is closed later, in
the background (see :class:`~botgateway.cards.late_close.LateCloser`). Such tasks
must never leak: whoever runs the streamers (the gateway, the benchmark)
passes one :class:`BackgroundTasks` to all of them and calls :meth:`aclose`
on shutdown, which cancels and awaits whatever is still running.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine, Hashable
from typing import Any

import structlog

__all__ = ["BackgroundTasks", "OrderedWrites"]

log = structlog.get_logger(__name__)


class BackgroundTasks:
    """A set of tracked tasks: :meth:`spawn` adds one, :meth:`aclose` cancels and awaits them all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called; later :meth:`spawn` calls start nothing."""
        return self._closed

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any] | None:
        """Run ``coro`` in a tracked task; ``None`` (and ``coro`` closed unrun) once closed."""
        if self._closed:
            coro.close()
            return None
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def track(self, task: asyncio.Task[Any]) -> None:
        """Own a task started elsewhere (cancelled right away when already closed)."""
        if self._closed:
            task.cancel()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pending(self) -> list[asyncio.Task[Any]]:
        """The tasks still running."""
        return [task for task in self._tasks if not task.done()]

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until every task has ended (or ``timeout``); True when none is left."""
        tasks = set(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self._tasks

    async def aclose(self) -> None:
        """Refuse new tasks, cancel the running ones and wait for them to end."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            log.info("background.cancelled", tasks=len(tasks))
            await asyncio.gather(*tasks, return_exceptions=True)


class OrderedWrites:
    """Writes made in the background, in order per key: a write waits for the one of its key spawned before it
    (an entry's removal lands after its addition, whichever task the loop runs first).

    ``tasks``: who owns the writes (shutdown waits for or cancels them there).
    """

    def __init__(self, tasks: BackgroundTasks) -> None:
        self._tasks = tasks
        self._last: dict[Hashable, asyncio.Task[Any]] = {}  # each key's latest write, until it ends

    def spawn(self, key: Hashable, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> None:
        """Write ``coro`` once the earlier writes of ``key`` are done (never, and ``coro`` closed, once closed)."""
        if self._tasks.closed:
            coro.close()
            return
        task = self._tasks.spawn(_after(self._last.get(key), coro), name=name)
        if task is None:
            return
        self._last[key] = task

        def ended(done: asyncio.Task[Any]) -> None:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # cancelled before its turn came: never run
            if self._last.get(key) is done:
                del self._last[key]

        task.add_done_callback(ended)

    async def written(self, key: Hashable) -> None:
        """Return once the writes of ``key`` spawned so far are done (at once when none is pending); the writes are
        not cancelled with the waiter."""
        task = self._last.get(key)
        if task is not None:
            await asyncio.wait([task])


async def _after(before: asyncio.Task[Any] | None, coro: Coroutine[Any, Any, Any]) -> Any:
    if before is not None:
        await asyncio.wait([before])
    return await coro
