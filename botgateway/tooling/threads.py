"""Blocking tool functions run on a bounded pool of daemon threads of their own, and are abandoned at their timeout.

A thread cannot be stopped from outside. When a blocking tool outlives its
timeout, the call is abandoned: the model hears so, and the thread runs on
until the function returns. On the event loop's default executor such
threads would pile up until nothing else (DNS lookups, file reads) got a
thread, and ``asyncio.run`` would wait for them at exit, forever. Here they
use at most ``max_workers`` threads of their own, and the threads are daemons:
a call that never returns never keeps the process from exiting.

The registry lends its pool to the call it runs (:func:`lend`) and learns
afterwards whether the call was abandoned or never started; a
:class:`~botgateway.tooling.function.FunctionTool` runs its blocking function
with :func:`run_blocking`. The pool travels in a context variable because the
:class:`~botgateway.tooling.contract.Tool` contract's ``invoke`` takes only the
call's arguments and context.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import structlog

__all__ = ["DEFAULT_SYNC_WORKERS", "CallFate", "Loan", "SyncWorkers", "lend", "run_blocking"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_SYNC_WORKERS = 8
"""Threads for blocking tool functions unless configured (``tools.sync_workers``)."""

CallFate = Literal["", "abandoned", "never_started"]
"""How a cancelled blocking call ended: still running in its thread, or cancelled before it started."""

_Work = tuple[Future[Any], contextvars.Context, Callable[[], Any]]


class SyncWorkers:
    """At most ``max_workers`` daemon threads running blocking calls, started as needed."""

    def __init__(self, max_workers: int = DEFAULT_SYNC_WORKERS, *, name: str = "tool-sync") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        """The most calls that run at once; later ones wait for a thread."""
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._waiting = 0
        self._closed = False

    @property
    def busy(self) -> int:
        """Threads running a call now (abandoned ones included)."""
        with self._lock:
            return len(self._threads) - self._idle

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn`` for a thread; the future can be cancelled until a thread picks it up."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool threads are shut down")
            self._work.put((future, contextvars.copy_context(), fn))
            self._waiting += 1
            if self._idle < self._waiting and len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads) + 1}", daemon=True)
                self._threads.append(thread)
                self._idle += 1  # it is about to wait for work
                thread.start()
        return future

    def close(self) -> None:
        """Cancel the calls still waiting and let the threads end; never waits for a running call."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = len(self._threads)
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in range(threads):
            self._work.put(None)  # one stop per thread; a running one reads its stop when its call returns

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            future, context, fn = item
            if future.set_running_or_notify_cancel():
                try:
                    result = context.run(fn)
                except BaseException as exc:  # handed to the awaiting call, which decides what it means
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._lock:
                self._idle += 1


# Mutable on purpose: the registry reads, after the call, what happened to it.
@dataclass
class Loan:
    """The pool lent to one call, and the fate of its blocking work if the call was cancelled."""

    workers: SyncWorkers
    """The pool the call's blocking function runs on."""
    fate: CallFate = ""
    """``abandoned`` when the call was cancelled while its thread ran; ``never_started`` when it was still waiting."""


_LOAN: contextvars.ContextVar[Loan | None] = contextvars.ContextVar("botgateway_tool_threads", default=None)


@contextmanager
def lend(workers: SyncWorkers) -> Iterator[Loan]:
    """Lend ``workers`` to the blocking calls made inside the block (one tool call)."""
    loan = Loan(workers)
    token = _LOAN.set(loan)
    try:
        yield loan
    finally:
        _LOAN.reset(token)


async def run_blocking(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the lent pool (a pool of one thread, closed after, when none was lent).

    Cancelling the caller abandons ``fn`` if it already runs (the thread
    carries on until it returns), or drops it if it was still waiting.
    """
    loan = _LOAN.get()
    own = SyncWorkers(1) if loan is None else None
    workers = loan.workers if loan is not None else own
    assert workers is not None
    future = workers.submit(fn)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # Cancelling the thread's future works only if no thread has picked it up yet.
        fate: CallFate = "never_started" if future.cancel() or future.cancelled() else "" if future.done() else "abandoned"
        if loan is not None:
            loan.fate = fate
        if fate == "abandoned":
            log.warning("tool.thread_abandoned", busy=workers.busy, max_workers=workers.max_workers)
        raise
    finally:
        if own is not None:
            own.close()
