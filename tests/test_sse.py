"""The SSE decoder over raw bytes, and the chunk stream over a response body.

The decoder must give the same events however the body is cut into reads; the
chunk stream must hand over the chunks before an error, raise what the SDK
raised, and end at ``[DONE]``. End to end through the scripted server:
``test_llm_sse.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from botgateway.model import BODY_READER, ChunkStream, ServerSentEvent, SSEDecoder

STREAM = (
    b": keep-alive\r\n"
    b"\r\n"
    b'data: {"a": 1}\r\n'
    b"\r\n"
    b"event: delta\n"
    b"id: 7\n"
    b"retry: 100\n"
    b'data: {"b":\n'
    b"data:2}\n"
    b"\n"
    b"event: ping\r"
    b"\r"
    b'data: {"c": "\xe2\x80\xa8 and \xc2\x85"}\r'
    b"\r"
    b"data: [DONE]\n"
    b"\n"
)
"""CRLF, LF and CR line ends; a comment; an event with a name, an id, a retry and two data lines;
an event without data; data with U+2028 and U+0085 (line breaks to Unicode, not to SSE)."""

EXPECTED = [
    ServerSentEvent(b'{"a": 1}'),
    ServerSentEvent(b'{"b":\n2}', "delta"),
    ServerSentEvent('{"c": "\u2028 and \u0085"}'.encode(), None),
    ServerSentEvent(b"[DONE]"),
]


def decode(pieces: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return events + decoder.flush()


def test_one_read() -> None:
    assert decode([STREAM]) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_any_cut_gives_the_same_events(size: int) -> None:
    assert decode([STREAM[i : i + size] for i in range(0, len(STREAM), size)]) == EXPECTED


def test_every_single_cut_point() -> None:
    for at in range(len(STREAM) + 1):
        assert decode([STREAM[:at], STREAM[at:]]) == EXPECTED, at


def test_an_event_ended_by_cr_is_dispatched_without_waiting_for_the_next_read() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\r\r") == [ServerSentEvent(b"1")]
    # The LF completing a CRLF split across reads is not an extra (blank) line.
    assert decoder.feed(b"\ndata: 2\r") == []
    assert decoder.feed(b"\n\r\n") == [ServerSentEvent(b"2")]


def test_the_end_of_the_body_dispatches_the_last_event_even_without_its_blank_line() -> None:
    assert decode([b'data: {"a": 1}\n\ndata: {"u": 2}']) == [ServerSentEvent(b'{"a": 1}'), ServerSentEvent(b'{"u": 2}')]
    assert decode([b"data: x\n"]) == [ServerSentEvent(b"x")]
    assert decode([b": only a comment"]) == []


def test_reads_of_one_whole_event_each_keep_what_came_before_them() -> None:
    """The usual read is one whole ``data:`` event; after a name, a CR or half a line it is no different."""
    pieces = [b"data: 1\n\n", b"event: delta\n", b"data: 2\n\n", b"data: 3\r", b"\ndata: 4\n\n", b"data: 5",
              b"\n\n", b"data: 6\n\n"]
    assert decode(pieces) == [ServerSentEvent(b"1"), ServerSentEvent(b"2", "delta"), ServerSentEvent(b"3\n4"),
                              ServerSentEvent(b"5"), ServerSentEvent(b"6")]


def test_field_without_space_and_empty_data_lines() -> None:
    assert decode([b"data:x\ndata\ndata: \n\n"]) == [ServerSentEvent(b"x\n\n")]


# --- the chunk stream -----------------------------------------------------------------------------


def http_library() -> Any:
    """The HTTP library the installed SDK runs on (httpx2 or httpx)."""
    client_class = openai.DefaultAsyncHttpxClient.__mro__[1]
    return sys.modules[client_class.__module__.partition(".")[0]]


class Body(http_library().AsyncByteStream):  # type: ignore[misc]
    """A response body yielding ``pieces`` (raising the exceptions among them); notes whether it was closed."""

    def __init__(self, pieces: list[bytes | Exception]) -> None:
        self.pieces = list(pieces)
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while piece := await self.read():
            yield piece

    async def read(self) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces.pop(0)
        if isinstance(piece, Exception):
            raise piece
        return piece

    async def aclose(self) -> None:
        self.closed = True


def response(pieces: list[bytes | Exception], *, direct: bool = False) -> tuple[Any, Body]:
    """A streaming response of the SDK's HTTP library over ``pieces``; ``direct``: it offers the body reader too."""
    http = http_library()
    body = Body(pieces)
    extensions = {BODY_READER: body.read} if direct else {}
    return http.Response(200, request=http.Request("POST", "http://model.test/v1/chat/completions"), stream=body,
                         extensions=extensions), body


