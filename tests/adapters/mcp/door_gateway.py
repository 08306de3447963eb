"""``botgateway run`` serving ``/mcp`` as a real process, once per test module, and MCP clients pointed at it.

The gateway runs the sample inventory, the offline demo model (the door never
asks it) and SQLite in its own folder, with keys of four roles: ``ops`` an
admin (every tool), ``dash`` a viewer (two lookups), ``stg`` a role scoped to
the staging hosts, ``busy`` a role allowed one call a minute; ``lost`` is a key
no role lists. Calls of ``list_servers`` need an approver.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.paths import REPO, SAMPLE_INVENTORY
from tests.ports import free_port

__all__ = ["KEYS", "DoorGateway", "door_config", "http_client", "running_gateway"]

KEYS = {name: f"{name}-key-0123456789abcdef" for name in ("ops", "dash", "stg", "busy", "lost")}
"""Each configured key by its name (its principal is ``api:<name>``)."""

_FOREIGN = ("LLM_", "OPENAI_", "SLACK_", "DINGTALK_", "REDIS_", "BOTGATEWAY_", "ALIBABA_CLOUD_", "POD_NAME", "HOSTNAME")
"""Variables of the machine a config may read: the process must not pick them up."""


def door_config(folder: Path, port: int) -> dict[str, Any]:
    """The gateway's config: ``/mcp`` on ``port``, the five keys and their roles."""
    return {
        "log": {"level": "info", "format": "json"},
        "memory": {"store": "sqlite", "sqlite_path": str(folder / "data" / "state.db")},
        "http": {"enabled": True, "host": "127.0.0.1", "port": port},
        "adapters": {"terminal": {"enabled": False}},
        "tools": {"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}},
        "web": {"api_keys": [{"name": name, "key": key} for name, key in KEYS.items()]},
        "access": {
            "default_role": "none",
            "roles": {
                "admin": {"members": ["api:ops"], "tools": ["*"]},
                "viewer": {"members": ["api:dash"], "tools": ["find_server", "find_resource"]},
                "staging": {"members": ["api:stg"], "tools": ["find_resource"],
                            "scopes": [{"provider": "inventory", "tags": {"env": "staging"}}]},
                "tight": {"members": ["api:busy"], "tools": ["find_server"], "limits": {"turns_per_minute": 1}},
            },
            "approvals": {"tools": ["list_servers"]},
        },
    }


def clean_env() -> dict[str, str]:
    """This environment without what a config may read, the repository on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(REPO)
    return env


@dataclass(frozen=True)
class DoorGateway:
    """One running gateway."""

    url: str
    """``http://127.0.0.1:<port>``."""
    folder: Path
    """Its working folder (its config, its store, its log)."""

    @property
    def mcp_url(self) -> str:
        """Where the door is."""
        return f"{self.url}/mcp"

    @property
    def config_path(self) -> Path:
        """Its config file."""
        return self.folder / "config.yaml"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_gateway(folder: Path) -> Iterator[DoorGateway]:
    """``botgateway run`` in ``folder``, ready; stopped with SIGTERM (killed if it hangs)."""
    port = free_port()
    gateway = DoorGateway(url=f"http://127.0.0.1:{port}", folder=folder)
    gateway.config_path.write_text(yaml.safe_dump(door_config(folder, port)))
    with (folder / "gateway.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "botgateway.cli", "run", "-c", str(gateway.config_path)],
            cwd=folder, env=clean_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _ready(gateway.url):  # polls the real process's probe, as a load balancer does
            assert process.poll() is None, (folder / "gateway.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the gateway did not get ready within 60 s"
            time.sleep(0.05)
        yield gateway
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (folder / "gateway.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def http_client(gateway: DoorGateway, key: str, *, mode: str = "auto") -> AsyncIterator[Client]:
    """The official MCP client on the door's streamable HTTP transport, sending ``key``; ``mode="legacy"`` speaks
    the 2025 protocol (an ``initialize`` handshake), as most IDEs do today."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    try:
        async with Client(streamable_http_client(gateway.mcp_url, http_client=http), mode=mode) as client:
            yield client
    finally:
        await http.aclose()
