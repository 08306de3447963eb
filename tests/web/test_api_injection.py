"""The injection corpus through the API: ``botgateway run`` with a real MCP server, read with the real clients.

Issue 25's corpus (:mod:`tests.injection_corpus`) arrives as tool text (the
scripted model calls the MCP server's ``echo`` tool with the payloads, then
repeats what it answered) and as model text (its own thought and answer).
Every text the API hands out must be inert when a Markdown client draws it,
still show every payload's words, and keep the legitimate link: the
OpenAI-compatible answer (``content`` and ``reasoning_content``, whole and
streamed, read by the ``openai`` SDK), ``POST /v1/turns``' events (the deltas
joined, the final answer, the card snapshots) and ``GET /v1/turns/{id}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.injection_corpus import (
    CONTROL_HOST,
    CONTROL_URL,
    MODES,
    Mode,
    groups,
    markdown_problems,
    missing_words,
    scripted_model,
)
from tests.paths import FAKES
from tests.web.api_harness import ADMIN_KEY, api_config, api_gateway, bearer, sse_events
from tools.demo.server import ScriptedLLMServer

QUESTION = "what do the servers say?"
MCP = {"mcp": [{"name": "ops", "command": sys.executable, "args": [str(FAKES / "mcp_server.py"), "stdio"]}]}


def _assert_inert_answer(text: str, where: str) -> None:
    assert markdown_problems(text) == [], (where, text)
    assert missing_words(text) == [], f"{where}: made inert, every payload is still shown"
    assert f"[the Grafana board ({CONTROL_HOST})]({CONTROL_URL})" in text, f"{where}: a safe link stays a link"


def _assert_inert(text: str, where: str) -> None:
    assert markdown_problems(text) == [], (where, text)


async def _completions(url: str, mode: Mode) -> None:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=ADMIN_KEY, max_retries=0)
    whole = await client.chat.completions.create(model="botgateway", messages=[{"role": "user", "content": QUESTION}])
    content = whole.choices[0].message.content or ""
    _assert_inert_answer(content, "content")
    reasoning = str((whole.choices[0].message.model_extra or {}).get("reasoning_content", ""))
    _assert_inert(reasoning, "reasoning_content")
    assert "ops__echo" in reasoning if mode == "tool" else "the Grafana board" in reasoning

    streamed, streamed_reasoning = "", ""
    stream = await client.chat.completions.create(
        model="botgateway", messages=[{"role": "user", "content": QUESTION}], stream=True)
    async for chunk in stream:
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
            streamed_reasoning += str((chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or "")
    assert streamed == content, "the deltas join into the inert answer"
    _assert_inert(streamed_reasoning, "streamed reasoning_content")

    note = ""  # answered without a turn: the same stream carries it whole
    stream = await client.chat.completions.create(
        model="botgateway", messages=[{"role": "user", "content": "/whoami"}], stream=True)
    async for chunk in stream:
        note += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    assert "api:ops" in note, note
    await client.close()


async def _turns(url: str, mode: Mode) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/turns", json={"question": QUESTION, "snapshots": True},
                             headers=bearer(ADMIN_KEY)) as response:
            assert response.status == 200
            messages = [message async for message in sse_events(response)]
        turn_id = messages[0][1]["turn_id"]
        async with http.get(f"{url}/v1/turns/{turn_id}", headers=bearer(ADMIN_KEY)) as response:
            assert response.status == 200
            record = await response.json()
    events = [data for name, data in messages if name not in ("turn", "snapshot")]
    [done] = [data for data in events if data["kind"] == "turn_done"]
    answer = done["result"]["answer"]
    _assert_inert_answer(answer, "turn_done")
    assert "".join(e["text"] for e in events if e["kind"] == "answer_delta") == answer, "the deltas join into it"
    _assert_inert("".join(e["text"] for e in events if e["kind"] == "thought_delta"), "thought_delta")
    summaries = [e["summary"] for e in events if e["kind"] == "tool_call_finished"]
    assert len(summaries) == (len(groups()) if mode == "tool" else 0)
    for summary in summaries:
        _assert_inert(summary, "tool_call_finished")
    snapshots = [data for name, data in messages if name == "snapshot"]
    assert snapshots and snapshots[-1]["final"]
    for snapshot in snapshots:
        for text in _snapshot_texts(snapshot):
            _assert_inert(text, "snapshot")
    _assert_inert_answer(snapshots[-1]["answer"], "the final snapshot")
    _assert_inert_answer(record["answer"], "GET /v1/turns/{id}")


def _snapshot_texts(snapshot: dict[str, Any]) -> list[str]:
    texts = [snapshot["answer"], snapshot["thought"], snapshot["error"], snapshot["preamble"]]
    for block in snapshot["blocks"]:
        texts += [block.get("text", ""), block.get("args_preview", ""), block.get("summary", "")]
    return texts


@pytest.mark.parametrize("mode", MODES)
async def test_the_injection_corpus_leaves_the_api_inert(tmp_path: Path, mode: Mode) -> None:
    async with ScriptedLLMServer(responder=scripted_model(mode, "ops__echo", "text")) as llm:
        config = api_config(tmp_path, llm.base_url, tools=MCP, card={"show_thought": True})
        async with api_gateway(tmp_path, config) as gateway:
            await _completions(gateway.probe_url, mode)
            await _turns(gateway.probe_url, mode)
        raw = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
        assert len(raw) == (len(groups()) if mode == "tool" else 0), "the payloads came back as tool results"
