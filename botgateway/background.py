"""Background work that outlives the call that started it, owned so shutdown can end it.

A card whose final answer went out as a fallback message is closed later, in
the background (see :class:`~botgateway.cards.late_close.LateCloser`). Such tasks
must never leak: whoever runs the streamers (the gateway, the benchmark)
passes one :class:`BackgroundTasks` to all of them and calls :meth:`aclose`
on shutdown, which cancels and awaits whatever is still running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

__all__ = ["BackgroundTasks"]

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
