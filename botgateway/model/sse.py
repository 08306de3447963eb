"""The chunks of a streamed chat completion, read from the raw SSE body as plain dicts.

The ``openai`` SDK builds a pydantic object per chunk, which costs far more CPU
than the rest of a chunk's journey; here the SDK still sends the request (auth,
base URL, headers, timeouts, retries, ``APIStatusError`` for HTTP ≥ 400), and
only the body is read by hand: :class:`SSEDecoder` splits it into events and
:class:`ChunkStream` parses each event's data with ``orjson``. When the
transport offers a direct reader of the body (:data:`BODY_READER`, see
:mod:`botgateway.model.transport`), each read goes straight to it rather than
through the HTTP library's chain of async iterators, which at thousands of
reads a second is a large part of a read's cost.

What the stream may contain, per the SSE spec and what providers send:

- ``data: [DONE]`` ends the stream; so does the end of the body;
- lines starting with ``:`` are comments (keep-alives) and are skipped, as are
  ``id:``/``retry:`` lines and events without data;
- a multi-line ``data`` field is joined with ``"\\n"``;
- a chunk whose JSON has an ``error`` key, or an ``event: error``, is an error
  mid-stream: :class:`openai.APIError` with the provider's message, as the SDK
  raises it;
- data that is not a JSON object raises :class:`ValueError`, as the SDK did;
- a failure reading the body is :class:`openai.APIConnectionError`
  (:class:`openai.APITimeoutError` for a read timeout), as the SDK maps it.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import openai
import orjson

__all__ = ["BODY_READER", "ChunkStream", "SSEDecoder", "ServerSentEvent"]

BODY_READER = "botgateway.body_reader"
"""A response extension: ``async () -> bytes``, the next piece of the body as it arrives (``b""`` at its end).

It raises the HTTP library's errors, as reading the body through the library would."""

_COLON = 0x3A
"""``:`` as a byte: a line starting with it is a comment."""
_CR = 0x0D
"""Carriage return as a byte."""
_DRAIN_S = 0.1
"""How long to read past ``[DONE]`` so an HTTP/1.1 connection can go back to the pool."""


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event."""

    data: bytes
    """The data lines joined with ``\\n`` (never empty: events without data are not dispatched)."""
    event: str | None = None
    """The ``event:`` name, if any."""


class SSEDecoder:
    """Incremental SSE parser over raw bytes: feed what the body yields, get whole events.

    Lines end at CR, LF or CRLF and only those: JSON may carry U+2028 or other
    Unicode line breaks unescaped, which text-mode line splitting would cut at.
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the start of a line not ended yet
        self._skip_lf = False  # the last read ended with CR: an LF opening the next one is its CRLF
        self._data: list[bytes] = []
        self._event: str | None = None

    def feed(self, raw: bytes) -> list[ServerSentEvent]:
        """Decode ``raw``; returns the events it completed (a partial line waits for the next read)."""
        if (
            raw.startswith(b"data: ")
            and raw.find(b"\n") == len(raw) - 2
            and raw.endswith(b"\n\n")
            and not (self._pending or self._data or self._skip_lf or self._event is not None)
            and b"\r" not in raw
        ):
            # The common read: exactly one whole event of one data line, nothing pending before it.
            return [ServerSentEvent(raw[6:-2])]
        if self._skip_lf:
            self._skip_lf = False
            if raw[:1] == b"\n":
                raw = raw[1:]
        cut = max(raw.rfind(b"\n"), raw.rfind(b"\r"))
        if cut < 0:
            if raw:
                self._pending.append(raw)  # joined once its line ends, not copied per read
            return []
        self._skip_lf = cut == len(raw) - 1 and raw[cut] == _CR
        head = raw[: cut + 1]
        if self._pending:
            self._pending.append(head)
            head = b"".join(self._pending)
        self._pending = [raw[cut + 1 :]] if cut + 1 < len(raw) else []
        return self._lines(head.splitlines())

    def flush(self) -> list[ServerSentEvent]:
        """At the end of the body: the last line, and the pending event even without its blank line.

        The spec drops an unterminated event, but a body that ended cleanly is
        complete (a cut connection fails instead of ending), so its last chunk is real.
        """
        lines = [*b"".join(self._pending).splitlines(), b""]
        self._pending = []
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                    events.append(ServerSentEvent(data, self._event))
                    self._data = []
                self._event = None
                continue
            if line[0] == _COLON:
                continue  # a comment: keep-alive
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            # id and retry matter to reconnecting EventSource clients, not to one completion.
        return events


