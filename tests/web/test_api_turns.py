"""``POST /v1/turns`` and its companions, on ``botgateway run`` against the scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cli.test_ask import ask, parse_lines, write_config
from tests.web.api_harness import ADMIN_KEY, VIEWER_KEY, api_config, api_gateway, bearer, sse_events
from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

QUESTION = "which server is 10.0.1.100?"


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as server:
        yield server


def lookup_turn(llm: ScriptedLLMServer) -> None:
    """One scripted turn: a tool round that finds the host, then the answer."""
    llm.enqueue(
        Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})], reasoning="Look it up.",
                          text="Checking.", usage=(50, 12)),
        Script.text("10.0.1.100 is prod-db-01.", usage=(80, 9)),
    )


def timeless(value: Any) -> Any:
    """``value`` without what differs between two runs of the same turn: times and durations, at any depth."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in ("t", "duration_s", "fetched_at")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


_DELTAS = ("answer_delta", "thought_delta")


def merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with each run of one kind of text delta as one: how a stream's chunks are grouped into
    deltas depends on how many had arrived when the process read them, which differs between two runs."""
    out: list[dict[str, Any]] = []
    for event in events:
        if out and event["kind"] in _DELTAS and out[-1]["kind"] == event["kind"]:
            out[-1] = {**out[-1], "text": out[-1]["text"] + event["text"]}
        else:
            out.append(dict(event))
    return out


async def ask_api(url: str, key: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{url}/v1/turns", json=body, headers=bearer(key)) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return [message async for message in sse_events(response)]


async def test_the_sse_events_are_the_ask_json_lines_of_the_same_turn(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    lookup_turn(llm)
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, llm.base_url), QUESTION, "--json")
    assert code == 0, stderr
    lines = [line for line in parse_lines(stdout) if line["kind"] != "result"]

    lookup_turn(llm)
    async with api_gateway(tmp_path / "api", api_config(tmp_path / "api", llm.base_url)) as gateway:
        messages = await ask_api(gateway.probe_url, ADMIN_KEY, {"question": QUESTION})

    (first, turn), events = messages[0], messages[1:]
    assert first == "turn" and turn["status"] == "started" and turn["turn_id"] and turn["conversation"]
    sent, printed = merged([data for _, data in events]), merged(lines)
    assert [data["kind"] for data in sent] == [line["kind"] for line in printed]
    assert [timeless(data) for data in sent] == [timeless(line) for line in printed]
    names = [name for name, _ in events]
    assert names[-1] == "done" and names[:-1] == [data["kind"] for _, data in events[:-1]]
    assert events[-1][1]["result"]["answer"] == "10.0.1.100 is prod-db-01."


async def test_a_finished_turn_is_looked_up_by_its_asker_and_an_admin_only(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    llm.enqueue(Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})]), Script.text("prod-db-01."))
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        messages = await ask_api(gateway.probe_url, VIEWER_KEY, {"question": QUESTION, "conversation": "c1"})
        turn_id = messages[0][1]["turn_id"]
        assert messages[0][1]["conversation"] == "c1"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{gateway.probe_url}/v1/turns/{turn_id}", headers=bearer(VIEWER_KEY)) as response:
                assert response.status == 200
                result = await response.json()
            async with http.get(f"{gateway.probe_url}/v1/turns/{turn_id}", headers=bearer(ADMIN_KEY)) as response:
                assert response.status == 200  # an admin sees anyone's
            async with http.get(f"{gateway.probe_url}/v1/turns/unknown", headers=bearer(VIEWER_KEY)) as response:
                assert response.status == 404
    assert result["status"] == "done" and result["answer"] == "prod-db-01." and result["conversation"] == "c1"
    assert result["principal"] == "api:dash" and result["role"] == "viewer"
    assert [call["name"] for call in result["tool_calls"]] == ["find_server"]


async def test_another_key_neither_sees_nor_stops_nor_clears_a_turn(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script.text("done."))
    config = api_config(tmp_path, llm.base_url)
    config["web"]["api_keys"].append({"name": "other", "key": "other-key-0123456789abcdef"})
    config["access"]["roles"]["viewer"]["members"].append("api:other")
    async with api_gateway(tmp_path, config) as gateway:
        messages = await ask_api(gateway.probe_url, VIEWER_KEY, {"question": "hi", "conversation": "shared-name"})
        turn_id = messages[0][1]["turn_id"]
        other = bearer("other-key-0123456789abcdef")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{gateway.probe_url}/v1/turns/{turn_id}", headers=other) as response:
                assert response.status == 404
            async with http.post(f"{gateway.probe_url}/v1/turns/{turn_id}/stop", headers=other) as response:
                assert response.status == 404
            # The same conversation name under another key is another conversation: its history is not the first's.
            llm.enqueue(Script.text("fresh."))
            again = {"question": "again", "conversation": "shared-name"}
            await ask_api(gateway.probe_url, "other-key-0123456789abcdef", again)
    contents = [m.get("content") for m in llm.requests[-1]["messages"]]
    assert "hi" not in contents and "done." not in contents


async def finished(url: str, turn_id: str, key: str, timeout: float = 30.0) -> dict[str, Any]:
    """``GET /v1/turns/{id}`` once the turn has ended (202 until then), as a client polls for it."""
    async def poll() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.get(f"{url}/v1/turns/{turn_id}", headers=bearer(key)) as response:
                    if response.status == 200:
                        return dict(await response.json())
                    assert response.status == 202, await response.text()
                await asyncio.sleep(0.05)  # paces the polling only; the condition is the answer

    return await asyncio.wait_for(poll(), timeout)


def slow_answer() -> Script:
    """An answer that stops half-way for far longer than any test waits (the client leaves first)."""
    return Script(chunks=[role_chunk(), *text_chunks("Half an answer", 4), Pause(120), *text_chunks(" never sent"),
                          finish_chunk("stop")])


async def test_closing_the_connection_stops_the_turn_and_leaves_history_as_it_was(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    llm.enqueue(Script.text("First answer.", usage=(10, 3)), slow_answer(), Script.text("Third answer."))
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        await ask_api(gateway.probe_url, ADMIN_KEY, {"question": "first question", "conversation": "c"})
        async with aiohttp.ClientSession() as http:
            response = await http.post(f"{gateway.probe_url}/v1/turns", headers=bearer(ADMIN_KEY),
                                       json={"question": "second question", "conversation": "c"})
            turn_id = ""
            async for event, data in sse_events(response):
                turn_id = data.get("turn_id", turn_id)
                if event == "answer_delta":
                    break  # mid-answer
            response.close()  # the client hangs up
        stopped = await finished(gateway.probe_url, turn_id, ADMIN_KEY)  # the scripted answer would take minutes
        await ask_api(gateway.probe_url, ADMIN_KEY, {"question": "third question", "conversation": "c"})
    assert stopped["outcome"] == "stopped"
    messages = llm.requests[-1]["messages"]
    contents = [m.get("content") or "" for m in messages]
    assert "first question" in contents and "First answer." in contents
    assert "second question" not in contents and not any("Half an answer" in c for c in contents)
    assert contents[-1] == "third question"


async def test_stop_and_clear_through_the_api(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(slow_answer(), Script.text("After the clear."))
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        url = gateway.probe_url
        async with aiohttp.ClientSession() as http:
            response = await http.post(f"{url}/v1/turns", headers=bearer(VIEWER_KEY),
                                       json={"question": "slow one", "conversation": "c"})
            events = sse_events(response)
            turn = await anext(events)
            turn_id = turn[1]["turn_id"]
            async for event, _data in events:
                if event == "answer_delta":
                    break
            async with http.delete(f"{url}/v1/conversations/c", headers=bearer(VIEWER_KEY)) as cleared:
                assert cleared.status == 409  # a turn runs in it
            async with http.post(f"{url}/v1/turns/{turn_id}/stop", headers=bearer(VIEWER_KEY)) as stop:
                assert stop.status == 200 and (await stop.json())["stop"] == "stopped"
            rest = [message async for message in events]
            response.close()
            assert rest[-1][0] == "error" and rest[-1][1]["reason"] == "cancelled"
            async with http.delete(f"{url}/v1/conversations/c", headers=bearer(VIEWER_KEY)) as cleared:
                assert cleared.status == 200
