"""Prometheus metrics: a turn through the real runtime shows up on /metrics."""

from __future__ import annotations

import asyncio

import aiohttp

from botgateway.cards.policy import BufferPolicy
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
            "metrics": {"enabled": True, "host": "127.0.0.1", "port": 0},
        },
        env={},
    )
    async with build_runtime(config) as runtime:
        assert runtime.metrics is not None
        sink = RecordingSink()
        target = CardTarget(platform="test", chat_id="c", user_id="u", user_name="u")
        msg = InboundMessage("test", "m1", "conv", "which server is 10.0.1.100?", target, ToolContext(user_id="u", platform="test"))
        submission = await runtime.gateway.submit(msg, sink, BufferPolicy.from_config())
        outcome = await asyncio.wait_for(submission.done, 30)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{runtime.metrics.port}/metrics") as response:
                body = await response.text()
    assert outcome.outcome == "done"
    assert 'botgateway_turns_total{outcome="done",platform="test"} 1.0' in body
    assert 'botgateway_tool_calls_total{ok="true",tool="find_server"} 1.0' in body
    assert 'botgateway_card_api_calls_total{op="finalize",platform="test"} 1.0' in body
    assert 'botgateway_card_first_visible_seconds_count{platform="test"} 1.0' in body


async def test_a_busy_metrics_port_is_a_config_error(tmp_path) -> None:
    import socket

    import pytest

    from botgateway.config import ConfigError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = parse_config(
            {
                "llm": {"provider": "demo"},
                "memory": {"sqlite_path": str(tmp_path / "m.db")},
                "metrics": {"enabled": True, "host": "127.0.0.1", "port": port},
            },
            env={},
        )
        with pytest.raises(ConfigError, match="metrics.port"):
            async with build_runtime(config):
                pass
