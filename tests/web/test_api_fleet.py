"""The API in a fleet: two ``botgateway run`` processes on one Redis prefix (as two replicas behind a balancer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from tests.cli.gateway_process import free_port
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tests.web.api_harness import VIEWER_KEY, api_config, api_gateway, bearer, sse_events
from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as server:
        yield server


async def test_a_conversation_is_not_cleared_while_another_replica_runs_its_turn(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    llm.enqueue(Script(chunks=[role_chunk(), *text_chunks("Half an answer", 4), Pause(120), finish_chunk("stop")]))
    prefix = unique_prefix()
    urls = []
    try:
        async with AsyncExitStack() as stack:
            for name in ("replica-a", "replica-b"):
                config = api_config(tmp_path / name, llm.base_url,
                                    memory={"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
                                    gateway={"instance_id": name, "heartbeat_s": 0.5, "instance_ttl_s": 5.0},
                                    http={"enabled": True, "host": "127.0.0.1", "port": free_port()})
                urls.append((await stack.enter_async_context(api_gateway(tmp_path / name, config))).probe_url)
            a, b = urls
            async with aiohttp.ClientSession() as http:
                response = await http.post(f"{a}/v1/turns", headers=bearer(VIEWER_KEY),
                                           json={"question": "slow one", "conversation": "c"})
                async for event, _data in sse_events(response):
                    if event == "answer_delta":
                        break  # the turn runs in replica a
                async with http.delete(f"{b}/v1/conversations/c", headers=bearer(VIEWER_KEY)) as cleared:
                    assert cleared.status == 409, await cleared.text()  # asked of replica b, which runs nothing
                response.close()  # the client leaves: the turn stops
    finally:
        await purge_prefix(prefix)
