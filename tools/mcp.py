"""MCP servers as tools: connect at start-up, offer their tools namespaced, survive their deaths.

Each configured server gets one :class:`McpConnection`. The SDK's ``Client`` is
entered and exited inside a dedicated owner task (anyio scopes must close in
the task that opened them); tool calls from any task go through it. A server
whose transport reaches end-of-stream (the process exited) is marked down at
once and restarted on the next call; a call in flight when it dies fails with
a tool error the model can read. Failed reconnects back off exponentially, and
during the back-off calls fail fast instead of hanging. Nothing here ever
raises out of the gateway: a server that cannot start is logged and reported
in :attr:`McpManager.problems`, the other servers still work, and it is
retried in the background with the same back-off; once it answers, its tools
are added to the live registry (:meth:`McpManager.attach`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import anyio
import structlog

from botgateway.config import McpServerConfig
from botgateway.logs import redact_text
from botgateway.tooling import Tool, ToolContext, ToolError, ToolOutput

log = structlog.get_logger(__name__)

NAME_LIMIT = 64
"""Longest tool name the model APIs accept."""
SEPARATOR = "__"
"""Between the server's name and the tool's name."""
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def namespaced_name(server: str, tool: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """``server__tool`` made of ``[a-zA-Z0-9_-]``, at most 64 characters, not in ``taken``.

    Sanitizing or shortening could make two names collide; a short hash of
    the original name keeps them apart.
    """
    base = f"{server}{SEPARATOR}{_INVALID.sub('_', tool)}"
    if len(base) <= NAME_LIMIT and base not in taken:
        return base
    digest = hashlib.sha1(tool.encode()).hexdigest()[:8]
    return f"{base[: NAME_LIMIT - len(digest) - 1]}_{digest}"


def allowed(tool: str, config: McpServerConfig) -> bool:
    """Whether the allow/deny lists (exact names or shell patterns) let ``tool`` through."""
    if config.allow and not any(fnmatch.fnmatchcase(tool, p) for p in config.allow):
        return False
    return not any(fnmatch.fnmatchcase(tool, p) for p in config.deny)


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnect attempts after failures."""

    initial_s: float = 1.0
    """Wait after the first failed reconnect."""
    max_s: float = 60.0
    """Longest wait."""

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (0 after none)."""
        if failures <= 0:
            return 0.0
        return min(self.max_s, self.initial_s * 2 ** (failures - 1))


class McpUnavailable(ToolError):
    """The server cannot be reached right now."""


# --- the transport watch --------------------------------------------------------------


class _WatchedRead:
    """A read stream that reports end-of-stream (the server went away) through a callback."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    def __getattr__(self, name: str) -> Any:  # last_context and friends
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_eof()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class _WatchedTransport:
    """Wraps an SDK transport so its read side is watched."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._on_eof), write

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


# --- one server ---------------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class McpConnection:
    """One MCP server: its session, its tools, its health."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        connect_timeout_s: float = 15.0,
        backoff: Backoff = Backoff(),
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
        return self.backoff.delay(self._failures)

    async def wait_down(self) -> None:
        """Return once the current session has ended (the server exited or was closed)."""
        await self._down.wait()

    # -- connecting ------------------------------------------------------------------

    def _transport(self, stack: AsyncExitStack) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if self.config.command:
            env = {key: value.get_secret_value() for key, value in self.config.env.items()}
            params = StdioServerParameters(command=self.config.command, args=list(self.config.args), env=env or None)
            return stdio_client(params)
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {k: v.get_secret_value() for k, v in self.config.headers.items()}
        http = create_mcp_http_client(headers=headers or None)
        stack.push_async_callback(http.aclose)
        return streamable_http_client(self.config.url or "", http_client=http)

    async def _own(self, ready: asyncio.Future[Any], stop: asyncio.Event, down: asyncio.Event) -> None:
        """Hold the session open in this task until asked to stop or the server goes away."""
        from mcp import Client

        eof = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                transport = _WatchedTransport(self._transport(stack), eof.set)
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
                ready.set_exception(_leaf(exc) if isinstance(_leaf(exc), Exception) else RuntimeError(str(exc)))
            else:
                log.warning("mcp_session_ended", server=self.name, error=self._describe(_leaf(exc)))
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
            self._record_failure(self._describe(exc))
            raise McpUnavailable(self._unavailable()) from None
        self._failures = 0
        self.last_error = ""
        self.connects += 1
        log.info("mcp_connected", server=self.name, tools=len(self.tools), connects=self.connects)

    def _record_failure(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        self._retry_at = self._clock() + self.backoff.delay(self._failures)
        log.warning("mcp_connect_failed", server=self.name, reason=reason, failures=self._failures)

    def _unavailable(self) -> str:
        text = f"MCP server {self.name!r} is unavailable: {self.last_error}"
        wait = self._retry_at - self._clock()
        if wait > 0.05:
            text += f"; retrying in {wait:.0f} s" if wait >= 1 else "; retrying shortly"
        return text

    def _describe(self, exc: BaseException) -> str:
        exc = _leaf(exc)
        code = getattr(exc, "code", None)
        message = str(getattr(exc, "message", "") or exc) or type(exc).__name__
        if isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and "No such file" in message):
            return f"command not found: {self.config.command}"
        if code is not None and isinstance(code, int):
            text = f"{message} (code {code})"
        elif type(exc).__name__ not in message:
            text = f"{type(exc).__name__}: {message}"
        else:
            text = message
        return self._scrub(text)

    def _scrub(self, text: str) -> str:
        """Keep header and env secrets and URL query strings out of messages."""
        secrets = [v.get_secret_value() for v in self.config.headers.values()]
        # Env holds flags and paths as well as tokens; masking very short values would only mangle the text.
        secrets += [v.get_secret_value() for v in self.config.env.values() if len(v.get_secret_value()) >= 6]
        text = redact_text(text, sorted(secrets, key=len, reverse=True))  # a secret inside a longer one: longest first
        if self.config.url and "?" in self.config.url:
            text = text.replace(self.config.url, self.config.url.split("?", 1)[0] + "?…")
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:299] + "…"

    async def _shutdown(self) -> None:
        owner, self._owner = self._owner, None
        self._client = None
        if owner is None or owner.done():
            return
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(owner), 5.0)
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
            raise ToolError(f"MCP server {self.name!r}: {self._scrub(exc.message)}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._mark_down(self._describe(exc))
            raise McpUnavailable(f"MCP server {self.name!r} is unreachable: {self.last_error}") from None
        except Exception as exc:
            if "httpx" in type(exc).__module__ or "httpcore" in type(exc).__module__:
                self._mark_down(self._describe(exc))
                raise McpUnavailable(f"MCP server {self.name!r} is unreachable: {self.last_error}") from None
            raise
        return to_tool_output(result)

    def _mark_down(self, reason: str) -> None:
        self.last_error = reason
        self._client = None
        self._down.set()
        log.warning("mcp_server_down", server=self.name, reason=reason)


def to_tool_output(result: Any) -> ToolOutput:
    """A ``CallToolResult`` as text for the model; ``isError`` becomes a :class:`ToolError`."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[binary resource: {block.resource.uri}]")
    text = "\n".join(parts).strip()
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "done (no output)")
    return ToolOutput(content=text or "(no output)", summary=first if len(first) <= 100 else first[:99] + "…")


# --- tools and the manager -------------------------------------------------------------------


class McpTool:
    """One MCP server tool, as a :class:`~botgateway.tooling.Tool`."""

    def __init__(self, connection: McpConnection, definition: Any, name: str) -> None:
        self.connection = connection
        self.remote_name: str = definition.name
        self.name = name
        description = definition.description or getattr(definition, "title", None) or definition.name
        self.description = f"[MCP server {connection.name}] {description}"
        schema = dict(definition.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters: Mapping[str, Any] = schema
        self.timeout_s: float | None = connection.config.timeout_s

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the remote tool."""
        return await self.connection.call(self.remote_name, arguments)


class ToolSink(Protocol):
    """Where tools of a server that came up late are offered (a :class:`~botgateway.tooling.ToolRegistry`)."""

    def add(self, tool: Tool) -> None:
        """Offer ``tool``; one of the same name is replaced."""
        ...


class McpManager:
    """Every configured MCP server; :meth:`start` never raises for a bad server.

    A server that fails at start-up is retried in the background with the
    connection's back-off until it comes up or :meth:`aclose` is called; its
    tools are then offered to every sink given to :meth:`attach`.
    """

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        *,
        connect_timeout_s: float = 15.0,
        backoff: Backoff = Backoff(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connections = [
            McpConnection(c, connect_timeout_s=connect_timeout_s, backoff=backoff, clock=clock) for c in configs
        ]
        self.tools: list[McpTool] = []
        """Every tool offered so far: those of start-up, then those of servers that came up late."""
        self.problems: list[str] = []
        """One line per server that failed to start (kept after a late start, as the start-up record)."""
        self._taken: set[str] = set()
        self._sinks: list[ToolSink] = []
        self._retries: dict[str, asyncio.Task[None]] = {}

    @property
    def retrying(self) -> list[str]:
        """Names of the servers that failed at start-up and are still being retried."""
        return [name for name, task in self._retries.items() if not task.done()]

    async def start(self) -> list[McpTool]:
        """Connect to every server concurrently and build their tools; retry the failed ones in the background."""
        results = await asyncio.gather(*(self._start_one(c) for c in self.connections))
        for connection, ok in zip(self.connections, results, strict=True):
            if ok:
                self._build_tools(connection)
            else:
                self._retries[connection.name] = asyncio.create_task(
                    self._retry_start(connection), name=f"mcp-retry-{connection.name}"
                )
        return list(self.tools)

    async def _start_one(self, connection: McpConnection) -> bool:
        try:
            await connection.connect()
            return True
        except McpUnavailable:
            self.problems.append(f"MCP server {connection.name!r} is unavailable: {connection.last_error}")
            log.error(
                "mcp_start_failed",
                server=connection.name,
                reason=connection.last_error,
                retry_in_s=connection.retry_delay_s,
            )
            return False

    def _build_tools(self, connection: McpConnection) -> list[McpTool]:
        built = []
        for definition in connection.tools:
            if not allowed(definition.name, connection.config):
                continue
            name = namespaced_name(connection.name, definition.name, self._taken)
            self._taken.add(name)
            built.append(McpTool(connection, definition, name))
        self.tools.extend(built)
        return built

    async def _retry_start(self, connection: McpConnection) -> None:
        """Reconnect a server that failed at start-up, backing off, until it answers."""
        # No attempt limit: a remote server may be down for hours, and the back-off caps the cost
        # at one attempt per ``backoff.max_s``; aclose() cancels this task.
        while True:
            await asyncio.sleep(connection.retry_delay_s)
            try:
                async with connection.lock:
                    await connection.connect()
            except McpUnavailable:
                continue  # connect() logged it and counted the failure, which lengthens the next wait
            except Exception:  # a bug of ours must not end the retries silently, nor the gateway
                log.exception("mcp_retry_crashed", server=connection.name)
                continue
            break
        tools = self._build_tools(connection)
        log.info("mcp.connected_late", server=connection.name, tools=[t.name for t in tools])
        for sink in self._sinks:
            self._offer(sink, tools)

    def _offer(self, sink: ToolSink, tools: Sequence[McpTool]) -> None:
        for tool in tools:
            try:
                sink.add(tool)
            except Exception:  # one broken sink must not keep the tools from the others
                log.exception("mcp_offer_failed", tool=tool.name)

    def attach(self, sink: ToolSink) -> None:
        """Offer every tool to ``sink`` now, and tools of servers that come up later as they do."""
        self._sinks.append(sink)
        self._offer(sink, self.tools)

    def connection(self, name: str) -> McpConnection | None:
        """The connection of server ``name``."""
        return next((c for c in self.connections if c.name == name), None)

    async def aclose(self) -> None:
        """Stop the start-up retries, then close every session."""
        retries = list(self._retries.values())
        for task in retries:
            task.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
        await asyncio.gather(*(c.aclose() for c in self.connections), return_exceptions=True)
