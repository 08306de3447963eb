"""An async context (the SDK's session manager) held open in a task of its own, from start-up to clean-up.

The SDK's session manager runs an anyio task group, whose scope must be left
in the task that entered it; aiohttp runs an application's start-up and its
clean-up in whatever tasks start and stop the server. So the context is
entered and left by one owner task, and the application's ``cleanup_ctx``
only starts that task and, at clean-up, tells it to leave.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

__all__ = ["held_open"]


async def _own(context: AbstractAsyncContextManager[object], entered: asyncio.Future[None], leave: asyncio.Event) -> None:
    async with context:
        entered.set_result(None)
        await leave.wait()


@contextlib.asynccontextmanager
async def held_open(open_context: Callable[[], AbstractAsyncContextManager[object]], *, name: str) -> AsyncIterator[None]:
    """Enter ``open_context()`` in an owner task (named ``name``) and hold it until this block ends."""
    entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()
    # Not a background task: it lives exactly as long as this block, which awaits it.
    owner = asyncio.create_task(_own(open_context(), entered, leave), name=name)
    try:
        await asyncio.wait([entered, owner], return_when=asyncio.FIRST_COMPLETED)
        if owner.done():
            await owner  # it could not enter: its error is raised here
            raise RuntimeError(f"{name} ended before it was entered")
        yield
    finally:
        leave.set()
        if not owner.done():
            await owner
