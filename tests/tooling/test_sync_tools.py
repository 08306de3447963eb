"""Blocking tool functions: a bounded pool of their own, abandoned at their timeout, never holding the process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

from botgateway.tooling import ToolContext, ToolRegistry, tool
from tests.paths import REPO

CTX = ToolContext(user_id="U1", platform="cli", conversation_id="c1")


def hung_tool(release: threading.Event, entered: list[int]) -> object:
    @tool(timeout_s=0.3)
    def stuck(n: int = 0) -> str:
        """Blocks until released (a driver call that never returns).

        Args:
            n: Which call.
        """
        entered.append(n)
        release.wait()
        return "late"

    return stuck


async def test_a_hung_sync_tool_is_abandoned_at_its_timeout_and_says_so() -> None:
    release, entered = threading.Event(), []
    registry = ToolRegistry([hung_tool(release, entered)], sync_workers=2)
    try:
        outcome = await registry.execute("stuck", {}, CTX)
    finally:
        release.set()
        registry.close()
    assert not outcome.ok and entered == [0]
    assert outcome.content == "Error: timed out after 0.3 s; the call was abandoned (it may still be running)"
    assert outcome.summary == "timed out after 0.3 s; the call was abandoned (it may still be running)"


async def test_hung_sync_tools_run_on_a_bounded_pool_of_their_own() -> None:
    release, entered = threading.Event(), []
    registry = ToolRegistry([hung_tool(release, entered)], sync_workers=2)
    try:
        outcomes = await asyncio.gather(*(registry.execute("stuck", {"n": n}, CTX) for n in range(5)))
        assert len(entered) == 2  # the others waited for a worker and were never started
        assert all(not o.ok for o in outcomes)
        assert sum("abandoned" in o.content for o in outcomes) == 2
        waited = [o.content for o in outcomes if "abandoned" not in o.content]
        assert waited == ["Error: timed out after 0.3 s before it could start (all 2 tools.sync_workers were busy)"] * 3
    finally:
        release.set()
    try:
        # Once the stuck calls return, their workers serve new calls.
        @tool
        def quick() -> str:
            """Answers at once."""
            return "ok"

        registry.add(quick)
        assert (await registry.execute("quick", {}, CTX)).content == "ok"
    finally:
        registry.close()


async def test_hung_sync_tools_never_exhaust_the_default_executor() -> None:
    loop = asyncio.get_running_loop()
    default = ThreadPoolExecutor(max_workers=2, thread_name_prefix="default")
    loop.set_default_executor(default)
    release, entered = threading.Event(), []
    registry = ToolRegistry([hung_tool(release, entered)])
    try:
        outcomes = await asyncio.gather(*(registry.execute("stuck", {"n": n}, CTX) for n in range(3)))
        assert all(not o.ok for o in outcomes)
        # The rest of the process (DNS lookups, file reads, SDK calls) still gets threads.
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: "free"), 60) == "free"
    finally:
        release.set()
        registry.close()
        default.shutdown(wait=True)


HUNG_PROCESS = textwrap.dedent(
    """
    import asyncio, threading
    from botgateway.tooling import ToolContext, ToolRegistry, tool

    @tool(timeout_s=0.5)
    def stuck() -> str:
        \"\"\"Never returns.\"\"\"
        threading.Event().wait()
        return "unreachable"

    async def main() -> None:
        registry = ToolRegistry([stuck])
        try:
            outcome = await registry.execute("stuck", {}, ToolContext())
        finally:
            registry.close()
        print(outcome.content, flush=True)

    asyncio.run(main())
    """
)


def test_a_hung_sync_tool_never_keeps_the_process_from_exiting() -> None:
    # Before: asyncio.run() waited at exit for the executor thread the tool still held, forever.
    done = subprocess.run(
        [sys.executable, "-c", HUNG_PROCESS], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "timed out after 0.5 s; the call was abandoned" in done.stdout
