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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Self, TypeAlias

import structlog
from aiohttp import web

__all__ = [
    "Pause",
    "Responder",
    "Script",
    "ScriptedLLMServer",
    "chunk",
    "empty_chunk",
    "finish_chunk",
    "reasoning_chunks",
    "role_chunk",
    "split_text",
    "text_chunks",
    "think_chunks",
    "tool_call_chunks",
    "usage_chunk",
]

log = structlog.get_logger(__name__)

Chunk: TypeAlias = dict[str, Any]
"""One ``chat.completion.chunk`` object (the envelope may be left to the server)."""

ToolCallSpec: TypeAlias = tuple[str | None, str, "Mapping[str, Any] | str"]
"""``(call_id, name, arguments)``; arguments as a dict (sent as JSON) or a raw string (sent verbatim, may be malformed)."""


@dataclass(frozen=True)
class Pause:
    """Inside ``Script.chunks``: wait this long before sending the next chunk."""

    seconds: float
    """How long to wait."""


ScriptItem: TypeAlias = "Chunk | Pause | str"
"""A chunk dict, a :class:`Pause`, or a raw string sent verbatim as one SSE ``data:`` payload."""


# --- chunk helpers ----------------------------------------------------------------


def split_text(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (at least one piece, even for ``""``)."""
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def chunk(delta: Mapping[str, Any] | None = None, *, finish_reason: str | None = None, **choice_extra: Any) -> Chunk:
    """A chunk with one choice carrying ``delta`` (extra keys go on the choice, e.g. Moonshot's ``usage``)."""
    choice: dict[str, Any] = {"index": 0, "delta": dict(delta or {}), "finish_reason": finish_reason}
    choice.update(choice_extra)
    return {"choices": [choice]}


def role_chunk() -> Chunk:
    """The opening chunk most providers send: ``role: assistant`` and empty content."""
    return chunk({"role": "assistant", "content": ""})


def text_chunks(text: str, size: int = 4, *, field: str = "content") -> list[Chunk]:
    """``text`` streamed ``size`` characters per chunk in ``delta[field]``."""
    return [chunk({field: piece}) for piece in split_text(text, size)]


def reasoning_chunks(text: str, size: int = 4, *, field: Literal["reasoning_content", "reasoning"] = "reasoning_content", content_null: bool = True) -> list[Chunk]:
    """Reasoning streamed like DeepSeek/Doubao/Qwen (``reasoning_content``) or Ollama/vLLM/OpenRouter (``reasoning``).

    With ``content_null`` each delta also carries ``"content": null``, as DeepSeek sends.
    """
    out = []
    for piece in split_text(text, size):
        delta: dict[str, Any] = {field: piece}
        if content_null:
            delta["content"] = None
        out.append(chunk(delta))
    return out


def think_chunks(thought: str, answer: str, size: int = 3) -> list[Chunk]:
    """Reasoning inline in content as ``<think>…</think>answer``, cut so the tags split across chunks."""
    return text_chunks(f"<think>{thought}</think>{answer}", size)


def finish_chunk(reason: str = "stop", **choice_extra: Any) -> Chunk:
    """The chunk that closes the choice (empty delta, ``finish_reason``)."""
    return chunk({}, finish_reason=reason, **choice_extra)


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> Chunk:
    """OpenAI's ``include_usage`` chunk: empty ``choices`` and the round's usage."""
    return {"choices": [], "usage": usage_dict(prompt_tokens, completion_tokens)}


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """A ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def empty_chunk() -> Chunk:
    """A chunk with empty ``choices`` (Azure's content-filter preamble, keep-alives)."""
    return {"choices": []}


def tool_call_chunks(
    calls: Sequence[ToolCallSpec],
    *,
    arg_size: int = 8,
    interleave: bool = False,
    index: Literal["normal", "missing", "zero"] = "normal",
    repeat_id: bool = False,
    repeat_name: bool = False,
    name_separate: bool = True,
) -> list[Chunk]:
    """Tool calls fragmented the way providers stream them.

    - ``arg_size``: characters of the arguments JSON per fragment.
    - ``interleave``: fragments of the calls alternate (round robin) instead of one call after another.
    - ``index``: ``normal`` (0, 1, …), ``missing`` (no ``index`` key at all), ``zero`` (every call ``index`` 0, distinct ids).
    - ``repeat_id`` / ``repeat_name``: the id / name is repeated in every fragment (some providers do).
    - ``name_separate``: the first fragment carries id and name with empty arguments (OpenAI style);
      otherwise the first argument piece rides along with the name.
    """
    per_call: list[list[dict[str, Any]]] = []
    for position, (call_id, name, arguments) in enumerate(calls):
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        pieces = split_text(raw, arg_size) if raw else []
        if name_separate:
            pieces = ["", *pieces]
        pieces = pieces or [""]
        fragments = []
        for n, piece in enumerate(pieces):
            fragment: dict[str, Any] = {}
            if index == "normal":
                fragment["index"] = position
            elif index == "zero":
                fragment["index"] = 0
            first = n == 0
            if call_id is not None and (first or repeat_id):
                fragment["id"] = call_id
            if first or repeat_id:
                fragment["type"] = "function"
            function: dict[str, Any] = {"arguments": piece}
            if first or repeat_name:
                function["name"] = name
            fragment["function"] = function
            fragments.append(fragment)
        per_call.append(fragments)

    ordered: list[dict[str, Any]] = []
    if interleave:
        for n in range(max((len(f) for f in per_call), default=0)):
            ordered.extend(fragments[n] for fragments in per_call if n < len(fragments))
    else:
        for fragments in per_call:
            ordered.extend(fragments)
    return [chunk({"tool_calls": [fragment]}) for fragment in ordered]


# --- scripts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """What the server does with one request."""

    chunks: Sequence[ScriptItem] = ()
    """Chunks to stream, in order; :class:`Pause` items wait, strings are sent verbatim as ``data:`` payloads."""
    status: int = 200
    """HTTP status; anything but 200 answers ``error_body`` as JSON instead of a stream."""
    error_body: Mapping[str, Any] | None = None
    """JSON body of an error answer (OpenAI style ``{"error": {...}}``); a generic one when ``None``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After``…)."""
    delay_s: float = 0.0
    """Wait before every chunk (and before the error answer)."""
    disconnect_after: int | None = None
    """Abort the connection after this many chunks (no ``[DONE]``, no clean end of the body)."""
    done: bool = True
    """Send ``data: [DONE]`` at the end."""

    @classmethod
    def text(
        cls,
        answer: str,
        chunk_size: int = 4,
        delay_s: float = 0.0,
        *,
        reasoning: str = "",
        usage: tuple[int, int] | None = (20, 10),
        **options: Any,
    ) -> Script:
        """A plain answer streamed ``chunk_size`` characters at a time, reasoning first if given, usage last."""
        items: list[ScriptItem] = [role_chunk()]
        if reasoning:
            items += reasoning_chunks(reasoning, chunk_size)
        items += text_chunks(answer, chunk_size)
        items.append(finish_chunk("stop"))
        if usage is not None:
            items.append(usage_chunk(*usage))
        return cls(chunks=items, delay_s=delay_s, **options)

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCallSpec],
        *,
        text: str = "",
        reasoning: str = "",
        usage: tuple[int, int] | None = (30, 15),
        delay_s: float = 0.0,
        chunk_size: int = 4,
        **quirks: Any,
    ) -> Script:
        """A round that calls tools (optionally after narration ``text``); ``quirks`` go to :func:`tool_call_chunks`."""
        items: list[ScriptItem] = [role_chunk()]
        if reasoning:
            items += reasoning_chunks(reasoning, chunk_size)
        if text:
            items += text_chunks(text, chunk_size)
        items += tool_call_chunks(calls, **quirks)
        items.append(finish_chunk("tool_calls"))
        if usage is not None:
            items.append(usage_chunk(*usage))
        return cls(chunks=items, delay_s=delay_s)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        type: str | None = None,
        code: str | None = None,
        retry_after: float | str | None = None,
    ) -> Script:
        """An HTTP error with an OpenAI-style body, optionally with ``Retry-After``."""
        defaults = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            403: "permission_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }
        body = {
            "error": {
                "message": message or f"scripted error {status}",
                "type": type or defaults.get(status, "server_error"),
                "param": None,
                "code": code,
            }
        }
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return cls(status=status, error_body=body, headers=headers)

    def with_options(self, **changes: Any) -> Script:
        """A copy with fields changed (``script.with_options(disconnect_after=3)``)."""
        return replace(self, **changes)


Responder: TypeAlias = Callable[[dict[str, Any]], "Script | Awaitable[Script]"]
"""Decides the script for a request body; may be sync or async."""


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
        server = self._site._server  # aiohttp exposes the bound socket only here
        port = server.sockets[0].getsockname()[1] if server and server.sockets else self._port
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
            error_body = script.error_body or {"error": {"message": f"scripted error {script.status}", "type": "server_error", "param": None, "code": None}}
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
                payload = item if isinstance(item, str) else json.dumps(self._envelope(item, completion_id, created, model), ensure_ascii=False)
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
                        call = {"id": fragment.get("id") or f"call_{len(calls) + 1}", "type": "function", "function": {"name": "", "arguments": ""}}
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
