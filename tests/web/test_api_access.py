"""Who may call the API and what it is offered (keys, bad bodies, CORS, a viewer's tools); the OpenAI route."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI, AuthenticationError

from adapters.web.failed_logins import FAILED_LOGIN_WINDOW_S, MAX_FAILED_LOGINS
from tests.web.api_harness import ADMIN_KEY, VIEWER_KEY, api_config, api_gateway, bearer, sse_events
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as server:
        yield server


def offered(request: dict[str, Any]) -> set[str]:
    """The tool names a model request offered."""
    return {tool["function"]["name"] for tool in request.get("tools", [])}


async def test_bad_keys_bodies_and_sizes_get_plain_answers(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        url = f"{gateway.probe_url}/v1/turns"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{gateway.probe_url}/readyz") as response:
                assert (await response.json())["checks"]["web"] == "ok"  # the adapter counts for readiness
            async with http.post(url, json={"question": "hi"}) as response:
                assert response.status == 401 and "Bearer" in response.headers["WWW-Authenticate"]
            async with http.post(url, json={"question": "hi"}, headers=bearer("not-a-key-0123456789")) as response:
                assert response.status == 401
                assert "not valid" in (await response.json())["error"]["message"]
            async with http.post(url, data=b'{"question": ', headers=bearer(ADMIN_KEY)) as response:
                assert response.status == 400
                assert "not valid JSON" in (await response.json())["error"]["message"]
            async with http.post(url, json=["a list"], headers=bearer(ADMIN_KEY)) as response:
                assert response.status == 400 and "JSON object" in (await response.json())["error"]["message"]
            async with http.post(url, json={"conversation": "c"}, headers=bearer(ADMIN_KEY)) as response:
                error = (await response.json())["error"]
                assert response.status == 400 and "'question' is required" in error["message"]
                assert error["param"] == "question" and error["type"] == "invalid_request_error"
            bad_name = {"question": "hi", "conversation": "a b/c"}
            async with http.post(url, json=bad_name, headers=bearer(ADMIN_KEY)) as response:
                assert response.status == 400 and (await response.json())["error"]["param"] == "conversation"
            big = {"question": "x" * (70 * 1024)}
            async with http.post(url, json=big, headers=bearer(ADMIN_KEY)) as response:
                assert response.status == 413 and "larger than" in (await response.json())["error"]["message"]
    assert llm.request_count == 0  # none of them reached the model


async def get_tools(url: str, key: str, *, source: str = "127.0.0.1", forwarded: str | None = None,
                    ) -> tuple[int, dict[str, str]]:
    """``GET /v1/tools`` with ``key`` from the loopback address ``source`` (claiming ``forwarded`` as the client)."""
    headers = {**bearer(key), **({"X-Forwarded-For": forwarded} if forwarded is not None else {})}
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http, http.get(f"{url}/v1/tools", headers=headers) as got:
        return got.status, dict(got.headers)


async def test_wrong_api_keys_lock_their_address_out_like_failed_logins(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    config = api_config(tmp_path, llm.base_url, web={"trusted_proxies": ["127.0.0.2"]})  # 127.0.0.1 is no proxy
    wrong = "not-a-key-0123456789"
    async with api_gateway(tmp_path, config) as gateway:
        url = gateway.probe_url
        for _ in range(MAX_FAILED_LOGINS):
            assert (await get_tools(url, wrong))[0] == 401
        status, headers = await get_tools(url, wrong)  # the 11th from this address
        assert status == 429 and int(headers["Retry-After"]) == FAILED_LOGIN_WINDOW_S
        # An untrusted peer naming another client is still the peer: its count goes on, the new address is not used.
        assert (await get_tools(url, wrong, forwarded="203.0.113.50"))[0] == 429
        assert (await get_tools(url, ADMIN_KEY, forwarded="203.0.113.50"))[0] == 429
        assert (await get_tools(url, ADMIN_KEY))[0] == 429  # the right key waits too, as a right password does
        async with aiohttp.ClientSession() as http:  # one count with the console's logins, which wait too
            async with http.post(f"{url}/login", json={"key": ADMIN_KEY}) as response:
                assert response.status == 429 and "Retry-After" in response.headers
        # Another address is not held back, and its own wrong keys are only wrong.
        assert (await get_tools(url, ADMIN_KEY, source="127.0.0.3"))[0] == 200
        assert (await get_tools(url, wrong, source="127.0.0.3"))[0] == 401

        # Behind a trusted proxy each client counts on its own, and cannot escape by writing its own header.
        for _ in range(MAX_FAILED_LOGINS):
            assert (await get_tools(url, wrong, source="127.0.0.2", forwarded="198.51.100.7"))[0] == 401
        assert (await get_tools(url, ADMIN_KEY, source="127.0.0.2", forwarded="198.51.100.7"))[0] == 429
        spoofed = "203.0.113.77, 198.51.100.7"
        assert (await get_tools(url, ADMIN_KEY, source="127.0.0.2", forwarded=spoofed))[0] == 429
        assert (await get_tools(url, ADMIN_KEY, source="127.0.0.2", forwarded="198.51.100.8"))[0] == 200
    assert llm.request_count == 0


async def test_cors_headers_only_for_a_configured_origin(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    config = api_config(tmp_path, llm.base_url)
    config["web"]["cors_origins"] = ["https://ops.example.com"]
    async with api_gateway(tmp_path, config) as gateway, aiohttp.ClientSession() as http:
        url = f"{gateway.probe_url}/v1/tools"
        preflight = {"Origin": "https://ops.example.com", "Access-Control-Request-Method": "GET",
                     "Access-Control-Request-Headers": "authorization"}
        async with http.options(url, headers=preflight) as response:
            assert response.status == 204
            assert response.headers["Access-Control-Allow-Origin"] == "https://ops.example.com"
            assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
        async with http.options(url, headers={**preflight, "Origin": "https://evil.example"}) as response:
            assert response.status == 403 and "Access-Control-Allow-Origin" not in response.headers
        async with http.get(url, headers={**bearer(ADMIN_KEY), "Origin": "https://ops.example.com"}) as response:
            assert response.status == 200
            assert response.headers["Access-Control-Allow-Origin"] == "https://ops.example.com"
        async with http.get(url, headers={**bearer(ADMIN_KEY), "Origin": "https://evil.example"}) as response:
            assert "Access-Control-Allow-Origin" not in response.headers


async def test_a_viewer_key_is_not_offered_the_admin_only_tools(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script.text("viewer answer."), Script.text("admin answer."))
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway, aiohttp.ClientSession() as http:
        async with http.get(f"{gateway.probe_url}/v1/tools", headers=bearer(VIEWER_KEY)) as response:
            viewer = await response.json()
        async with http.get(f"{gateway.probe_url}/v1/tools", headers=bearer(ADMIN_KEY)) as response:
            admin = await response.json()
        for key in (VIEWER_KEY, ADMIN_KEY):
            async with http.post(f"{gateway.probe_url}/v1/turns", json={"question": "which hosts?"},
                                 headers=bearer(key)) as response:
                [message async for message in sse_events(response)]
    assert viewer["principal"] == "api:dash" and viewer["roles"] == ["viewer"]
    assert [tool["name"] for tool in viewer["tools"]] == ["find_server"]
    assert {"find_server", "list_servers", "search_inventory_by_ip"} <= {tool["name"] for tool in admin["tools"]}
    assert all(tool["parameters"] and tool["description"] for tool in admin["tools"])
    viewer_request, admin_request = llm.requests
    assert offered(viewer_request) == {"find_server"}
    assert {"list_servers", "search_inventory_by_ip"} <= offered(admin_request)


async def test_the_openai_client_streams_and_gets_whole_answers(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(
        Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})], usage=(50, 12)),
        Script.text("10.0.1.100 is prod-db-01.", usage=(80, 9)),
        Script.text("Still prod-db-01.", usage=(90, 5)),
    )
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway:
        client = AsyncOpenAI(base_url=f"{gateway.probe_url}/v1", api_key=VIEWER_KEY, max_retries=0)
        stream = await client.chat.completions.create(
            model="botgateway", stream=True, stream_options={"include_usage": True}, user="ops-chat",
            messages=[{"role": "system", "content": "ignored"},
                      {"role": "user", "content": "which server is 10.0.1.100?"}],
        )
        content, reasoning, usage = [], [], None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content.append(choice.delta.content or "")
                reasoning.append(getattr(choice.delta, "reasoning_content", None) or "")
        whole = await client.chat.completions.create(
            model="botgateway", user="ops-chat", messages=[{"role": "user", "content": "and now?"}])
        with pytest.raises(AuthenticationError):
            await AsyncOpenAI(base_url=f"{gateway.probe_url}/v1", api_key="wrong-key-0123456789", max_retries=0
                              ).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.close()
    assert "".join(content) == "10.0.1.100 is prod-db-01."
    assert "find_server" in "".join(reasoning) and "prod-db-01" in "".join(reasoning)  # the tool's progress
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (130, 21)
    assert whole.choices[0].message.content == "Still prod-db-01."
    assert whole.usage is not None and whole.usage.total_tokens == 95
    # The same conversation (the user field): the second question's model request holds the first turn.
    contents = [m.get("content") for m in llm.requests[-1]["messages"]]
    assert "which server is 10.0.1.100?" in contents and "ignored" not in contents


async def test_a_card_is_watched_as_snapshots_until_final(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})]), Script.text("prod-db-01."))
    async with api_gateway(tmp_path, api_config(tmp_path, llm.base_url)) as gateway, aiohttp.ClientSession() as http:
        async with http.post(f"{gateway.probe_url}/v1/turns", json={"question": "which?"},
                             headers=bearer(VIEWER_KEY)) as response:
            messages = [message async for message in sse_events(response)]  # to its end: leaving would stop it
        turn_id = messages[0][1]["turn_id"]
        async with http.get(f"{gateway.probe_url}/v1/turns/{turn_id}/card", headers=bearer(VIEWER_KEY)) as response:
            snapshots = [(event, data) async for event, data in sse_events(response)]
        async with http.get(f"{gateway.probe_url}/v1/turns/{turn_id}/card",
                            headers=bearer("other-key-is-not-configured")) as response:
            assert response.status == 401
    event, final = snapshots[-1]
    assert event == "snapshot" and final["final"] and final["status"] == "done" and final["turn_id"] == turn_id
    assert final["answer"] == "prod-db-01."
    assert [block["name"] for block in final["blocks"] if block["type"] == "tool"] == ["find_server"]


async def test_a_call_waiting_for_approval_is_approved_through_the_api(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    llm.enqueue(Script.tool_calls([("call_1", "list_servers", {})]), Script.text("All listed."))
    config = api_config(tmp_path, llm.base_url)
    config["access"]["roles"]["admin"]["approve"] = True
    config["access"]["approvals"] = {"tools": ["list_servers"]}
    config["access"]["roles"]["viewer"]["tools"] = ["*"]
    async with api_gateway(tmp_path, config) as gateway, aiohttp.ClientSession() as http:
        url = gateway.probe_url
        response = await http.post(f"{url}/v1/turns", json={"question": "list them"}, headers=bearer(ADMIN_KEY))
        events = sse_events(response)
        turn_id = (await anext(events))[1]["turn_id"]
        request: dict[str, Any] | None = None
        async for name, data in events:
            if name == "approval_requested":
                request = data
                break
        assert request is not None and request["name"] == "list_servers"
        async with http.get(f"{url}/v1/turns/{turn_id}/card", headers=bearer(ADMIN_KEY)) as card:
            async for _, snapshot in sse_events(card):
                if snapshot["approvals"]:  # the card shows the prompt the console draws its buttons from
                    assert snapshot["approvals"][0]["code"] == request["code"]
                    break
        vote = {"approve": True, "token": request["token"]}
        async with http.post(f"{url}/v1/approvals/{request['code']}", json=vote, headers=bearer(VIEWER_KEY)) as denied:
            assert denied.status == 403 and (await denied.json())["answer"] == "not_approver"
        async with http.post(f"{url}/v1/approvals/{request['code']}", json=vote, headers=bearer(ADMIN_KEY)) as voted:
            assert voted.status == 200 and (await voted.json())["answer"] == "decided"
        rest = [message async for message in events]
        response.close()
    names = [name for name, _ in rest]
    assert "approval_decided" in names and names[-1] == "done"
    finished = next(data for name, data in rest if name == "tool_call_finished")
    assert finished["ok"] is True and rest[-1][1]["result"]["answer"] == "All listed."
