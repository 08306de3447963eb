"""``botgateway run`` serving the HTTP API, as a real process against the scripted model.

:func:`api_gateway` starts it with the API's keys and the sample inventory, no
chat adapter, and waits for ``/readyz``; :func:`sse_events` reads a
``text/event-stream`` answer into ``(event, data)`` pairs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.cli.gateway_process import GatewayProcess, free_port, start_gateway
from tests.paths import REPO

__all__ = ["ADMIN_KEY", "VIEWER_KEY", "api_config", "api_gateway", "bearer", "sse_events"]

ADMIN_KEY = "admin-key-0123456789abcdef"
"""The key of ``api:ops`` (the ``admin`` role: every tool)."""
VIEWER_KEY = "viewer-key-0123456789abcdef"
"""The key of ``api:dash`` (the ``viewer`` role: ``find_server`` only)."""
INVENTORY = REPO / "tools" / "sample_inventory.yaml"


def bearer(key: str) -> dict[str, str]:
    """The ``Authorization`` header of ``key``."""
    return {"Authorization": f"Bearer {key}"}


def api_config(tmp_path: Path, llm_url: str, **sections: dict[str, Any]) -> dict[str, Any]:
    """The API on a free loopback port, two keys (``ops`` an admin, ``dash`` a viewer), the scripted model."""
    config: dict[str, Any] = {
        "log": {"level": "info", "format": "json"},
        "llm": {"provider": "custom", "base_url": llm_url, "api_key": "scripted", "model": "scripted-model",
                "max_retries": 0},
        "memory": {"store": "sqlite", "sqlite_path": str(tmp_path / "data" / "state.db")},
        "http": {"enabled": True, "host": "127.0.0.1", "port": free_port()},
        "card": {"footer": False, "show_thought": False},
        "adapters": {"terminal": {"enabled": False}},
        "tools": {"inventory": {"enabled": True, "path": str(INVENTORY)}},
        "web": {"api_keys": [{"name": "ops", "key": ADMIN_KEY}, {"name": "dash", "key": VIEWER_KEY}]},
        "access": {
            "default_role": "none",
            "roles": {
                "admin": {"members": ["api:ops"], "tools": ["*"]},
                "viewer": {"members": ["api:dash"], "tools": ["find_server"]},
            },
        },
    }
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return config


@contextlib.asynccontextmanager
async def api_gateway(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[GatewayProcess]:
    """``botgateway run`` with ``config``, ready; stopped with SIGTERM (killed if a test failed half-way)."""
    import signal

    tmp_path.mkdir(parents=True, exist_ok=True)
    gateway = await start_gateway(tmp_path, config)
    try:
        await gateway.wait_readyz(200)
        yield gateway
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait() == 0, gateway.output()[-3000:]
    finally:
        await gateway.kill()


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` messages of an SSE answer, as they arrive."""
    event, data = "message", ""
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
        elif not line and data:
            yield event, json.loads(data)
            event, data = "message", ""