def chunk_stream(pieces: list[bytes | Exception], *, direct: bool = False) -> tuple[ChunkStream, Body]:
    http_response, body = response(pieces, direct=direct)
    return ChunkStream(http_response), body


def data(value: Any) -> bytes:
    return f"data: {json.dumps(value)}\n\n".encode()


async def read_all(stream: ChunkStream) -> list[dict[str, Any]]:
    return [chunk async for chunk in stream]


@pytest.mark.parametrize("direct", [False, True], ids=["through the HTTP library", "through the body reader"])
async def test_chunks_are_dicts_and_done_ends_the_stream(direct: bool) -> None:
    stream, response = chunk_stream([data({"n": 1}) + b": ping\n\n" + data({"n": 2}), b"data: [DONE]\n\n" + data({"n": 3})], direct=direct)
    assert await read_all(stream) == [{"n": 1}, {"n": 2}]
    await stream.close()
    assert response.closed


async def test_the_end_of_the_body_ends_the_stream_without_done() -> None:
    stream, _ = chunk_stream([data({"n": 1}), b'data: {"n": 2}'])
    assert await read_all(stream) == [{"n": 1}, {"n": 2}]


async def test_chunks_before_a_malformed_one_come_first() -> None:
    stream, _ = chunk_stream([data({"n": 1}) + b"data: {not json\n\n" + data({"n": 2})])
    assert await anext(stream) == {"n": 1}
    with pytest.raises(ValueError):
        await anext(stream)


@pytest.mark.parametrize("payload", [b"[1, 2]", b"null", b'"text"'])
async def test_data_that_is_not_an_object_is_malformed(payload: bytes) -> None:
    stream, _ = chunk_stream([b"data: " + payload + b"\n\n"])
    with pytest.raises(ValueError, match="JSON object"):
        await anext(stream)


async def test_an_error_chunk_raises_the_sdks_api_error() -> None:
    error = {"message": "upstream overloaded", "type": "server_error", "code": "overloaded"}
    stream, _ = chunk_stream([data({"n": 1}) + data({"error": error})])
    assert await anext(stream) == {"n": 1}
    with pytest.raises(openai.APIError) as info:
        await anext(stream)
    assert not isinstance(info.value, openai.APIStatusError)
    assert info.value.message == "upstream overloaded" and info.value.body == error
    assert info.value.code == "overloaded"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'event: error\ndata: {"message": "quota exhausted"}\n\n', "quota exhausted"),
        (b'data: {"error": "rate limited"}\n\n', "An error occurred during streaming"),
        (b'event: error\ndata: {"error": {"message": "bad"}}\n\n', "bad"),
    ],
)
async def test_error_events_in_other_shapes(raw: bytes, message: str) -> None:
    stream, _ = chunk_stream([raw])
    with pytest.raises(openai.APIError) as info:
        await anext(stream)
    assert info.value.message == message


async def test_a_falsy_error_key_is_not_an_error() -> None:
    stream, _ = chunk_stream([data({"error": None, "n": 1})])
    assert await read_all(stream) == [{"error": None, "n": 1}]


@pytest.mark.parametrize("direct", [False, True], ids=["through the HTTP library", "through the body reader"])
async def test_transport_failures_are_the_sdks_connection_errors(direct: bool) -> None:
    http = http_library()
    request = http.Request("POST", "http://model.test/v1/chat/completions")
    stream, _ = chunk_stream([data({"n": 1}), http.RemoteProtocolError("peer closed connection", request=request)],
                             direct=direct)
    assert await anext(stream) == {"n": 1}
    with pytest.raises(openai.APIConnectionError) as broken:
        await anext(stream)
    assert not isinstance(broken.value, openai.APITimeoutError)

    stream, _ = chunk_stream([http.ReadTimeout("timed out", request=request)], direct=direct)
    with pytest.raises(openai.APITimeoutError):
        await anext(stream)
