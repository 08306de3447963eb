"""LLMClient reading the raw SSE body, end to end against the scripted server.

A raw string in a script is sent as ``data: <string>\\n\\n``, so a string with
line breaks in it puts any SSE the test needs on the wire: comments, events,
multi-line data.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from botgateway.events import Usage
from botgateway.model import (
    BODY_READER,
    AiohttpTransport,
    AssembledRound,
    LLMClient,
    LLMInterrupted,
    LLMUnavailable,
    ReasoningPart,
    TextPart,
    ToolCallFragment,
    merge_parts,
    sdk_http,
)
from tests.fakes.llm import llm_config
from tools.demo.script import Script, chunk, finish_chunk, role_chunk, text_chunks, usage_chunk
from tools.demo.server import ScriptedLLMServer

MESSAGES = [{"role": "user", "content": "which host is 10.0.0.1?"}]


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as srv:
        yield srv


@pytest.fixture
async def client(server: ScriptedLLMServer) -> AsyncIterator[LLMClient]:
    llm = LLMClient(llm_config(server.base_url), backoff_base_s=0.01)
    yield llm
    await llm.aclose()


async def collect(client: LLMClient) -> tuple[str, AssembledRound]:
    shown: list[str] = []
    async for item in client.stream(MESSAGES):
        if isinstance(item, AssembledRound):
            return "".join(shown), item
        if isinstance(item, TextPart):
            shown.append(item.text)
    raise AssertionError("the stream must end with the assembled round")


def raw(value: dict[str, Any]) -> str:
    return json.dumps(value)


def then(*lines: str) -> str:
    """Raw SSE lines sent after a blank line, i.e. after the event the server opened with ``data: ``."""
    return "{}\n\n" + "\n".join(lines)


async def test_comments_and_keep_alives_are_skipped(server: ScriptedLLMServer, client: LLMClient) -> None:
    keep_alive = then(": OPENROUTER PROCESSING", "", ": keep-alive")
    chunks = [keep_alive, role_chunk(), keep_alive, *text_chunks("web-1 is up"), keep_alive, finish_chunk(), usage_chunk(3, 4)]
    server.enqueue(Script(chunks=chunks))
    shown, result = await collect(client)
    assert shown == result.text == "web-1 is up"
    assert result.usage == Usage(prompt_tokens=3, completion_tokens=4)
    assert result.finish_reason == "stop"


async def test_multi_line_data_is_joined(server: ScriptedLLMServer, client: LLMClient) -> None:
    # One chunk's JSON over three data lines (legal SSE; some proxies pretty-print).
    multi_line = '{"choices": [{"index": 0,\ndata: "delta": {"content": "two\\nlines"},\ndata: "finish_reason": null}]}'
    server.enqueue(Script(chunks=[role_chunk(), multi_line, *text_chunks(" end"), finish_chunk()]))
    shown, result = await collect(client)
    assert shown == result.text == "two\nlines end"


async def test_an_error_data_line_mid_answer_keeps_the_partial_answer(server: ScriptedLLMServer, client: LLMClient) -> None:
    error = raw({"error": {"message": "upstream overloaded", "type": "server_error"}})
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("Half an "), error, *text_chunks("never")]))
    with pytest.raises(LLMInterrupted) as info:
        await collect(client)
    assert info.value.partial_text == "Half an "
    assert info.value.message == "The model service stopped the answer with an error: upstream overloaded"
    assert len(server.requests) == 1


async def test_an_error_event_mid_answer_keeps_the_partial_answer(server: ScriptedLLMServer, client: LLMClient) -> None:
    error_event = then("event: error", 'data: {"message": "quota exhausted"}')
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("Half an "), error_event]))
    with pytest.raises(LLMInterrupted) as info:
        await collect(client)
    assert info.value.partial_text == "Half an " and "quota exhausted" in info.value.message


async def test_an_error_data_line_before_the_first_token_is_a_plain_error(server: ScriptedLLMServer, client: LLMClient) -> None:
    error = raw({"error": {"message": "model is loading", "type": "server_error"}})
    server.enqueue(Script(chunks=[role_chunk(), error]), Script.text("unused"))
    with pytest.raises(LLMUnavailable) as info:
        await collect(client)
    assert info.value.message == "The model service reported an error: model is loading"
    assert len(server.requests) == 1  # not retried, as when the SDK raised it


async def test_malformed_json_mid_answer_keeps_the_partial_answer(server: ScriptedLLMServer, client: LLMClient) -> None:
    cut_short = '{"choices": [{"index": 0, "delta": {"content": "web'
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("The host is "), cut_short, *text_chunks("never")]))
    with pytest.raises(LLMInterrupted) as info:
        await collect(client)
    assert info.value.partial_text == "The host is "
    assert info.value.message == (
        "The model service sent a malformed chunk mid-answer; the partial answer is kept. Ask again to retry"
    )


async def test_done_ends_the_answer_even_if_more_follows(server: ScriptedLLMServer, client: LLMClient) -> None:
    after_done = "[DONE]\n\ndata: " + raw(chunk({"content": " and more"}))
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("all"), after_done]))
    shown, result = await collect(client)
    assert shown == result.text == "all"


async def test_a_stream_without_done_ends_with_the_body(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("no done marker"), finish_chunk()], done=False))
    shown, result = await collect(client)
    assert shown == result.text == "no done marker"


async def test_unicode_line_separators_inside_the_json_stay_in_the_text(server: ScriptedLLMServer, client: LLMClient) -> None:
    # Sent unescaped (ensure_ascii=False): a text-mode line splitter would cut the chunk at them.
    server.enqueue(Script(chunks=[role_chunk(), chunk({"content": "a\u2028b\u0085c\x1cd"}), finish_chunk()]))
    shown, result = await collect(client)
    assert shown == result.text == "a\u2028b\u0085c\x1cd"



async def test_chunks_read_together_go_up_as_one_update_in_order(server: ScriptedLLMServer, client: LLMClient) -> None:
    # One write carrying many events, as a busy process reads them: one part per kind, in stream order.
    together = "\n\ndata: ".join(
        [raw(chunk({"reasoning_content": w})) for w in ("look", "ing ", "up")]
        + [raw(chunk({"content": w})) for w in ("web-1 ", "is ", "up ", "in ", "cn-hangzhou")]
    )
    server.enqueue(Script(chunks=[role_chunk(), chunk({"content": "Sure. "}), together, finish_chunk()]))
    parts = [item async for item in client.stream(MESSAGES) if not isinstance(item, AssembledRound)]
    assert parts == [TextPart("Sure. "), ReasoningPart("looking up"), TextPart("web-1 is up in cn-hangzhou")]


def test_merge_parts_joins_runs_and_keeps_tool_fragments_between_them() -> None:
    fragment = ToolCallFragment(position=0, call_id="c1", name="find_host", arguments_delta="{")
    merged = merge_parts([TextPart("a"), TextPart("b"), fragment, TextPart("c"), ReasoningPart("x"), ReasoningPart("y")])
    assert merged == [TextPart("ab"), fragment, TextPart("c"), ReasoningPart("xy")]


async def _compressed_sse(request: web.Request) -> web.StreamResponse:
    """A provider (or a proxy in front of it) that gzips its event stream."""
    body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in [
        chunk({"role": "assistant", "content": ""}), chunk({"content": "prod-db-01 "}), chunk({"content": "is it"}),
        finish_chunk("stop"),
    ]) + b"data: [DONE]\n\n"
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
    await response.prepare(request)
    packed = gzip.compress(body)
    for at in range(0, len(packed), 16):  # in pieces, as a stream arrives
        await response.write(packed[at:at + 16])
    await response.write_eof()
    return response


async def test_a_gzipped_event_stream_is_decoded() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _compressed_sse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    llm = LLMClient(llm_config(f"http://127.0.0.1:{port}/v1"), backoff_base_s=0.01)
    try:
        shown, final = await collect(llm)
    finally:
        await llm.aclose()
        await runner.cleanup()
    assert shown == final.text == "prod-db-01 is it"


async def test_an_uncompressed_body_is_offered_to_the_chunk_stream_directly(server: ScriptedLLMServer) -> None:
    server.enqueue(Script(text_chunks("ok")))
    transport = AiohttpTransport()
    http = sdk_http()
    try:
        request = http.Request("POST", f"{server.base_url}/chat/completions", json={"model": "m", "stream": True,
                                                                                     "messages": MESSAGES})
        response = await transport.handle_async_request(request)
        reader = response.extensions[BODY_READER]
        body = b""
        while piece := await reader():
            body += piece
        await response.aclose()
    finally:
        await transport.aclose()
    assert b'"ok"' in body and body.rstrip().endswith(b"data: [DONE]")
