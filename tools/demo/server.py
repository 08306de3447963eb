"""A scripted OpenAI-compatible chat-completions server on loopback.

Tests, the benchmark and the ``demo`` model share it: a real aiohttp server on
``127.0.0.1`` (ephemeral port) that answers ``POST /v1/chat/completions`` by
*playing a script* — a list of SSE chunks with delays, quirks, HTTP errors and
mid-stream disconnects — and records every request body so a test can assert
exactly what the client sent back to the model. ``GET /v1/models`` lists one
model.

A script is chosen per request: queued scripts first (:meth:`ScriptedLLMServer.enqueue`),
then the ``responder`` callable (sync or async) given the request body. With
neither, the server answers HTTP 400 saying so, so a test that forgot a script
fails loudly instead of hanging.

Chunks are plain dicts in the ``chat.completion.chunk`` shape; the server fills
the envelope (``id``, ``object``, ``created``, ``model``) when a chunk leaves it
out. Helpers build the shapes real providers send::

    server = ScriptedLLMServer()
    base_url = await server.start()
    server.enqueue(
        Script.tool_calls([("call_a", "find_host", {"ip": "10.0.0.1"})]),
        Script.text("10.0.0.1 is web-1."),
    )

Quirks are options of the helpers (``tool_call_chunks(..., index="missing")``,
``reasoning_chunks(..., field="reasoning")``, ``think_chunks(...)``), or write
the chunk dicts by hand. :class:`Pause` inside ``chunks`` waits before the next
chunk; ``Script.delay_s`` waits before every chunk.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Self

import structlog
from aiohttp import web

from tools.demo.script import Chunk, Pause, Responder, Script

__all__ = ["ScriptedLLMServer"]

log = structlog.get_logger(__name__)


# --- the server ---------------------------------------------------------------------


class ScriptedLLMServer:
    """A real OpenAI-compatible SSE server on ``127.0.0.1`` that plays :class:`Script`s.

    ``requests`` holds every chat-completions request body in arrival order.
    """

    def __init__(
        self,
        scripts: Iterable[Script] = (),
        responder: Responder | None = None,
        *,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        max_recorded: int | None = 1000,
    ) -> None:
        self._queue: deque[Script] = deque(scripts)
        self._responder = responder
        self.model = model
        """Model name reported by ``/v1/models`` and in chunks that leave ``model`` out."""
        self._host = host
        self._port = port
        self.max_recorded = max_recorded
        """Keep only the newest this many requests (the demo model runs for days); ``None`` keeps all."""
        self.requests: list[dict[str, Any]] = []
        """Every chat-completions request body, in arrival order (the newest ``max_recorded``)."""
        self.request_count = 0
        """Chat requests received in total (not capped)."""
        self.request_headers: list[dict[str, str]] = []
        """The headers of each request in ``requests`` (same order)."""
        self.client_disconnects = 0
        """Streams the client hung up on before the script ended (stop buttons, timeouts, cancellation)."""
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.base_url = ""
        """``http://127.0.0.1:PORT/v1`` once started."""

    # lifecycle

    async def start(self) -> str:
        """Start listening; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        # Long conversations with tool results exceed aiohttp's 1 MiB default body limit.
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # No access log: the benchmark runs hundreds of streams through here.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self._host, self._port, backlog=1024)
        await self._site.start()
        addresses = self._runner.addresses  # the bound address of each listening socket (port 0 picks one)
        port = addresses[0][1] if addresses else self._port
        self.base_url = f"http://{self._host}:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        """Stop listening and drop open streams."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # scripting

    def enqueue(self, *scripts: Script) -> None:
        """Queue scripts; each request takes the next one before the responder is asked."""
        self._queue.extend(scripts)

    async def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        """Wait until at least ``count`` chat requests have arrived (raises ``TimeoutError``)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: self.request_count >= count)

    async def wait_for_disconnects(self, count: int, timeout: float = 10.0) -> None:
        """Wait until the client has hung up on at least ``count`` streams (raises ``TimeoutError``).

        The server notices a hang-up when it next writes, so the script must keep sending.
        """
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: self.client_disconnects >= count)

    # handlers

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "botgateway"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error_response(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object")
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        self.request_count += 1
        number = self.request_count
        if self.max_recorded is not None and len(self.requests) > self.max_recorded:
            del self.requests[0], self.request_headers[0]
        async with self._arrived:
            self._arrived.notify_all()

        try:
            script = await self._next_script(body)
        except Exception as exc:  # a responder bug becomes a clear 500, like a broken upstream
            log.exception("scripted_server.responder_failed")
            return _error_response(500, f"the responder failed: {type(exc).__name__}: {exc}", kind="server_error")
        if script is None:
            return _error_response(400, "ScriptedLLMServer has no script for this request (enqueue one or pass a responder)")

        if script.status != 200:
            if script.delay_s:
                await asyncio.sleep(script.delay_s)
            error_body = script.error_body or {
                "error": {"message": f"scripted error {script.status}", "type": "server_error", "param": None, "code": None}
            }
            return web.json_response(dict(error_body), status=script.status, headers=dict(script.headers))

        if body.get("stream"):
            return await self._stream(request, body, script, number)
        return web.json_response(self._fold(body, script, number), headers=dict(script.headers))

    async def _next_script(self, body: dict[str, Any]) -> Script | None:
        if self._queue:
            return self._queue.popleft()
        if self._responder is None:
            return None
        result = self._responder(body)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _envelope(self, item: Chunk, completion_id: str, created: int, model: str) -> Chunk:
        out = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        out.update(item)
        return out

    async def _stream(self, request: web.Request, body: dict[str, Any], script: Script, number: int) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **script.headers},
        )
        await response.prepare(request)
        completion_id = f"chatcmpl-{number}"
        created = int(time.time())
        model = str(body.get("model") or self.model)
        sent = 0
        try:
            for item in script.chunks:
                if isinstance(item, Pause):
                    await asyncio.sleep(item.seconds)
                    continue
                if script.disconnect_after is not None and sent >= script.disconnect_after:
                    _abort(request)
                    return response
                if script.delay_s:
                    await asyncio.sleep(script.delay_s)
                payload = item if isinstance(item, str) else json.dumps(
                    self._envelope(item, completion_id, created, model), ensure_ascii=False
                )
                await response.write(f"data: {payload}\n\n".encode())
                sent += 1
            if script.disconnect_after is not None:
                _abort(request)
                return response
            if script.done:
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:
            # The client went away (stop button, timeout); nothing left to send.
            self.client_disconnects += 1
            async with self._arrived:
                self._arrived.notify_all()
        return response

    def _fold(self, body: dict[str, Any], script: Script, number: int) -> dict[str, Any]:
        """A non-streaming ``chat.completion`` equivalent to the script's chunks."""
        content, reasoning = "", ""
        calls: list[dict[str, Any]] = []
        by_key: dict[str, dict[str, Any]] = {}
        usage = None
        finish = "stop"
        for item in script.chunks:
            if not isinstance(item, dict):
                continue
            usage = item.get("usage") or usage
            for choice in item.get("choices") or ():
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                for fragment in delta.get("tool_calls") or ():
                    # Same keying as the streaming client: id, else index, else the last call.
                    key = fragment.get("id") or (f"#{fragment['index']}" if "index" in fragment else None)
                    call = by_key.get(key) if key else (calls[-1] if calls else None)
                    if call is None:
                        call = {"id": fragment.get("id") or f"call_{len(calls) + 1}", "type": "function",
                                "function": {"name": "", "arguments": ""}}
                        calls.append(call)
                    for alias in (fragment.get("id"), f"#{fragment['index']}" if "index" in fragment else None):
                        if alias:
                            by_key[alias] = call
                    fn = fragment.get("function") or {}
                    call["function"]["name"] = fn.get("name") or call["function"]["name"]
                    call["function"]["arguments"] += fn.get("arguments") or ""
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        out: dict[str, Any] = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage:
            out["usage"] = usage
        return out


def _abort(request: web.Request) -> None:
    """Drop the TCP connection mid-body, as a crashed upstream or proxy would."""
    transport = request.transport
    if transport is not None:
        transport.abort()


def _error_response(status: int, message: str, *, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": None}},
        status=status,
    )
