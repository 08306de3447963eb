"""One MCP server: its session, its tools, its health.

The SDK's ``Client`` is entered and exited inside a dedicated owner task
(anyio scopes must close in the task that opened them); tool calls from any
task go through it. A server whose transport reaches end-of-stream (the
process exited) is marked down at once and restarted on the next call; a call
in flight when it dies fails with a tool error the model can read. Failed
reconnects back off (:data:`RECONNECT_BACKOFF`), and during the back-off calls
fail fast instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import structlog

from botgateway.backoff import Backoff
from botgateway.config import McpServerConfig
from botgateway.tooling import ToolError, ToolOutput
from tools.mcp.errors import McpUnavailable, describe, leaf, scrub
from tools.mcp.tool import to_tool_output
from tools.mcp.transport import WatchedTransport, open_transport

__all__ = ["RECONNECT_BACKOFF", "McpConnection"]

log = structlog.get_logger(__name__)

RECONNECT_BACKOFF = Backoff(base_s=1.0, max_s=60.0, jitter=(1.0, 1.0))
"""1 s after the first failed connect, doubling up to a minute.

No jitter: one process retries each server, and the wait a tool error
announces ("retrying in 30 s") is then the wait.
"""

SHUTDOWN_GRACE_S = 5.0
"""How long a closing session may take to end by itself (a stdio server exits) before it is cancelled."""


class McpConnection:
    """One MCP server: its session, its tools, its health."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        connect_timeout_s: float = 15.0,
        backoff: Backoff = RECONNECT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.name = config.name
        self.connect_timeout_s = connect_timeout_s
        self.backoff = backoff
        self._clock = clock
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._down = asyncio.Event()
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self.last_error = ""
        self.tools: list[Any] = []
        """The server's tool definitions (``mcp.types.Tool``) from the last listing."""
        self.connects = 0
        """Successful connections so far (1 after start-up, more after restarts)."""

    @property
    def connected(self) -> bool:
        """True while a session is up."""
        return self._client is not None

    @property
    def lock(self) -> asyncio.Lock:
        """Held while (re)connecting, so a call and a background retry never connect at once."""
        return self._lock

    @property
    def retry_delay_s(self) -> float:
        """How long to wait before the next attempt after the failures so far (0 after none)."""
        return self.backoff.delay(self._failures - 1) if self._failures > 0 else 0.0

    async def wait_down(self) -> None:
        """Return once the current session has ended (the server exited or was closed)."""
        await self._down.wait()

    # -- connecting ------------------------------------------------------------------

    async def _own(self, ready: asyncio.Future[Any], stop: asyncio.Event, down: asyncio.Event) -> None:
        """Hold the session open in this task until asked to stop or the server goes away."""
        from mcp import Client

        eof = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                transport = WatchedTransport(open_transport(self.config, stack), eof.set)
                client = Client(transport, read_timeout_seconds=self.config.timeout_s)
                await stack.enter_async_context(client)
                tools = await self._list_tools(client)
                ready.set_result((client, tools))
                waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(eof.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
                if eof.is_set() and not stop.is_set():
                    log.warning("mcp_server_exited", server=self.name)
                    self.last_error = "the server exited"
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # the SDK raises exception groups; never let them escape
            if not ready.done():
                ready.set_exception(leaf(exc) if isinstance(leaf(exc), Exception) else RuntimeError(str(exc)))
            else:
                log.warning("mcp_session_ended", server=self.name, error=describe(exc, self.config))
        finally:
            if self._down is down:
                self._client = None
            down.set()

    async def _list_tools(self, client: Any) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(100):  # a paginator that never ends cannot hang start-up
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def connect(self) -> None:
        """Start (or restart) the session; raises :class:`McpUnavailable` with a clear reason."""
        await self._shutdown()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        self._stop = asyncio.Event()
        self._down = asyncio.Event()
        # Not a background task: the session lives exactly as long as this owner, which _shutdown ends.
        self._owner = asyncio.create_task(self._own(ready, self._stop, self._down), name=f"mcp-{self.name}")
        try:
            self._client, self.tools = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s)
        except TimeoutError:
            await self._shutdown()
            self._record_failure(f"no answer within {self.connect_timeout_s:g} s")
            raise McpUnavailable(self._unavailable()) from None
        except asyncio.CancelledError:
            await self._shutdown()
            raise
        except Exception as exc:
            await self._shutdown()
            self._record_failure(describe(exc, self.config))
            raise McpUnavailable(self._unavailable()) from None
        self._failures = 0
        self.last_error = ""
        self.connects += 1
        log.info("mcp_connected", server=self.name, tools=len(self.tools), connects=self.connects)

    def _record_failure(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        self._retry_at = self._clock() + self.retry_delay_s
        log.warning("mcp_connect_failed", server=self.name, reason=reason, failures=self._failures)

    def _unavailable(self) -> str:
        text = f"MCP server {self.name!r} is unavailable: {self.last_error}"
        wait = self._retry_at - self._clock()
        if wait > 0.05:
            text += f"; retrying in {wait:.0f} s" if wait >= 1 else "; retrying shortly"
        return text

    async def _shutdown(self) -> None:
        owner, self._owner = self._owner, None
        self._client = None
        if owner is None or owner.done():
            return
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(owner), SHUTDOWN_GRACE_S)
        except (TimeoutError, asyncio.CancelledError, Exception):
            owner.cancel()
            try:
                await owner
            except BaseException:  # already logged; shutting down must not fail
                pass

    async def aclose(self) -> None:
        """End the session (stops a stdio server process)."""
        await self._shutdown()

    # -- calling -----------------------------------------------------------------------

    async def _session(self) -> Any:
        async with self._lock:
            if self._client is not None and not self._down.is_set():
                return self._client
            if self._clock() < self._retry_at:
                raise McpUnavailable(self._unavailable())
            log.info("mcp_reconnecting", server=self.name, reason=self.last_error or "not connected")
            await self.connect()
            return self._client

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        """Call ``tool`` on the server, restarting a dead session first."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = await self._session()
        try:
            result = await client.call_tool(tool, dict(arguments), read_timeout_seconds=self.config.timeout_s)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._mark_down("the connection closed during the call")
                raise McpUnavailable(
                    f"MCP server {self.name!r} went away during the call (it will be restarted on the next call)"
                ) from None
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(f"MCP server {self.name!r} did not answer within {self.config.timeout_s:g} s") from None
            raise ToolError(f"MCP server {self.name!r}: {scrub(exc.message, self.config)}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._mark_down(describe(exc, self.config))
            raise McpUnavailable(f"MCP server {self.name!r} is unreachable: {self.last_error}") from None
        except Exception as exc:
            if "httpx" in type(exc).__module__ or "httpcore" in type(exc).__module__:
                self._mark_down(describe(exc, self.config))
                raise McpUnavailable(f"MCP server {self.name!r} is unreachable: {self.last_error}") from None
            raise
        return to_tool_output(result)

    def _mark_down(self, reason: str) -> None:
        self.last_error = reason
        self._client = None
        self._down.set()
        log.warning("mcp_server_down", server=self.name, reason=reason)
