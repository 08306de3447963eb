"""``botgateway run`` as a real process against the fake Slack (Socket Mode) and the scripted model.

:func:`start_gateway` writes the config and starts ``python -m botgateway.cli
run`` with a clean environment, its output in a log file; the returned
:class:`GatewayProcess` waits for ``/readyz``, sends signals, waits for the exit
and, when a test fails half-way, kills whatever is left (worker processes
included: their pids are in the supervisor's log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.paths import REPO
from tests.ports import free_port

__all__ = ["GatewayProcess", "free_port", "gateway_config", "start_gateway"]

_FOREIGN = ("LLM_", "OPENAI_", "SLACK_", "DINGTALK_", "REDIS_", "BOTGATEWAY_", "ALIBABA_CLOUD_", "POD_NAME", "HOSTNAME")
"""Variables of the machine a config may read: the process must not pick them up."""


def gateway_config(tmp_path: Path, *, llm_url: str, fake: FakeSlack, http_port: int, **sections: dict[str, Any]) -> dict[str, Any]:
    """A config: the scripted model, Slack Socket Mode on ``fake`` (edit mode), SQLite in ``tmp_path``, probes on
    ``http_port``; ``sections`` are merged over it key by key."""
    config: dict[str, Any] = {
        "log": {"level": "info", "format": "json"},
        "llm": {"provider": "custom", "base_url": llm_url, "api_key": "drain-test", "model": "m", "max_rounds": 2,
                "max_retries": 0},
        "memory": {"store": "sqlite", "sqlite_path": str(tmp_path / "data" / "state.db")},
        "gateway": {"drain_s": 30},
        "http": {"enabled": True, "host": "127.0.0.1", "port": http_port},
        "card": {"footer": False, "show_thought": False, "final_deadline_s": 15},
        "adapters": {
            "terminal": {"enabled": False},
            "slack": {
                "enabled": True, "mode": "socket", "bot_token": BOT_TOKEN, "app_token": APP_TOKEN,
                "api_base_url": fake.api_url, "streaming": "edit", "locale": "en",
                "policy": {"answer": {"min_chars": 1, "min_interval_s": 0.05, "max_wait_s": 0.2}},
            },
        },
    }
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return config


@dataclass
class GatewayProcess:
    """One running ``botgateway run`` (or its supervisor)."""

    process: asyncio.subprocess.Process
    log_path: Path
    probe_url: str

    def output(self) -> str:
        """Everything it wrote so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Its JSON log lines so far."""
        lines = []
        for raw in self.output().splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line, dict):
                    lines.append(line)
        return lines

    def worker_pids(self) -> list[int]:
        """Pids of the worker processes a supervisor spawned."""
        return [int(line["pid"]) for line in self.log_lines() if line.get("event") == "supervisor.worker_spawned"]

    async def readyz(self) -> int:
        """The status ``/readyz`` answers now (0 when nothing answers)."""
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{self.probe_url}/readyz") as response:
                return response.status
        except aiohttp.ClientError:
            return 0

    async def wait_readyz(self, status: int, timeout: float = 60.0) -> None:
        """Poll ``/readyz`` (as a load balancer does) until it answers ``status``; fail when the process exits first."""
        async def poll() -> None:
            while await self.readyz() != status:
                if self.process.returncode is not None:
                    raise AssertionError(f"botgateway exited {self.process.returncode}:\n{self.output()[-4000:]}")
                await asyncio.sleep(0.05)  # paces the polling only; the condition is the probe's answer

        await asyncio.wait_for(poll(), timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process."""
        if self.process.returncode is None:
            self.process.send_signal(sig)

    async def wait(self, timeout: float = 60.0) -> int:
        """Its exit code (fails the test if it does not exit within ``timeout``)."""
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def kill(self) -> None:
        """Kill it and every worker it started (clean-up after a failed test)."""
        for pid in self.worker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


async def start_gateway(tmp_path: Path, config: dict[str, Any], *args: str) -> GatewayProcess:
    """Write ``config`` and start ``botgateway run -c CONFIG ARGS…`` with a clean environment."""
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True))
    log_path = tmp_path / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(REPO)
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "botgateway.cli", "run", "-c", str(config_path), *args,
            cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )
    http = config["http"]
    return GatewayProcess(process=process, log_path=log_path, probe_url=f"http://{http['host']}:{http['port']}")
