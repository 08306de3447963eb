"""Logging: one pipeline for structlog and stdlib loggers, secrets masked, turn context bound."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import SecretStr

from botgateway.config import LogConfig, parse_config
from botgateway.logs import bind_turn, configure_logging, secret_values


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_mask_secrets_by_key_by_shape_and_by_value() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json"), stream=out, secrets=["my-very-own-api-key"])
    log = structlog.get_logger("botgateway.test")

    log.info(
        "slack.connect",
        bot_token="xoxb-1111-2222-abcdefabcdef",
        client_secret=SecretStr("dingtalk-app-secret"),
        api_key="",
        prompt_tokens=120,
        completion_tokens=30,
        url="https://oapi.dingtalk.com/gettoken?access_token=0123456789abcdef&x=1",
        headers={"Authorization": "Bearer sk-live-abcdefghijkl", "Accept": "application/json"},
        note="app token xapp-1-A0123-4567-deadbeef and key sk-proj-abcdefghijklmnop",
        calls=[{"name": "aliyun", "password": "hunter2hunter2"}],
        echo="configured key is my-very-own-api-key",
        redis="redis://:redispass99@10.0.0.5:6379/0",
    )

    text = out.getvalue()
    for secret in (
        "xoxb-1111",
        "dingtalk-app-secret",
        "0123456789abcdef",
        "sk-live-abcdefghijkl",
        "xapp-1-A0123",
        "sk-proj-abcdefghijklmnop",
        "hunter2hunter2",
        "my-very-own-api-key",
        "redispass99",
    ):
        assert secret not in text, secret
    [event] = json_lines(out)
    assert event["event"] == "slack.connect"
    assert event["bot_token"] == "***"
    assert event["client_secret"] == "***"
    assert event["api_key"] == ""  # an empty secret is shown as empty: useful when debugging config
    assert event["prompt_tokens"] == 120 and event["completion_tokens"] == 30
    assert event["url"] == "https://oapi.dingtalk.com/gettoken?access_token=***&x=1"
    assert event["headers"] == {"Authorization": "***", "Accept": "application/json"}
    assert event["note"] == "app token xapp-*** and key sk-***"
    assert event["calls"] == [{"name": "aliyun", "password": "***"}]
    assert event["echo"] == "configured key is ***"
    assert event["redis"] == "redis://:***@10.0.0.5:6379/0"
    assert event["level"] == "info" and event["logger"] == "botgateway.test"
    assert event["timestamp"].endswith("Z")


def test_sdk_loggers_go_through_the_same_pipeline() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json"), stream=out)

    logging.getLogger("slack_bolt.AsyncApp").warning("Failed to call %s with token %s", "chat.update", "xoxb-42-secretvalue")
    logging.getLogger("dingtalk_stream").info("open connection, url=wss://x/connect?ticket=abc&access_token=tok123456")
    try:
        raise ConnectionError("POST https://api.example.com failed: Authorization: Bearer abcdef123456")
    except ConnectionError:
        logging.getLogger("aiohttp.client").exception("request failed")

    events = json_lines(out)
    assert [e["logger"] for e in events] == ["slack_bolt.AsyncApp", "dingtalk_stream", "aiohttp.client"]
    assert events[0]["event"] == "Failed to call chat.update with token xoxb-***"
    assert events[0]["level"] == "warning"
    assert "tok123456" not in events[1]["event"] and "access_token=***" in events[1]["event"]
    assert "ConnectionError" in events[2]["exception"]
    assert "abcdef123456" not in events[2]["exception"] and "Bearer ***" in events[2]["exception"]


def test_exception_text_is_redacted_for_structlog_loggers_too() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json"), stream=out)
    try:
        raise RuntimeError("login failed password=pa55word!")
    except RuntimeError:
        structlog.get_logger("x").exception("turn.crashed")
    [event] = json_lines(out)
    assert "pa55word" not in event["exception"] and "password=***" in event["exception"]


def test_turn_context_is_bound_nested_and_restored() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json"), stream=out)
    log = structlog.get_logger("botgateway.loop.tool_loop")

    with bind_turn(conversation="C1:170.0", user="U1", platform="slack", turn_id="t-1"):
        log.info("turn.start")
        with bind_turn(round=2):
            log.info("round.start")
            logging.getLogger("openai").info("stdlib inside the turn")
        log.info("turn.end")
    log.info("after")

    events = json_lines(out)
    context = {"conversation": "C1:170.0", "user": "U1", "platform": "slack", "turn_id": "t-1"}
    assert {k: events[0][k] for k in context} == context and "round" not in events[0]
    assert events[1]["round"] == 2 and events[1]["turn_id"] == "t-1"
    assert events[2]["round"] == 2 and events[2]["turn_id"] == "t-1" and events[2]["logger"] == "openai"
    assert "round" not in events[3] and events[3]["turn_id"] == "t-1"
    assert not set(context) & set(events[4])


async def test_turn_context_follows_tasks_and_stays_per_turn() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json"), stream=out)
    log = structlog.get_logger("botgateway.gateway")
    both_bound = asyncio.Barrier(2)

    async def tool_call() -> None:
        log.info("tool.done")

    async def turn(turn_id: str) -> None:
        with bind_turn(turn_id=turn_id, platform="dingtalk", user=None):
            await both_bound.wait()  # both turns are bound at the same time
            await asyncio.create_task(tool_call())  # a task started inside inherits the context
            log.info("turn.done")

    await asyncio.gather(turn("a"), turn("b"))
    events = json_lines(out)
    assert sorted((e["event"], e["turn_id"]) for e in events) == [
        ("tool.done", "a"), ("tool.done", "b"), ("turn.done", "a"), ("turn.done", "b")
    ]
    assert all("user" not in e and e["platform"] == "dingtalk" for e in events)


def test_console_format_is_readable_and_redacted() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="console"), stream=out)
    with bind_turn(turn_id="t-9"):
        structlog.get_logger("botgateway").info("card.updated", chars=42, app_token="xapp-1-secretsecret")
    line = out.getvalue()
    assert "card.updated" in line and "chars=42" in line and "turn_id=t-9" in line
    assert "secretsecret" not in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_auto_picks_console_on_a_terminal_and_json_otherwise() -> None:
    piped = io.StringIO()
    configure_logging(LogConfig(format="auto"), stream=piped)
    structlog.get_logger("x").info("piped")
    assert json_lines(piped)[0]["event"] == "piped"

    tty = TtyStream()
    configure_logging(LogConfig(format="auto"), stream=tty)
    structlog.get_logger("x").info("on.terminal")
    assert "on.terminal" in tty.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(tty.getvalue().splitlines()[0])
    assert "on.terminal" not in piped.getvalue()  # the old handler was replaced, not duplicated


def test_level_filters_structlog_and_stdlib() -> None:
    out = io.StringIO()
    configure_logging(LogConfig(format="json", level="warning"), stream=out)
    structlog.get_logger("x").info("hidden")
    logging.getLogger("slack_sdk").info("hidden too")
    structlog.get_logger("x").warning("shown")
    assert [e["event"] for e in json_lines(out)] == ["shown"]


def test_logs_go_to_the_configured_file(tmp_path: Path) -> None:
    target = tmp_path / "logs" / "botgateway.log"
    configure_logging(LogConfig(format="json", file=str(target)))
    structlog.get_logger("x").info("to.file", token="xoxp-12345-abcdef")
    for handler in logging.getLogger().handlers:
        handler.flush()
    [line] = target.read_text(encoding="utf-8").splitlines()
    event = json.loads(line)
    assert event["event"] == "to.file" and event["token"] == "***"


def test_secret_values_collects_every_configured_secret() -> None:
    config = parse_config(
        {
            "llm": {"provider": "deepseek", "api_key": "sk-deepseek-123456"},
            "memory": {"redis_url": "redis://:redis-pass-77@10.0.0.5:6379/0"},
            "adapters": {"slack": {"bot_token": "xoxb-1-2-3", "app_token": "xapp-9"}},
            "tools": {"mcp": [{"name": "m", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "hdr-secret-1"}}]},
        },
        env={},
    )
    values = set(secret_values(config))
    assert {"sk-deepseek-123456", "xoxb-1-2-3", "xapp-9", "hdr-secret-1", "redis-pass-77"} <= values
    assert "" not in values
    # The default Redis URL has no password: masking it would only hide where state lives.
    assert not any(value.startswith("redis://") for value in values)
