"""The API's streams on ``botgateway run`` against the scripted model: a turn's card in its own stream, keep-alive
pings on every stream, and failed turns the OpenAI SDKs do not ask again by themselves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from openai import APIStatusError, AsyncOpenAI, RateLimitError

from tests.web.api_harness import ADMIN_KEY, api_config, api_gateway, bearer, sse_events
from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as server:
        yield server


def slow_answer() -> Script:
    """An answer that stops half-way for far longer than any test waits (the client leaves first)."""
    return Script(chunks=[role_chunk(), *text_chunks("Half an answer", 4), Pause(120), *text_chunks(" never sent"),
                          finish_chunk("stop")])


async def test_a_turn_asked_with_snapshots_streams_its_card_too(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(
        Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})], text="Checking."),
        Script.text("10.0.1.100 is prod-db-01."),
    )
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway, aiohttp.ClientSession() as http:
        body = {"question": "which server is 10.0.1.100?", "snapshots": True}
        async with http.post(f"{gateway.probe_url}/v1/turns", json=body, headers=bearer(ADMIN_KEY)) as response:
            messages = [message async for message in sse_events(response)]
        async with http.post(f"{gateway.probe_url}/v1/turns", json={"question": "x", "snapshots": "yes"},
                             headers=bearer(ADMIN_KEY)) as response:
            assert response.status == 400 and (await response.json())["error"]["param"] == "snapshots"
    names = [event for event, _ in messages]
    assert names[0] == "turn" and "done" in names
    turn_id = messages[0][1]["turn_id"]
    snapshots = [data for event, data in messages if event == "snapshot"]
    assert snapshots and all(snapshot["turn_id"] == turn_id for snapshot in snapshots)
    assert snapshots[-1]["final"] and snapshots[-1]["answer"] == "10.0.1.100 is prod-db-01."
    assert [s["final"] for s in snapshots].count(True) == 1 and names[-1] in ("snapshot", "done")
    tools = [block for s in snapshots for block in s["blocks"] if block["type"] == "tool"]
    assert any(block["name"] == "find_server" for block in tools)  # the card's tool line, as the console shows it


async def until_ping(response: aiohttp.ClientResponse) -> None:
    """Read the stream until a keep-alive comment comes (the test fails by its timeout if none does)."""
    while (line := await response.content.readline()) != b": ping\n":
        assert line, "the stream ended without a ping"


async def test_every_stream_pings_while_a_turn_is_silent(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(slow_answer(), slow_answer())
    config = api_config(tmp_path, llm.base_url, web={"keepalive_s": 0.2})
    async with api_gateway(tmp_path, config) as gateway, aiohttp.ClientSession() as http:
        url = gateway.probe_url
        turn = await http.post(f"{url}/v1/turns", json={"question": "slow", "conversation": "a"},
                               headers=bearer(ADMIN_KEY))
        event, data = await anext(sse_events(turn))
        assert event == "turn"
        card = await http.get(f"{url}/v1/turns/{data['turn_id']}/card", headers=bearer(ADMIN_KEY))
        assert card.status == 200
        completion = await http.post(f"{url}/v1/chat/completions", headers=bearer(ADMIN_KEY), json={
            "model": "botgateway", "stream": True, "user": "b", "messages": [{"role": "user", "content": "slow"}]})
        assert completion.status == 200
        for response in (turn, card, completion):
            await asyncio.wait_for(until_ping(response), 30)
            response.close()  # the client leaves: its turn is stopped


async def test_the_openai_sdk_does_not_ask_a_failed_turn_again(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script(status=500))  # the model fails once; the gateway's own model client does not retry
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        client = AsyncOpenAI(base_url=f"{gateway.probe_url}/v1", api_key=ADMIN_KEY)  # max_retries: the default, 2
        try:
            with pytest.raises(APIStatusError) as failed:
                await client.chat.completions.create(model="botgateway", messages=[{"role": "user", "content": "hi"}])
        finally:
            await client.close()
    assert failed.value.status_code == 502 and failed.value.response.headers["x-should-retry"] == "false"
    assert llm.request_count == 1  # asked once, not once per SDK retry


async def early_in_a_minute(margin_s: float = 20.0) -> None:
    """Wait, if needed, until the UTC minute has ``margin_s`` left: a per-minute limit counts two questions asked
    across a minute's end in two minutes, so a test of one refusal must ask both within one."""
    left = 60 - time.time() % 60
    if left < margin_s:
        await asyncio.sleep(left + 0.05)  # waiting out the clock's minute, not for another task


async def test_a_limit_refusal_is_a_429_the_sdk_does_not_retry(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script.text("first."))
    config = api_config(tmp_path, llm.base_url, limits={"turns_per_minute": 1})
    async with api_gateway(tmp_path, config) as gateway:
        client = AsyncOpenAI(base_url=f"{gateway.probe_url}/v1", api_key=ADMIN_KEY)
        await early_in_a_minute()
        try:
            first = await client.chat.completions.create(
                model="botgateway", messages=[{"role": "user", "content": "one"}])
            assert first.choices[0].message.content == "first."
            with pytest.raises(RateLimitError) as limited:
                await client.chat.completions.create(model="botgateway", messages=[{"role": "user", "content": "two"}])
        finally:
            await client.close()
        async with aiohttp.ClientSession() as http, http.get(f"{gateway.probe_url}/v1/turns/none",
                                                             headers=bearer(ADMIN_KEY)) as response:
            assert response.status == 404 and response.headers["x-should-retry"] == "false"
    assert limited.value.response.headers["x-should-retry"] == "false"
    assert gateway.output().count("gateway.limit_hit") == 1  # refused once: no SDK retry asked again
