"""Prometheus metrics: a turn through the real runtime shows up on /metrics of the gateway's HTTP server."""

from __future__ import annotations

import asyncio

import aiohttp

from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cli.runtime import build_runtime
from botgateway.config import parse_config
from botgateway.messages import InboundMessage
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext
from tests.fakes.gateway import RecordingSink


async def test_a_finished_turn_is_counted_on_the_metrics_endpoint(tmp_path) -> None:
    config = parse_config(
        {
            "llm": {"provider": "demo"},
            "memory": {"sqlite_path": str(tmp_path / "m.db")},
            "metrics": {"enabled": True},
            "http": {"host": "127.0.0.1", "port": 0},
        },
        env={},
    )
    async with build_runtime(config) as runtime:
        assert runtime.http is not None
        await runtime.http.start()
        sink = RecordingSink()
        target = CardTarget(platform="test", chat_id="c", user_id="u", user_name="u")
        msg = InboundMessage("test", "m1", "conv", "which server is 10.0.1.100?", target, ToolContext(user_id="u", platform="test"))
        submission = await runtime.gateway.submit(msg, sink, BufferPolicy.from_config())
        outcome = await asyncio.wait_for(submission.done, 30)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{runtime.http.url}/metrics") as response:
                body = await response.text()
                content_type = response.headers["Content-Type"]
    assert outcome.outcome == "done"
    assert content_type.startswith("text/plain; version=")  # the Prometheus text format
    assert 'botgateway_turns_total{outcome="done",platform="test"} 1.0' in body
    assert 'botgateway_tool_calls_total{ok="true",tool="find_server"} 1.0' in body
    assert 'botgateway_card_api_calls_total{op="finalize",platform="test"} 1.0' in body
    assert 'botgateway_card_first_visible_seconds_count{platform="test"} 1.0' in body


async def test_metrics_alone_start_the_http_server_and_ask_builds_none(tmp_path) -> None:
    enabled = parse_config({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "m.db")},
                            "metrics": {"enabled": True}}, env={})
    neither = parse_config({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "m.db")}}, env={})
    async with build_runtime(enabled) as runtime:
        assert runtime.http is not None and runtime.readiness is not None
    async with build_runtime(neither) as runtime:
        assert runtime.http is None and runtime.readiness is None
