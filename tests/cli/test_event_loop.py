"""The event loop ``botgateway run`` serves on (``gateway.event_loop``)."""

from __future__ import annotations

import asyncio

import pytest

from botgateway.cli.event_loop import loop_factory, run
from botgateway.config import ConfigError, parse_config


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_serves_on_uvloop_and_asyncio_on_asyncios_own() -> None:
    pytest.importorskip("uvloop")  # a dependency wherever uvloop builds (not Windows, not PyPy)
    assert run(_loop_module(), "auto").startswith("uvloop")
    assert loop_factory("asyncio") is None
    assert run(_loop_module(), "asyncio").startswith("asyncio")


def test_the_config_names_one_of_the_two() -> None:
    assert parse_config({}, env={}).gateway.event_loop == "auto"
    assert parse_config({"gateway": {"event_loop": "asyncio"}}, env={}).gateway.event_loop == "asyncio"
    with pytest.raises(ConfigError, match="event_loop"):
        parse_config({"gateway": {"event_loop": "trio"}}, env={})
