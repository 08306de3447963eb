"""Shared test settings: every test runs against loopback services only."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

# Tests must never pick up a developer's real credentials from the environment.
for _name in list(os.environ):
    if _name.startswith(("LLM_", "SLACK_", "DINGTALK_", "ALIBABA_CLOUD_", "TENCENTCLOUD_", "OPENAI_")):
        del os.environ[_name]


def pytest_xdist_auto_num_workers(config: object) -> int | None:
    """``-n auto`` (``make test``): one pytest-xdist worker more than the CPUs this process may run on.

    The suite spends about 40% of its test time waiting, not computing: on real
    time-outs it proves (a store's drain, a lease's fallback, SQLite's busy wait),
    on processes it starts (replicas, Chromium, the benchmark's workers) and on
    paced model streams. One worker per CPU leaves those waits idle; a spare
    worker fills them (on a busy 2-CPU machine the suite took about 5½ min with
    2 workers, 4½ min with 3). The CPUs are the ones the scheduler lets this
    process use (``sched_getaffinity``), not the host's count, which a container
    may not have.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS=N make test`` still chooses N (pytest-xdist reads it when this says nothing).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus + 1


def pytest_unconfigure(config: object) -> None:
    """Fail loudly, instead of hanging at exit, when a test leaks a non-daemon thread.

    An unclosed aiosqlite connection or server thread keeps the interpreter alive
    forever after the last test; CI would only see a time-out.
    """
    import sys
    import threading

    leaked = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for thread in leaked:
        thread.join(timeout=2)
    leaked = [t for t in leaked if t.is_alive()]
    if leaked:
        names = ", ".join(t.name for t in leaked)
        sys.stderr.write(f"\nERROR: tests left non-daemon threads running ({names}); close what you open.\n")
        sys.stderr.flush()
        os._exit(3)


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A Redis key prefix of this test alone (on the loopback Redis), its keys purged afterwards."""
    from tests.fakes.stores import purge_prefix, unique_prefix

    prefix = unique_prefix()
    try:
        yield prefix
    finally:
        await purge_prefix(prefix)