class ChunkStream:
    """The chunks of one streamed chat completion as plain dicts; iterate it, then :meth:`close` it.

    Args:
        response: The HTTP response of the SDK's request (``client.post(..., cast_to=<its Response>, stream=True)``),
            its body not read yet. :meth:`close` closes it.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._body: AsyncGenerator[bytes, None] | None = None
        self._read_body: Callable[[], Awaitable[bytes]] = response.extensions.get(BODY_READER) or self._next_piece
        self._decoder = SSEDecoder()
        self._events: deque[ServerSentEvent] = deque()
        self._done = False  # a [DONE] came: the answer is complete
        self._eof = False  # the body's end was read

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        """The next chunk; events are parsed one at a time so an error comes after the chunks before it."""
        while True:
            if self._events:
                chunk = self._parse(self._events.popleft())
                if chunk is not None:
                    return chunk
                raise StopAsyncIteration  # [DONE]: what follows it is read by close()
            if self._done or self._eof:
                raise StopAsyncIteration
            await self._read()

    def next_buffered(self) -> dict[str, Any] | None:
        """The next chunk if it was already received, parsed now without waiting for the network; else ``None``.

        A busy process reads several chunks of a stream at once; taking them
        together lets the caller pass them on as one update instead of one
        event each. ``None`` before ``[DONE]`` too (:meth:`__anext__` ends the
        stream on it); raises, as :meth:`__anext__` would, on an error chunk.
        """
        while self._events and not self._events[0].data.startswith(b"[DONE]"):
            chunk = self._parse(self._events.popleft())
            if chunk is not None:
                return chunk
        return None

    async def close(self) -> None:
        """Release the connection: after ``[DONE]``, once the rest of the body is read (briefly), for reuse;
        before it, by hanging up, so the provider stops generating."""
        try:
            if self._done and not self._eof:
                await self._drain()
            if self._body is not None:
                await self._body.aclose()
        finally:
            await self._response.aclose()

    async def _next_piece(self) -> bytes:
        """The next piece of the body through the HTTP library (``b""`` at its end)."""
        if self._body is None:
            self._body = self._response.aiter_bytes()
        return await anext(self._body, b"")

    async def _read(self) -> None:
        """Read the next piece of the body into events; at its end, flush the decoder."""
        try:
            raw = await self._read_body()
        except Exception as exc:
            # Only the transport runs here; the SDK too maps any failure while sending to a connection error.
            raise self._transport_error(exc) from exc
        if not raw:
            self._eof = True
            self._events.extend(self._decoder.flush())
        else:
            self._events.extend(self._decoder.feed(raw))

    def _parse(self, event: ServerSentEvent) -> dict[str, Any] | None:
        """The chunk in ``event``; ``None`` at ``[DONE]``; raises on an error or malformed data."""
        if event.data.startswith(b"[DONE]"):
            self._done = True
            self._events.clear()
            return None
        value = orjson.loads(event.data)  # orjson.JSONDecodeError is a ValueError
        if not isinstance(value, dict):
            raise ValueError(f"a stream chunk must be a JSON object, not {type(value).__name__}")
        if value.get("error") or event.event == "error":
            raise self._stream_error(value)
        return value

    def _stream_error(self, value: dict[str, Any]) -> openai.APIError:
        """The error the SDK raises for an error chunk: the provider's message, the error object as ``body``."""
        body = value.get("error") or value
        message = body.get("message") if isinstance(body, dict) else None
        if not message or not isinstance(message, str):
            message = "An error occurred during streaming"
        return openai.APIError(message, self._response.request, body=body)

    def _transport_error(self, exc: Exception) -> openai.APIConnectionError:
        """A failure reading the body, as the SDK maps it: a read timeout or a broken connection."""
        http_response = self._response
        # The HTTP library is httpx2 or httpx, depending on the SDK's version: ask the one in use.
        http = sys.modules.get(type(http_response).__module__.partition(".")[0])
        timeout = getattr(http, "TimeoutException", None)
        if isinstance(timeout, type) and isinstance(exc, timeout):
            return openai.APITimeoutError(request=http_response.request)
        return openai.APIConnectionError(request=http_response.request)

    async def _drain(self) -> None:
        """Read what follows ``[DONE]`` (normally just the body's end) so the connection can be reused."""
        try:
            async with asyncio.timeout(_DRAIN_S):
                while await self._read_body():
                    pass
                self._eof = True
        except Exception:  # the answer is complete; a failing tail changes nothing
            pass
