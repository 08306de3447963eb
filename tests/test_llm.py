"""LLMClient through the real ``openai`` SDK against the scripted SSE server.

Every provider quirk and every failure mode: retries before the first token
(429 with Retry-After, 5xx, dropped connections), never after it; timeouts;
plain-words errors that never carry the API key.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botgateway.events import Usage
from botgateway.model import (
    AssembledRound,
    LLMClient,
    LLMContextTooLong,
    LLMInterrupted,
    LLMRefused,
    LLMUnavailable,
    ReasoningPart,
    TextPart,
    ToolCallFragment,
)
from tests.fakes.llm import TEST_API_KEY, llm_config
from tools.demo.script import (
    Pause,
    Script,
    chunk,
    empty_chunk,
    finish_chunk,
    reasoning_chunks,
    role_chunk,
    text_chunks,
    think_chunks,
    usage_chunk,
)
from tools.demo.server import ScriptedLLMServer

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "which host is 10.0.0.1?"}]


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as srv:
        yield srv


async def collect(client: LLMClient, **kwargs: Any) -> tuple[list[Any], AssembledRound]:
    parts: list[Any] = []
    final: AssembledRound | None = None
    async for item in client.stream(MESSAGES, **kwargs):
        if isinstance(item, AssembledRound):
            final = item
        else:
            parts.append(item)
    assert final is not None, "the stream must end with the assembled round"
    return parts, final


def client_for(server: ScriptedLLMServer, **overrides: Any) -> LLMClient:
    return LLMClient(llm_config(server.base_url, **overrides), backoff_base_s=0.01)


@pytest.fixture
async def client(server: ScriptedLLMServer) -> AsyncIterator[LLMClient]:
    """A client of ``server`` with the test defaults (quick timeouts and backoff)."""
    llm = client_for(server)
    yield llm
    await llm.aclose()


# --- the request ---------------------------------------------------------------------------


async def test_request_carries_stream_options_tools_sampling_and_extra_body(server: ScriptedLLMServer) -> None:
    server.enqueue(Script.text("web-1", usage=(11, 2)))
    client = client_for(server, temperature=0.2, top_p=0.9, max_tokens=256, extra_body={"enable_thinking": True})
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]
    try:
        parts, result = await collect(client, tools=tools)
    finally:
        await client.aclose()
    body = server.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "scripted-model"
    assert body["messages"] == MESSAGES
    assert body["tools"] == tools
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and body["max_tokens"] == 256
    assert body["enable_thinking"] is True
    assert server.request_headers[0]["Authorization"] == f"Bearer {TEST_API_KEY}"
    assert "".join(p.text for p in parts if isinstance(p, TextPart)) == "web-1"
    assert result.text == "web-1"
    assert result.usage == Usage(prompt_tokens=11, completion_tokens=2)


# --- quirks end to end ------------------------------------------------------------------------

QUIRK_SCRIPTS = {
    "deepseek_reasoning_content": [role_chunk(), *reasoning_chunks("thinking hard", 3), *text_chunks("answer", 2), finish_chunk(), usage_chunk(5, 6)],
    "ollama_reasoning": [role_chunk(), *reasoning_chunks("thinking hard", 3, field="reasoning", content_null=False), *text_chunks("answer", 2), finish_chunk()],
    "inline_think_split": [role_chunk(), *think_chunks("thinking hard", "answer", size=3), finish_chunk(), usage_chunk(5, 6)],
    "empty_choices_and_null_tool_calls": [
        empty_chunk(),
        chunk({"role": "assistant", "content": "", "tool_calls": None}),
        empty_chunk(),
        *[chunk({"content": p, "reasoning_content": None, "tool_calls": None}) for p in ("ans", "wer")],
        finish_chunk(),
    ],
}


@pytest.mark.parametrize("quirk", sorted(QUIRK_SCRIPTS))
async def test_text_quirks_through_the_sdk(server: ScriptedLLMServer, client: LLMClient, quirk: str) -> None:
    server.enqueue(Script(chunks=QUIRK_SCRIPTS[quirk]))
    parts, result = await collect(client)
    assert result.text == "answer"
    assert "".join(p.text for p in parts if isinstance(p, TextPart)) == "answer"
    if quirk != "empty_choices_and_null_tool_calls":
        assert result.reasoning == "thinking hard"
        assert "".join(p.text for p in parts if isinstance(p, ReasoningPart)) == "thinking hard"


CALLS = [("call_a", "search_ecs_by_ip", {"ip": "10.0.0.1"}), ("call_b", "search_cvm_by_ip", {"ip": "10.0.0.1", "region": "ap-guangzhou"})]


@pytest.mark.parametrize(
    "quirks",
    [
        {"interleave": True},
        {"interleave": True, "arg_size": 1},
        {"index": "missing"},
        {"index": "missing", "interleave": True, "repeat_id": True},
        {"index": "zero"},
        {"repeat_id": True, "repeat_name": True, "interleave": True},
        {"index": "zero", "repeat_id": True, "repeat_name": True, "name_separate": False},
    ],
    ids=["interleaved", "one-char-fragments", "no-index", "no-index-interleaved-ids", "all-index-0", "repeated-id-name", "index0-repeated-inline"],
)
async def test_tool_call_quirks_through_the_sdk(server: ScriptedLLMServer, client: LLMClient, quirks: dict[str, Any]) -> None:
    server.enqueue(Script.tool_calls(CALLS, text="Checking both clouds.", **quirks))
    parts, result = await collect(client)
    assert [(c.call_id, c.name, c.arguments) for c in result.tool_calls] == [(i, n, a) for i, n, a in CALLS]
    assert all(c.parse_error is None for c in result.tool_calls)
    assert result.text == "Checking both clouds."
    assert any(isinstance(p, ToolCallFragment) for p in parts)
    assert result.usage == Usage(prompt_tokens=30, completion_tokens=15)


async def test_usage_never_reported(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.text("no usage here", usage=None))
    _, result = await collect(client)
    assert result.usage is None
    assert result.text == "no usage here"


# --- retries before the first token -----------------------------------------------------------


async def test_429_with_retry_after_is_retried_after_waiting(server: ScriptedLLMServer) -> None:
    server.enqueue(Script.error(429, "Rate limit reached", retry_after="0.4"), Script.text("ok"))
    client = client_for(server)
    started = time.monotonic()
    try:
        _, result = await collect(client)
    finally:
        await client.aclose()
    assert result.text == "ok"
    assert len(server.requests) == 2
    # Retry-After was honoured: the retry did not come before the server allowed it.
    assert time.monotonic() - started >= 0.35


async def test_retry_after_is_capped_by_retry_max_wait(server: ScriptedLLMServer) -> None:
    server.enqueue(Script.error(429, "slow down", retry_after="120"), Script.text("ok"))
    client = client_for(server, retry_max_wait_s=0.1)
    try:
        _, result = await asyncio.wait_for(collect(client), timeout=20)
    finally:
        await client.aclose()
    assert result.text == "ok"
    assert len(server.requests) == 2


async def test_5xx_retried_until_success(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(503, "overloaded"), Script.error(502, "bad gateway"), Script.text("recovered"))
    _, result = await collect(client)
    assert result.text == "recovered"
    assert len(server.requests) == 3
    assert server.requests[0] == server.requests[2]  # the same request, replayed


async def test_5xx_gives_up_after_max_retries_with_plain_message(server: ScriptedLLMServer) -> None:
    server.enqueue(*[Script.error(503, "overloaded")] * 5)
    client = client_for(server, max_retries=2)
    try:
        with pytest.raises(LLMUnavailable) as info:
            await collect(client)
    finally:
        await client.aclose()
    assert len(server.requests) == 3
    assert info.value.status == 503
    assert "HTTP 503" in info.value.message and "after 3 attempts" in info.value.message
    assert "Traceback" not in info.value.message


async def test_disconnect_before_first_token_is_retried(server: ScriptedLLMServer, client: LLMClient) -> None:
    # The connection drops after the role chunk: nothing reached the user, so a retry is safe.
    server.enqueue(Script.text("never shown").with_options(disconnect_after=1), Script.text("second try"))
    parts, result = await collect(client)
    assert result.text == "second try"
    assert "".join(p.text for p in parts if isinstance(p, TextPart)) == "second try"
    assert len(server.requests) == 2


async def test_401_is_not_retried_and_names_the_key_setting(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(401, f"Incorrect API key provided: {TEST_API_KEY}", code="invalid_api_key"), Script.text("unused"))
    with pytest.raises(LLMUnavailable) as info:
        await collect(client)
    assert len(server.requests) == 1
    assert info.value.message == "The model service rejected the API key (HTTP 401); check llm.api_key"


async def test_400_shows_the_provider_reason_without_the_key(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(400, f"This model's maximum context length is 8192 tokens (key {TEST_API_KEY})"))
    with pytest.raises(LLMUnavailable) as info:
        await collect(client)
    assert len(server.requests) == 1
    assert "maximum context length" in info.value.message
    assert TEST_API_KEY not in info.value.message and "***" in info.value.message


async def test_a_plain_400_is_a_refusal_with_the_providers_short_reason(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(400, f"Invalid 'messages[1].content': bad value (key {TEST_API_KEY})"), Script.text("unused"))
    with pytest.raises(LLMRefused) as info:
        await collect(client)
    assert not isinstance(info.value, LLMContextTooLong)
    assert len(server.requests) == 1  # a refusal is not retried
    assert info.value.status == 400
    assert info.value.message.startswith("The model service refused the request (HTTP 400): Invalid 'messages[1].content'")
    assert TEST_API_KEY not in info.value.message


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (400, "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.", "context_length_exceeded"),
        (400, "This model's maximum context length is 32768 tokens", None),
        (400, "Range of input length should be [1, 30720]: too many tokens", None),
        (400, "Input is too long for requested model.", None),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error"),
        (413, "Request Entity Too Large", None),
    ],
)
async def test_a_context_length_refusal_is_recognized(
    server: ScriptedLLMServer, client: LLMClient, status: int, message: str, code: str | None
) -> None:
    server.enqueue(Script.error(status, message, code=code))
    with pytest.raises(LLMContextTooLong) as info:
        await collect(client)
    assert len(server.requests) == 1
    assert info.value.status == status and "too long" in info.value.message


async def test_404_names_the_model(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(404, "The model `gpt-9` does not exist"))
    with pytest.raises(LLMUnavailable) as info:
        await collect(client)
    assert "'scripted-model'" in info.value.message and "llm.model" in info.value.message


async def test_quota_429_is_explained(server: ScriptedLLMServer) -> None:
    server.enqueue(*[Script.error(429, "You exceeded your current quota", code="insufficient_quota")] * 2)
    client = client_for(server, max_retries=1, retry_max_wait_s=0.05)
    try:
        with pytest.raises(LLMUnavailable) as info:
            await collect(client)
    finally:
        await client.aclose()
    assert "out of quota" in info.value.message


async def test_unreachable_endpoint() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = LLMClient(llm_config(f"http://127.0.0.1:{port}/v1", max_retries=1), backoff_base_s=0.01)
    try:
        with pytest.raises(LLMUnavailable) as info:
            await collect(client)
    finally:
        await client.aclose()
    assert info.value.message.startswith(f"Could not reach the model service at http://127.0.0.1:{port} after 2 attempts")


async def test_first_token_timeout(server: ScriptedLLMServer) -> None:
    server.enqueue(Script(chunks=[role_chunk(), Pause(5), *text_chunks("late")]))
    client = client_for(server, first_token_timeout_s=0.3, max_retries=0)
    started = time.monotonic()
    try:
        with pytest.raises(LLMUnavailable) as info:
            await collect(client)
    finally:
        await client.aclose()
    assert "llm.first_token_timeout_s" in info.value.message
    assert time.monotonic() - started < 4  # not stuck waiting for the late chunk


# --- failures after the first token are never retried --------------------------------------------


async def test_disconnect_mid_answer_raises_interrupted_with_partial_text(server: ScriptedLLMServer) -> None:
    server.enqueue(Script.text("The host is web-1 in rack 4.", chunk_size=4).with_options(disconnect_after=4), Script.text("a retry would duplicate"))
    client = client_for(server)
    seen: list[str] = []
    try:
        with pytest.raises(LLMInterrupted) as info:
            async for item in client.stream(MESSAGES):
                if isinstance(item, TextPart):
                    seen.append(item.text)
    finally:
        await client.aclose()
    assert len(server.requests) == 1
    assert info.value.partial_text == "The host is " == "".join(seen)
    assert "mid-answer" in info.value.message


async def test_idle_timeout_mid_answer(server: ScriptedLLMServer) -> None:
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("partial "), Pause(5), *text_chunks("rest")]))
    client = client_for(server, idle_timeout_s=0.3)
    try:
        with pytest.raises(LLMInterrupted) as info:
            await asyncio.wait_for(collect(client), timeout=4)
    finally:
        await client.aclose()
    assert info.value.partial_text == "partial "
    assert "llm.idle_timeout_s" in info.value.message
    assert len(server.requests) == 1


async def test_error_event_mid_stream(server: ScriptedLLMServer, client: LLMClient) -> None:
    error = '{"error": {"message": "upstream overloaded", "type": "server_error"}}'
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("Half an "), error]))
    with pytest.raises(LLMInterrupted) as info:
        await collect(client)
    assert info.value.partial_text == "Half an "
    assert "upstream overloaded" in info.value.message


# --- complete() ----------------------------------------------------------------------------------


async def test_complete_returns_the_answer_without_thought(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script(chunks=[role_chunk(), *think_chunks("summarize", "Earlier: asked about web-1."), finish_chunk()]))
    summary = await client.complete([{"role": "user", "content": "summarize this"}])
    assert summary == "Earlier: asked about web-1."
    assert "tools" not in server.requests[0]


async def test_complete_raises_plain_error(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script.error(401, "bad key"))
    with pytest.raises(LLMUnavailable, match=r"llm.api_key"):
        await client.complete([{"role": "user", "content": "x"}])


# --- the server itself ---------------------------------------------------------------------------


async def test_models_endpoint_and_responder() -> None:
    import openai

    async def responder(body: dict[str, Any]) -> Script:
        return Script.text(f"you said {body['messages'][-1]['content']}")

    async with ScriptedLLMServer(responder=responder, model="demo-1") as srv:
        sdk = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        try:
            models = await sdk.models.list()
            assert [m.id for m in models.data] == ["demo-1"]
            reply = await sdk.chat.completions.create(model="demo-1", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].message.content == "you said hi"
            assert reply.usage is not None and reply.usage.prompt_tokens == 20
        finally:
            await sdk.close()


async def test_no_script_is_a_clear_400(server: ScriptedLLMServer, client: LLMClient) -> None:
    with pytest.raises(LLMUnavailable, match="no script"):
        await collect(client)


async def test_non_streaming_request_gets_the_folded_script(server: ScriptedLLMServer) -> None:
    import openai

    server.enqueue(Script.tool_calls(CALLS, text="Checking.", index="zero"))
    sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    try:
        reply = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        await sdk.close()
    message = reply.choices[0].message
    assert message.content == "Checking." and reply.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        (i, n, json.dumps(a)) for i, n, a in CALLS
    ]


async def test_queue_first_then_sync_responder_and_recording_cap() -> None:
    seen: list[int] = []

    def responder(body: dict[str, Any]) -> Script:
        seen.append(len(body["messages"]))
        return Script.text("from responder")

    async with ScriptedLLMServer([Script.text("queued")], responder=responder, max_recorded=2) as srv:
        client = client_for(srv)
        try:
            texts = [(await collect(client))[1].text for _ in range(3)]
            await srv.wait_for_requests(3, timeout=10)
        finally:
            await client.aclose()
    assert texts == ["queued", "from responder", "from responder"]
    assert seen == [2, 2]
    assert srv.request_count == 3 and len(srv.requests) == 2 and len(srv.request_headers) == 2


async def test_broken_responder_is_a_server_error() -> None:
    def responder(body: dict[str, Any]) -> Script:
        raise KeyError("boom")

    async with ScriptedLLMServer(responder=responder) as srv:
        client = client_for(srv, max_retries=1)
        try:
            with pytest.raises(LLMUnavailable, match="HTTP 500"):
                await collect(client)
        finally:
            await client.aclose()
    assert srv.request_count == 2  # a 500 before the first token is retried


async def test_many_concurrent_streams() -> None:
    answer = "streaming " * 20
    server_with_responder = ScriptedLLMServer(responder=lambda body: Script.text(answer, chunk_size=4, delay_s=0.005))
    async with server_with_responder as srv:
        client = client_for(srv)
        try:
            results = await asyncio.wait_for(asyncio.gather(*[collect(client) for _ in range(60)]), timeout=60)
        finally:
            await client.aclose()
    assert all(final.text == answer for _, final in results)
    assert srv.request_count == 60


async def test_cancel_before_the_first_token_hangs_up_at_once(server: ScriptedLLMServer, client: LLMClient) -> None:
    # A model "thinking" for a long time (keep-alive chunks carry no token) when the user presses stop.
    server.enqueue(Script(chunks=[role_chunk(), *[empty_chunk() for _ in range(500)], *text_chunks("late")], delay_s=0.02))
    task = asyncio.create_task(collect(client))
    await server.wait_for_requests(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The connection is closed now, not when the 10 s stream would have ended.
    await server.wait_for_disconnects(1, timeout=5)
    assert len(server.requests) == 1


async def test_malformed_chunks_are_plain_errors_before_and_after_the_first_token(server: ScriptedLLMServer, client: LLMClient) -> None:
    server.enqueue(Script(chunks=[role_chunk(), "{not json"]), Script(chunks=[role_chunk(), *text_chunks("Half an "), "{not json"]))
    with pytest.raises(LLMUnavailable) as before:
        await collect(client)
    assert "not valid OpenAI-compatible JSON" in before.value.message and "llm.base_url" in before.value.message
    with pytest.raises(LLMInterrupted) as after:
        await collect(client)
    assert after.value.partial_text == "Half an " and "malformed" in after.value.message
    assert len(server.requests) == 2  # neither was retried


async def test_an_endpoint_rejecting_stream_options_is_asked_again_without_them() -> None:
    def strict_server(body: dict[str, Any]) -> Script:
        # What older vLLM builds and some Azure API versions answer.
        if "stream_options" in body:
            return Script.error(400, "Unrecognized request argument supplied: stream_options")
        return Script.text("answered", usage=None)

    async with ScriptedLLMServer(responder=strict_server) as strict:
        other = client_for(strict, max_retries=0)
        try:
            _, first = await collect(other)
            _, second = await collect(other)
        finally:
            await other.aclose()
    assert first.text == second.text == "answered" and first.usage is None
    assert ["stream_options" in body for body in strict.requests] == [True, False, False]  # remembered
